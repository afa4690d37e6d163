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
"""

from __future__ import annotations

from dataclasses import dataclass

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
