"""Exactness: does a subject's output still follow the target distribution?

Speculative decoding with standard (Leviathan et al.) or block (Sun et al.) verification is
lossless: the tokens it emits follow the target's law exactly, whatever the drafts. Sign-off's
draw-for-draw checks cannot see a change that keeps the semantics of placeholders but bends the
law, nor a drafting sampler whose noise is correlated with the verifier's. This module measures
the law itself (method, thresholds and power: ``docs/exactness.md``).

One **trial** is one request of ``K + 1`` rows that all hold the same target distribution ``p``
(a context-free, position-free target, so the emitted sequence must be i.i.d. ``p``), with draft
distributions ``q_0 .. q_{K-1}``, one per step, at ``T = 1``, on a narrow vocabulary (default
``V = 16``). Many trials are one batched call. For each emitted position ``j`` (requests with
``num_sampled > j``) the tokens must follow ``p``: a chi-square test per position. The number of
accepted drafts must follow the verification's acceptance law: ``P(accepted >= i) = prod_{s<i}
sum_x min(p, q_s)`` for standard verification, and for block verification the law computed by
enumerating every draft sequence (``V ** K`` of them) with the block rule of
``docs/algorithm.md``. A check is **biased** where any of its ``K + 2`` tests has a p-value below
``FAMILY_ALPHA / (K + 2)`` (Bonferroni).

**Drafting.** ``independent``: drafts drawn from ``q_s`` with torch's generator, independent of
every subject's noise (today's workloads). ``production``: drafts drawn by the subject's own
drafting sampler (:mod:`specsample.subjects.vllm.drafting`), with its drafting flag where it has
one, on the ``(seed, position)`` stream the engine uses. ``production-unsalted``: the same with
the flag off, where the release takes the flag. A subject without a drafting sampler, or without
the flag, gets a ``skipped`` row with the reason.

**Planted** (positive control): subject ``planted`` is ``mrv2`` with its first emitted token
moved to the next token id in about 2% of requests (chosen by the request's seed): bias that a
correct check must flag.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

FAMILY_ALPHA = 1e-4  # per check (subject, mode, drafting): chance that an exact subject is flagged
DRAFTINGS = ("independent", "production", "production-unsalted")
MODES = ("standard", "block")  # the modes that claim the target's law (greedy is a point mass)
PLANTED = "planted"
PLANTED_BASE = "mrv2"
PLANTED_RATE = 0.02
DEFAULT_TRIALS = 200_000
DEFAULT_VOCAB = 16
DEFAULT_STEPS = 3
MIN_EXPECTED = 5.0  # chi-square bins with a smaller expected count are merged
MAX_ENUMERATED = 2_000_000  # V ** K draft sequences enumerated for the block acceptance law
SCHEMA = 1
SUFFIX = ".exactness"  # results/<machine>/<sha8>.exactness, one JSON object a line
# What the nightly checks besides the tier's vLLM subjects (the newest release, vllm@main): our
# samplers that claim the target's law, and the planted control that must be flagged.
NIGHTLY_OURS = ("mrv2", "fast", "express")


@dataclass(frozen=True)
class Law:
    """The trial distributions: ``target_logits`` [V] (float32 values), ``draft_logits`` [K, V];
    ``p`` and ``q`` their softmaxes in float64, from the float32 values the samplers read."""

    target_logits: np.ndarray
    draft_logits: np.ndarray

    @property
    def vocab_size(self) -> int:
        return self.target_logits.shape[-1]

    @property
    def num_speculative_steps(self) -> int:
        return self.draft_logits.shape[0]

    @property
    def p(self) -> np.ndarray:
        return _softmax(self.target_logits.astype(np.float64))

    @property
    def q(self) -> np.ndarray:
        return _softmax(self.draft_logits.astype(np.float64))


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(axis=-1, keepdims=True))
    return e / e.sum(axis=-1, keepdims=True)


def make_law(vocab_size: int = DEFAULT_VOCAB, num_speculative_steps: int = DEFAULT_STEPS, seed: int = 0) -> Law:
    """A target with a spread of probabilities (std-1.5 Gaussian logits: the smallest of 16 bins
    holds about 0.5%) and drafts that agree with it partly (the target plus std-1 noise, another
    draw per step), so every position is reached and rejections are common (acceptance per step
    about 0.6-0.8)."""
    rng = np.random.default_rng(seed)
    target = (1.5 * rng.standard_normal(vocab_size)).astype(np.float32)
    noise = rng.standard_normal((num_speculative_steps, vocab_size))
    draft = (target[None, :] + noise).astype(np.float32)
    return Law(target, draft)


# ---------------------------------------------------------------------------------------------
# Theoretical acceptance laws


def standard_acceptance_law(law: Law) -> np.ndarray:
    """``P(accepted = i)``, ``i = 0..K``, under standard verification with independent drafts."""
    beta = np.minimum(law.p[None, :], law.q).sum(axis=1)  # [K] acceptance per reached step
    reach = np.concatenate([[1.0], np.cumprod(beta)])  # P(accepted >= i)
    return reach - np.concatenate([reach[1:], [0.0]])


def block_acceptance_law(law: Law) -> np.ndarray:
    """``P(accepted = i)``, ``i = 0..K``, under block verification (Sun et al.; the rule of
    ``docs/algorithm.md``): every draft sequence enumerated with its probability, its prefix
    ratios ``pi``, residual masses ``Z`` and thresholds ``h``; ``tau`` the last step whose
    independent uniform passes its threshold."""
    p, q = law.p, law.q
    K, V = q.shape
    if V**K > MAX_ENUMERATED:
        raise ValueError(f"block acceptance law: V ** K = {V**K} draft sequences is too many to enumerate")
    seqs = np.array(list(itertools.product(range(V), repeat=K)), dtype=np.int64)  # [S, K]
    prob = np.prod(q[np.arange(K)[None, :], seqs], axis=1)  # [S]
    ratio = p[seqs] / q[np.arange(K)[None, :], seqs]  # [S, K]
    pi = np.empty_like(ratio)
    acc = np.ones(len(seqs))
    for i in range(K):
        acc = np.minimum(acc * ratio[:, i], 1.0)
        pi[:, i] = acc  # after i + 1 drafts
    h = np.empty_like(pi)
    for i in range(K):
        if i + 1 < K:
            Z = np.maximum(pi[:, i, None] * p[None, :] - q[i + 1][None, :], 0.0).sum(axis=1)
            denom = Z + 1.0 - pi[:, i]
            h[:, i] = np.where(denom > 0, Z / np.where(denom > 0, denom, 1.0), 1.0)
        else:
            h[:, i] = pi[:, i]
    law_tau = np.zeros(K + 1)
    for t in range(K + 1):
        passes = h[:, t - 1] if t > 0 else np.ones(len(seqs))
        fails = np.prod(1.0 - h[:, t:], axis=1)
        law_tau[t] = np.sum(prob * passes * fails)
    return law_tau / law_tau.sum()


def acceptance_law(law: Law, mode: str) -> np.ndarray:
    return block_acceptance_law(law) if mode == "block" else standard_acceptance_law(law)


# ---------------------------------------------------------------------------------------------
# Chi-square


@dataclass(frozen=True)
class Test:
    """One chi-square test: ``what`` is ``"position j"`` or ``"acceptance"``."""

    what: str
    chi2: float
    df: int
    p_value: float
    n: int


def merged_bins(observed: np.ndarray, expected: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Bins with expected count below :data:`MIN_EXPECTED` merged into one; that bin folded into
    the smallest other bin if it is still below it."""
    observed, expected = np.asarray(observed, np.float64), np.asarray(expected, np.float64)
    small = expected < MIN_EXPECTED
    if not small.any():
        return observed, expected
    obs, exp = list(observed[~small]), list(expected[~small])
    rest_o, rest_e = observed[small].sum(), expected[small].sum()
    if rest_e >= MIN_EXPECTED or not exp:
        obs.append(rest_o)
        exp.append(rest_e)
    else:
        k = int(np.argmin(exp))
        obs[k] += rest_o
        exp[k] += rest_e
    return np.array(obs), np.array(exp)


def chi_square(what: str, observed: np.ndarray, probs: np.ndarray) -> Test | None:
    """Pearson's chi-square of ``observed`` counts against ``probs``; ``None`` without a degree
    of freedom (too few counts)."""
    from scipy.stats import chi2 as chi2_dist

    observed = np.asarray(observed, np.float64)
    n = int(observed.sum())
    if n == 0:
        return None
    probs = np.asarray(probs, np.float64)
    if ((probs <= 0) & (observed > 0)).any():  # a token the law never emits: before any merging
        return Test(what, math.inf, max(len(probs) - 1, 1), 0.0, n)
    keep = probs > 0
    obs, exp = merged_bins(observed[keep], n * probs[keep])
    df = len(exp) - 1
    if df < 1:
        return None
    stat = float(((obs - exp) ** 2 / exp).sum())
    return Test(what, stat, df, float(chi2_dist.sf(stat, df)), n)


def analyse(law: Law, mode: str, sampled, num_sampled) -> list[Test]:
    """The per-position and acceptance tests of one run's output (``sampled`` [R, K + 1],
    ``num_sampled`` [R], tensors or arrays)."""
    sampled = np.asarray(_numpy(sampled), np.int64)
    num_sampled = np.asarray(_numpy(num_sampled), np.int64)
    K, V = law.num_speculative_steps, law.vocab_size
    tests = []
    for j in range(K + 1):
        tokens = sampled[num_sampled > j, j]
        if ((tokens < 0) | (tokens >= V)).any():
            return [Test(f"position {j}", math.inf, V - 1, 0.0, len(tokens))]
        t = chi_square(f"position {j}", np.bincount(tokens, minlength=V), law.p)
        if t is not None:
            tests.append(t)
    accepted = num_sampled - 1
    if ((accepted < 0) | (accepted > K)).any():
        return tests + [Test("acceptance", math.inf, K, 0.0, len(accepted))]
    t = chi_square("acceptance", np.bincount(accepted, minlength=K + 1), acceptance_law(law, mode))
    if t is not None:
        tests.append(t)
    return tests


def _numpy(x):
    return x.detach().cpu().numpy() if hasattr(x, "detach") else x


# ---------------------------------------------------------------------------------------------
# Trial batches


def trial_inputs(law: Law, num_trials: int, mode: str, device="cpu", seed: int = 0) -> dict:
    """The launcher's arguments for ``num_trials`` trials of ``law`` (drafts not drawn yet: every
    draft is token 0 until :func:`draw_independent` or a drafting sampler fills them)."""
    import torch

    g = torch.Generator().manual_seed(seed)
    R, K, V = num_trials, law.num_speculative_steps, law.vocab_size
    rows = K + 1
    target = torch.from_numpy(law.target_logits).to(device)
    draft = torch.from_numpy(law.draft_logits).to(device)
    cu = torch.arange(R + 1, dtype=torch.int32) * rows
    start = torch.randint(16, 1 << 20, (R,), generator=g, dtype=torch.int64)
    pos = (start[:, None] + torch.arange(rows)[None, :]).reshape(-1).to(torch.int32)
    seeds = torch.randint(0, 1 << 62, (R,), generator=g, dtype=torch.int64)
    idx = torch.arange(R, dtype=torch.int32)
    return {
        "target_logits": target[None, :].expand(R * rows, V).contiguous(),  # [N, V]
        "draft_logits": draft[None].expand(R, K, V).contiguous(),  # [R, K, V]
        "draft_sampled": torch.zeros(R * rows, dtype=torch.int64, device=device),  # [N]
        "cu_num_logits": cu.to(device),  # [R + 1]
        "pos": pos.to(device),  # [N]
        "idx_mapping": idx.to(device),  # [R]
        "expanded_idx_mapping": idx.repeat_interleave(rows).to(device),  # [N]
        "expanded_local_pos": torch.arange(rows, dtype=torch.int32).repeat(R).to(device),  # [N]
        "temperature": torch.ones(R, dtype=torch.float32, device=device),  # [R]
        "seed": seeds.to(device),  # [R]
        "num_speculative_steps": K,
        "synthetic_conditional_rates": None,
        "use_fp64": False,
        "use_block_verification": mode == "block",
    }


def draw_independent(law: Law, inputs: dict, seed: int = 0) -> None:
    """Drafts drawn from ``q_s`` with torch's generator, independent of any sampler's noise."""
    import torch

    g = torch.Generator().manual_seed(seed + 1)
    R = inputs["idx_mapping"].numel()
    K = law.num_speculative_steps
    q = torch.from_numpy(law.q)
    drafts = torch.stack([torch.multinomial(q[s], R, replacement=True, generator=g) for s in range(K)], dim=1)
    view = inputs["draft_sampled"].view(R, K + 1)
    view[:, 1:] = drafts.to(view.device)


# ---------------------------------------------------------------------------------------------
# Subjects


def planted_subject(base_name: str | None = None, rate: float | None = None):
    """``base_name`` with its first emitted token moved to the next token id in a fraction
    ``rate`` of requests (those whose seed hashes below it): a biased subject (positive control)."""
    from . import subjects
    from .subjects.base import PreparedCall, Subject

    base_name = PLANTED_BASE if base_name is None else base_name
    rate = PLANTED_RATE if rate is None else rate
    base = subjects.get(base_name)
    threshold = int(rate * 1_000_003)

    def prepare(inputs: dict) -> PreparedCall:
        prepared = base.prepare_inputs(inputs)
        V = inputs["target_logits"].shape[-1]
        hit = (inputs["seed"][inputs["idx_mapping"].long()] % 1_000_003) < threshold  # [R]

        def finish(out):
            sampled, num_sampled = prepared.finish(out)
            sampled = sampled.clone()
            sampled[:, 0] = sampled[:, 0].where(~hit, (sampled[:, 0] + 1) % V)
            return sampled, num_sampled

        return PreparedCall(prepared.call, finish, graph_capturable=False)

    return Subject(
        PLANTED,
        f"{base_name} with its first token shifted in {rate:.0%} of requests (biased on purpose)",
        base.capabilities,
        prepare,
        availability=base.availability,
        needs_cuda=base.needs_cuda,
        provenance={"kind": "planted", "base": base_name, "rate": rate},
    )


def resolve(name: str, planted_base: str | None = None):
    """A subject by name: the registry's, or the planted control (over ``planted_base``)."""
    from . import subjects

    return planted_subject(planted_base) if name == PLANTED else subjects.get(name)


def drafting_of(name: str):
    """The subject's own drafting sampler (vLLM subjects whose closure ships ``gumbel_sample``),
    else ``None``."""
    from .schema import parse_subject

    if name == PLANTED or not parse_subject(name).kind.startswith("vllm"):
        return None
    from .subjects.vllm.drafting import drafting_sampler

    return drafting_sampler(name)


# ---------------------------------------------------------------------------------------------
# Checks


@dataclass
class Row:
    """One check's result, as written to ``<sha8>.exactness`` (one JSON object a line)."""

    subject: str
    mode: str
    drafting: str
    verdict: str  # "exact", "biased", "skipped", "failed"
    reason: str = ""
    num_trials: int = 0
    vocab_size: int = 0
    num_speculative_steps: int = 0
    threshold: float = 0.0
    worst: dict | None = None  # the test with the smallest p-value
    tests: list[dict] = field(default_factory=list)
    mean_accepted: float | None = None
    expected_mean_accepted: float | None = None
    seconds: float = 0.0
    machine: str = ""
    commit: str = ""
    provenance: dict = field(default_factory=dict)
    schema: int = SCHEMA

    @property
    def summary(self) -> str:
        """``exact``, or ``biased (chi2, df, position, drafting)``, or the skip/fail reason."""
        if self.verdict == "biased" and self.worst:
            w = self.worst
            return f"biased (chi2={w['chi2']:.1f}, df={w['df']}, {w['what']}, {self.drafting})"
        if self.verdict in ("skipped", "failed"):
            return f"{self.verdict}: {self.reason}"
        return self.verdict

    def to_json(self) -> dict:
        return asdict(self)


def verdict_of(tests: list[Test], num_tests: int) -> tuple[str, float, Test | None]:
    threshold = FAMILY_ALPHA / max(num_tests, 1)
    worst = min(tests, key=lambda t: t.p_value) if tests else None
    biased = worst is not None and worst.p_value < threshold
    return ("biased" if biased else "exact"), threshold, worst


def check(
    subject,
    mode: str,
    drafting: str,
    *,
    law: Law,
    num_trials: int,
    device="cuda",
    drafter=None,
    seed: int = 0,
) -> Row:
    """One check of ``subject`` (a :class:`~specsample.subjects.base.Subject`) in ``mode`` with
    drafts drawn the ``drafting`` way (``drafter``: the subject's drafting sampler, for the
    production draftings)."""
    import time

    import torch

    from .subjects.base import NotSupported
    from .workloads import Workload

    K, V = law.num_speculative_steps, law.vocab_size
    row = Row(subject.name, mode, drafting, "skipped", num_trials=num_trials, vocab_size=V, num_speculative_steps=K)
    row.provenance = dict(subject.provenance)
    if drafting != "independent":
        if drafter is None:
            row.reason = f"{subject.name} ships no drafting sampler"
            return row
        if drafting == "production-unsalted" and not drafter.has_flag:
            row.reason = (
                f"{subject.name}'s gumbel_sample has no is_drafting flag: production drafting is already unsalted"
            )
            return row
    w = Workload(num_reqs=num_trials, num_speculative_steps=K, vocab_size=V, mode=mode, draft="logits")
    reason = subject.unsupported(w)
    if reason:
        row.reason = reason
        return row
    start = time.perf_counter()
    try:
        inputs = trial_inputs(law, num_trials, mode, device=device, seed=seed)
        if drafting == "independent":
            draw_independent(law, inputs, seed=seed)
        else:
            drafter.draw(inputs, unsalted=(drafting == "production-unsalted"))
        prepared = subject.prepare(w, device, inputs=inputs)
        sampled, num_sampled = prepared.finish(prepared.call())
        if torch.device(device).type == "cuda":
            torch.cuda.synchronize()
    except NotSupported as exc:
        row.reason = str(exc)
        return row
    except Exception as exc:  # noqa: BLE001 - a subject that fails is a row, not the end of the run
        row.verdict, row.reason = "failed", f"{type(exc).__name__}: {exc}".splitlines()[0]
        return row
    tests = analyse(law, mode, sampled, num_sampled)
    row.verdict, row.threshold, worst = verdict_of(tests, K + 2)
    row.tests = [asdict(t) for t in tests]
    row.worst = asdict(worst) if worst else None
    accepted = _numpy(num_sampled).astype(np.float64) - 1
    row.mean_accepted = float(accepted.mean())
    expected = acceptance_law(law, mode)
    row.expected_mean_accepted = float((np.arange(K + 1) * expected).sum())
    row.seconds = time.perf_counter() - start
    return row


def run(
    names: list[str],
    draftings: list[str],
    modes: tuple[str, ...] | list[str] = MODES,
    *,
    num_trials: int = DEFAULT_TRIALS,
    vocab_size: int = DEFAULT_VOCAB,
    num_speculative_steps: int = DEFAULT_STEPS,
    device="cuda",
    seed: int = 0,
    planted_base: str | None = None,
    log: Callable[[str], None] = lambda line: None,
    done: Callable[[list[Row]], None] = lambda rows: None,
) -> list[Row]:
    """Every (subject, mode, drafting) check; a subject that cannot be loaded gets ``failed``
    rows with the reason. ``done`` gets the rows so far after each subject (the command writes
    them then, so a run stopped part way keeps every subject it finished)."""
    law = make_law(vocab_size, num_speculative_steps, seed=seed)
    rows = []
    for name in names:
        try:
            subject = resolve(name, planted_base)
            drafter = drafting_of(name) if any(d != "independent" for d in draftings) else None
        except Exception as exc:  # noqa: BLE001 - a subject that cannot load is failed rows
            reason = f"{type(exc).__name__}: {exc}".splitlines()[0]
            for mode, drafting in itertools.product(modes, draftings):
                rows.append(Row(name, mode, drafting, "failed", reason=reason, num_trials=num_trials))
                log(f"{name:>16} {mode:>8} {drafting:>20}  failed: {reason}")
            done(rows)
            continue
        for mode, drafting in itertools.product(modes, draftings):
            row = check(
                subject, mode, drafting, law=law, num_trials=num_trials, device=device, drafter=drafter, seed=seed
            )
            rows.append(row)
            log(f"{name:>16} {mode:>8} {drafting:>20}  {row.summary}  ({row.seconds:.1f} s)")
        done(rows)
    return rows


def exit_code(rows: list[Row]) -> int:
    """0: every real subject exact (or skipped) and the planted control flagged; 1: a real subject
    biased or failed, or the planted control not flagged."""
    for row in rows:
        if row.subject == PLANTED:
            if row.verdict == "exact" or row.verdict == "failed":
                return 1
        elif row.verdict in ("biased", "failed"):
            return 1
    return 0


def write(rows: list[Row], path, machine: str, commit: str) -> None:
    """``rows`` as ``path`` (JSON lines), each stamped with the machine and the commit; written
    beside it and renamed in, so a reader never sees part of a file."""
    import json
    import os
    from pathlib import Path

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    with partial.open("w") as f:
        for row in rows:
            row.machine, row.commit = machine, commit
            f.write(json.dumps(row.to_json(), sort_keys=True) + "\n")
    os.replace(partial, path)


def nightly(
    results_dir,
    machine: str,
    commit: str,
    vllm_subjects: tuple[str, ...],
    *,
    device="cuda",
    num_trials: int = DEFAULT_TRIALS,
    log: Callable[[str], None] = lambda line: None,
):
    """The nightly's exactness step: :data:`NIGHTLY_OURS`, ``vllm_subjects`` and the planted
    control, in both modes under every drafting, written to
    ``results_dir/<machine>/<sha8>.exactness``; returns that path and the rows. A subject that
    cannot load is ``failed`` rows, never the end of the nightly."""
    from pathlib import Path

    names = [*NIGHTLY_OURS, *dict.fromkeys(vllm_subjects), PLANTED]
    path = Path(results_dir) / machine / f"{commit[:8]}{SUFFIX}"
    done = lambda rows: write(rows, path, machine, commit)  # noqa: E731 - after each subject, the last one too
    rows = run(names, list(DRAFTINGS), MODES, num_trials=num_trials, device=device, log=log, done=done)
    return path, rows


def load(path) -> list[dict]:
    """The rows of one ``.exactness`` file (JSON lines)."""
    import json
    from pathlib import Path

    return [json.loads(line) for line in Path(path).read_text().splitlines() if line.strip()]


def summary(row: dict) -> str:
    """:attr:`Row.summary` of a row read back from a file."""
    fields = {k: v for k, v in row.items() if k in Row.__dataclass_fields__}
    return Row(**fields).summary
