"""What a subject's outputs say about it, checked once at every point it is timed.

:func:`classify` reads one call's ``(sampled, num_sampled)`` against the inputs, and against
``mrv2``'s output on the same inputs where that is given, and returns one of
:data:`specsample.schema.SEMANTICS`:

- ``"violates placeholder semantics"``: a count outside ``[1, n_r + 1]``; a draft accepted at or
  after the request's first ``-1`` (``num_sampled - 1`` above ``m_r``, the valid drafts before
  it); an accepted token that is not the draft it accepts; an emitted token outside ``[0, V)``
  (a ``-1`` emitted, say). The detail names the first request that breaks a rule.
- ``"same draws"``: every request emits exactly ``mrv2``'s tokens (``mrv2``, ``fast`` and the
  vLLM releases with the PR #50939 fix draw the same Philox numbers, so they agree draw for
  draw on the same inputs).
- ``"same semantics, other stream"``: the rules hold, but the tokens differ from ``mrv2``'s: a
  subject with its own random numbers (or one whose stream our reference does not reproduce).

The check costs one extra call and a host read-back per subject and point, outside the timed
region.

Paths (:func:`check_paths`, docs/paths.md): at a point that turns on one of vLLM's newer sampler
paths, the rules above hold on every path (placeholder truncation included), and each path's own
rule is checked too; a broken one is ``"violates path semantics"``:

- FLy: every request's accepted prefix is the one FLy's rules give (:mod:`specsample.reference.fly`:
  a rejection deferred only where the row's top-k entropy reaches the threshold, the draft is
  deferrable and its window fits and then passes); and no accepted draft has target
  probability 0 (neither a native acceptance nor a deferral can accept one);
- watermarking: a second call on the same inputs (key, contexts) gives the same tokens, and a
  call with another key changes some watermarked draw (the key is used);
- the speed paths (masked-block skipping, a sharded draft-logits cache): the same call without
  the path emits the same tokens.

Every checked point also reports its acceptance rate (accepted drafts over valid drafts) and,
with FLy, its deferral rate (drafts accepted by a confirmed deferral over valid drafts).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch


@dataclass(frozen=True)
class Verdict:
    semantics: str  # one of specsample.schema.SEMANTICS
    detail: str = ""
    differing_requests: int = 0  # requests whose emitted tokens differ from mrv2's


def _requests(inputs: dict) -> tuple[list[int], list[int], list[list[int]]]:
    """Per request: drafts ``n_r``, valid drafts before the first -1 ``m_r``, and the drafts."""
    cu = inputs["cu_num_logits"].tolist()
    tokens = inputs["draft_sampled"].tolist()
    n, m, drafts = [], [], []
    for start, end in zip(cu[:-1], cu[1:]):
        d = tokens[start + 1 : end]
        n.append(len(d))
        valid = 0
        while valid < len(d) and d[valid] >= 0:
            valid += 1
        m.append(valid)
        drafts.append(d)
    return n, m, drafts


def vocab_size(inputs: dict) -> int:
    v = inputs["target_logits"].shape[1]
    if inputs.get("draft_logits") is not None:
        v = min(v, inputs["draft_logits"].shape[-1])
    return v


def violation(inputs: dict, sampled: torch.Tensor, num_sampled: torch.Tensor) -> str | None:
    """The first broken rule of the module docstring, as a sentence, or ``None``."""
    n, m, drafts = _requests(inputs)
    v = vocab_size(inputs)
    rows = sampled.to(torch.int64).cpu().tolist()
    counts = num_sampled.to(torch.int64).cpu().tolist()
    if len(counts) != len(n):
        return f"num_sampled has {len(counts)} entries for {len(n)} requests"
    for r, (count, row) in enumerate(zip(counts, rows)):
        if not 1 <= count <= n[r] + 1:
            return f"request {r}: num_sampled {count} outside [1, {n[r] + 1}]"
        tau = count - 1
        if tau > m[r]:
            return f"request {r}: {tau} drafts accepted, but its first -1 is draft {m[r] + 1} (drafts {drafts[r]})"
        emitted = row[:count]
        if emitted[:tau] != drafts[r][:tau]:
            return f"request {r}: accepted tokens {emitted[:tau]} are not its drafts {drafts[r][:tau]}"
        bad = [t for t in emitted if not 0 <= t < v]
        if bad:
            return f"request {r}: emitted token {bad[0]} outside [0, {v})"
    return None


def classify(
    inputs: dict,
    out: tuple[torch.Tensor, torch.Tensor],
    reference: tuple[torch.Tensor, torch.Tensor] | None = None,
) -> Verdict:
    """The :data:`~specsample.schema.SEMANTICS` of one call's output ``out`` on ``inputs``;
    ``reference`` is ``mrv2``'s output on the same inputs."""
    sampled, num_sampled = out
    broken = violation(inputs, sampled, num_sampled)
    if broken:
        return Verdict("violates placeholder semantics", broken)
    if reference is None:
        return Verdict("same semantics, other stream", "no mrv2 output to compare with")
    differing = _differing(out, reference)
    if differing == 0:
        return Verdict("same draws")
    return Verdict(
        "same semantics, other stream",
        f"{differing} of {len(num_sampled)} requests emit other tokens than mrv2",
        differing,
    )


def _differing(out, reference) -> int:
    rows = out[0].to(torch.int64).cpu().tolist()
    counts = out[1].to(torch.int64).cpu().tolist()
    ref_rows = reference[0].to(torch.int64).cpu().tolist()
    ref_counts = reference[1].to(torch.int64).cpu().tolist()
    return sum(c != rc or row[:c] != ref[:rc] for row, c, ref, rc in zip(rows, counts, ref_rows, ref_counts))


@dataclass(frozen=True)
class PathVerdict:
    """A path rule broken (a sentence) or None, and the rates measured at the point."""

    violation: str | None = None
    rates: dict = field(default_factory=dict)


# Watermarking is judged key-dependent only with this many non-greedy requests: with fewer, every
# resampled token may be a row's top token under both keys.
MIN_REQUESTS_FOR_KEY_CHECK = 16


def check_paths(w, inputs: dict, out: tuple[torch.Tensor, torch.Tensor], call: Callable[[dict], tuple]) -> PathVerdict:
    """The path rules of the module docstring for workload ``w`` (a
    :class:`specsample.workloads.Workload`); ``call(inputs)`` runs the subject again."""
    n, m, drafts = _requests(inputs)
    counts = out[1].to(torch.int64).cpu().tolist()
    taus = [c - 1 for c in counts]
    valid = sum(m)
    rates = {"acceptance_rate": (sum(min(t, mr) for t, mr in zip(taus, m)) / valid) if valid else None}
    broken = None
    if w.fly_window_size:
        broken, rates["deferral_rate"] = _check_fly(w, inputs, taus, valid)
    if broken is None and w.watermark:
        broken = _check_watermark(inputs, out, call)
    if broken is None:
        broken = _check_speed_paths(w, inputs, out, call)
    return PathVerdict(broken, rates)


# The speed paths, and the inputs that turn each on: the same call without them must emit the
# same tokens (a masked block holds no token the resample could draw; a sharded cache holds the
# same draft logits at other rows).
_SPEED_PATH_INPUTS = {
    "skip_masked_vocab_blocks": ("skip_masked_vocab_blocks",),
    "sharded draft-logits cache": ("draft_logits_cache_values", "draft_logits_row_mapping"),
}


def _check_speed_paths(w, inputs: dict, out, call) -> str | None:
    for path, names in _SPEED_PATH_INPUTS.items():
        if any(name in inputs for name in names):
            plain = call({k: v for k, v in inputs.items() if k not in names})
            differing = _differing(out, plain)
            if differing:
                return f"{path} changes the draws: {differing} of {len(out[1])} requests emit other tokens without it"
    return None


def _check_fly(w, inputs: dict, taus: list[int], valid: int) -> tuple[str | None, float | None]:
    from .reference.fly import fly_outcomes
    from .workloads import FLY_ENTROPY_THRESHOLD, FLY_ENTROPY_TOP_K

    threshold = inputs.get("fly_entropy_threshold", FLY_ENTROPY_THRESHOLD)
    top_k = inputs.get("fly_entropy_top_k", FLY_ENTROPY_TOP_K)
    outcomes = fly_outcomes(inputs, w.fly_window_size, threshold, top_k)
    target = inputs["target_logits"]
    cu = inputs["cu_num_logits"].tolist()
    tokens = inputs["draft_sampled"].tolist()
    deferred = 0
    for r, (tau, o) in enumerate(zip(taus, outcomes)):
        for i in range(max(tau, 0)):
            d = tokens[cu[r] + 1 + i]
            if d >= 0 and not bool(target[cu[r] + i, d] > float("-inf")):
                return f"request {r}: draft {i + 1} ({d}) accepted with target probability 0", None
        if o.ambiguous:
            continue
        if tau != o.tau:
            return (
                f"request {r}: {tau} drafts accepted, FLy's rules (W={w.fly_window_size}, threshold "
                f"{threshold:g}, top-{top_k}) accept {o.tau} (native decisions {list(o.native)})",
                None,
            )
        deferred += sum(1 for i in range(tau) if not o.native[i])
    return None, (deferred / valid if valid else None)


def _check_watermark(inputs: dict, out, call) -> str | None:
    again = call(inputs)
    if _differing(again, out):
        return "two calls with the same key and contexts emit different tokens"
    non_greedy = int((inputs["temperature"][inputs["idx_mapping"].long()] > 0).sum())
    if non_greedy < MIN_REQUESTS_FOR_KEY_CHECK:
        return None
    other = call(dict(inputs, watermark_key=inputs["watermark_key"] ^ 0x9E3779B97F4A7C15))
    if not _differing(other, out):
        return f"another watermark key changes none of {non_greedy} non-greedy requests' tokens: the key is not used"
    return None
