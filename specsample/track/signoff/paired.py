"""Paired measurement of two subjects in one process: what ``specsample signoff`` measures.

Why. On the H200 the clocks are not locked: the same kernel timed in two processes minutes
apart differs by up to ~6%, so base and head measured in separate asv runs cannot resolve a 5%
slowdown. Here both are timed in one process, one CUDA context, point by point, on the *same*
input tensors, with their samples alternated base/head/head/base/... (ABBA,
:func:`specsample.timing.interleave`: drift that is linear over a round cancels).

What is paired:

- two commits of this repository (:func:`signoff_commits`): at every point of the tier, subject
  ``S@BASE`` against ``S@HEAD`` for each of our subjects ``S`` the tier measures there
  (:mod:`specsample.subjects.commits`); also when they are one commit, an A/A run;
- any two subjects (:func:`signoff_subjects`): two vLLM releases (``vllm==A`` against
  ``vllm==B``), two refs of a vLLM checkout (``vllm@main`` against ``vllm@my-branch``), or one of
  ours against a release, at every point of the tier's sweeps (their ``subject`` axis replaced by
  the pair).

The measurement runs in worker processes (:mod:`specsample.worker`), so a side that faults costs
only its own points (recorded as crashed, a failed point). Each side's output is checked at
every point (:mod:`specsample.semantics`). The result is a tidy frame with the columns of
:data:`specsample.track.results.COLUMNS`, one row per (side, point), named like the asv benchmark
of the sweep, so :func:`specsample.track.signoff.compare` reads it unchanged; ``env`` names the
side (:data:`ENVS`).
"""

from __future__ import annotations

import math
import subprocess
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from ... import tiers, worker
from ...schema import AXES, POINT_AXES, SYMBOLS
from ..results import machine_environment, to_frame
from . import stats

SIDES = ("base", "head")
# The env column names the side; the commit cannot (A/A runs compare a commit with itself).
ENVS = {"base": "paired-base", "head": "paired-head"}
DEFAULT_SAMPLES = 30
# Calls per sample on the GPU: enough to amortise the event pair, as the asv suite times.
CALLS_PER_SAMPLE = 10
BENCH_MODULE = "bench_sampler"
METRIC = "time_sample"


def points(tier: str, sweeps: Collection[str] | None = None, subjects: Collection[str] | None = None) -> list[tuple]:
    """``(sweep, point)`` pairs of the tier's sampler sweeps, optionally only some sweeps and
    subjects (sweep names as in :mod:`specsample.tiers`, e.g. ``"Density"``, any case)."""
    sampler_sweeps = [s for s in tiers.sweeps(tier) if s.kind == "sampler"]
    if sweeps:
        known = {s.name.lower() for s in sampler_sweeps}
        unknown = sorted(n for n in sweeps if n.lower() not in known)
        if unknown:
            raise ValueError(f"sweep: expected some of {sorted(s.name for s in sampler_sweeps)} "
                             f"in tier {tier!r}, got {unknown}")  # fmt: skip
        wanted = {n.lower() for n in sweeps}
        sampler_sweeps = [s for s in sampler_sweeps if s.name.lower() in wanted]
    out = [(s, p) for s in sampler_sweeps for p in s.points() if not subjects or p["subject"] in subjects]
    if subjects and not out:
        raise ValueError(f"subject: none of {sorted(subjects)} is measured by the selected sweeps of {tier!r}")
    return out


def benchmark_name(sweep: tiers.Sweep) -> str:
    """The asv benchmark that measures ``sweep``'s latency, e.g. ``bench_sampler.QuickDensityLatency.time_sample``."""
    return f"{BENCH_MODULE}.{sweep.class_name}Latency.{METRIC}"


@dataclass(frozen=True)
class Side:
    """One side of a sign-off: what its ``commit`` column says, and the subject it times at a
    point whose tier subject is ``s`` (``name_of(s)``)."""

    label: str  # "base" or "head"
    commit: str | None
    date: str | None
    name_of: Callable[[str], str]


def measure_paired(
    base: Side,
    head: Side,
    chosen: list[tuple],
    *,
    samples: int = DEFAULT_SAMPLES,
    machine: str = "unknown",
    device: str = "cuda",
    l2: str = "cold",
    host: bool = False,
    environment: Mapping[str, object] | None = None,
    log: Callable[[str], None] = print,
) -> pd.DataFrame:
    """Time base and head at every ``(sweep, point)`` of ``chosen``, paired and interleaved.

    Returns a frame of :data:`specsample.track.results.COLUMNS`, one row per side and point:
    ``status`` "ok" with the samples, "skipped" (the side does not support the point), "failed"
    or "crashed" (the report lists it and sign-off exits 2). ``semantics`` holds each side's
    output check at the point.
    """
    if samples < 1:
        raise ValueError(f"samples: expected >= 1, got {samples}")
    units, where = [], {}
    for i, (sweep, point) in enumerate(chosen):
        key = f"{sweep.class_name}/{i}"
        names = (base.name_of(point["subject"]), head.name_of(point["subject"]))
        units.append(worker.Unit(key, {k: v for k, v in point.items() if k != "subject"}, names, labels=SIDES))
        where[key] = (sweep, point)
    options = worker.JobOptions(l2=l2, calls_per_sample=1 if host else CALLS_PER_SAMPLE, num_samples=samples,
                                device=device, host=host)  # fmt: skip
    start = time.monotonic()
    outcome = worker.run_units(units, options, log=log)
    env = dict(environment) if environment is not None else _environment(device)
    rows = []
    for unit in units:
        sweep, point = where[unit.key]
        for side, subject in zip((base, head), unit.subjects):
            record = outcome.records[unit.key].get(side.label)
            if record is not None:
                rows.append(_row(side, subject, sweep, point, record, machine=machine, env=env))
    log(f"specsample paired: {len(units)} points in {time.monotonic() - start:.0f} s "
        f"({outcome.workers} worker process{'es' * (outcome.workers != 1)}, {len(outcome.crashes)} crashes)")  # fmt: skip
    frame = to_frame(rows)
    frame.attrs["provenance"] = outcome.provenance
    return frame


def _environment(device: str) -> dict:
    if device != "cuda":
        return {}
    from ...machine import gpu_info

    return gpu_info(measure_bandwidth=False)


def _row(side: Side, subject: str, sweep: tiers.Sweep, point: dict, record: dict, *, machine: str,
         env: Mapping[str, object]) -> dict:  # fmt: skip
    samples = [float(s) for s in record["samples"]] if record["status"] == "ok" else None
    status = record["status"]
    if status == "ok" and not samples:
        status, samples = "failed", None
    row = {
        "commit": side.commit,
        "date": side.date,
        "machine": machine,
        "env": ENVS[side.label],
        **{k: env.get(k) for k in ("gpu", "driver", "cuda", "torch", "triton")},
        "benchmark": benchmark_name(sweep),
        "module": BENCH_MODULE,
        "tier": sweep.tier,
        "sweep": sweep.name,
        "metric": METRIC,
        "unit": "seconds",
        **{k: point.get(k) for k in POINT_AXES},
        "subject": point["subject"] if side.commit and subject.startswith(point["subject"] + "@") else subject,
        "stage": point.get("stage"),
        "status": status,
        "samples": samples,
        "semantics": record.get("semantics"),
        "reason": record.get("reason") or record.get("semantics_detail") or None,
    }
    if samples:
        arr = np.asarray(samples)
        q25, q75 = np.percentile(arr, [25, 75])
        row.update(value=float(np.median(arr)), q25=float(q25), q75=float(q75), n_samples=len(arr))
        row["ci_lo"], row["ci_hi"] = median_ci(arr)
    return row


def median_ci(samples: np.ndarray, confidence: float = 0.99) -> tuple[float, float]:
    """Distribution-free confidence interval of the median: order statistics x_(j), x_(n+1-j)
    with j from the binomial(n, 1/2) quantile (the whole range when n is too small for it).
    Sign-off reads it only when the Mann-Whitney test cannot reach alpha with so few samples."""
    x = np.sort(np.asarray(samples, dtype="float64"))
    n = len(x)
    if n == 0:
        return math.nan, math.nan
    j = max(int(scipy_stats.binom.ppf((1 - confidence) / 2, n, 0.5)), 1)
    return float(x[j - 1]), float(x[n - j])


def point_label(point: dict) -> str:
    return " ".join(f"{SYMBOLS[k]}={point[k]}" if k in SYMBOLS and k != "placeholder_pattern" else str(point[k])
                    for k in AXES if point.get(k) is not None)  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Sign-off
# ---------------------------------------------------------------------------------------------


@dataclass
class SignoffResult:
    """One paired sign-off: the measurement, the verdicts and the report."""

    base: str
    head: str
    frame: pd.DataFrame
    verdicts: pd.DataFrame
    report: str
    exit_code: int
    seconds: float


def split_sides(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The base and head rows of a :func:`measure_paired` frame."""
    return frame[frame["env"] == ENVS["base"]], frame[frame["env"] == ENVS["head"]]


def _judge(frame, base_label, head_label, title, tier, samples, seconds, alpha, min_effect, min_abs_seconds,
           key_columns=None) -> tuple[pd.DataFrame, str, int]:  # fmt: skip
    verdicts = stats.compare(*split_sides(frame), alpha=alpha, min_effect=min_effect,
                             min_abs_seconds=min_abs_seconds, key_columns=key_columns)  # fmt: skip
    report = stats.report_markdown(verdicts, machine_environment(frame), title=title)
    report += (f"\nMeasured paired in one process: {base_label} and {head_label} on the same inputs, {samples} "
               f"samples a side alternated ABBA, {tier} tier, {seconds:.0f} s.\n")  # fmt: skip
    return verdicts, report, stats.exit_code(verdicts)


def signoff_commits(
    repo: str | Path,
    base: str,
    head: str,
    *,
    tier: str = "quick",
    sweeps: Collection[str] | None = None,
    subjects: Collection[str] | None = None,
    samples: int = DEFAULT_SAMPLES,
    machine: str = "unknown",
    alpha: float = 0.002,
    min_effect: float = stats.PAIRED_MIN_EFFECT,
    min_abs_seconds: float = stats.PAIRED_MIN_ABS_SECONDS,
    device: str = "cuda",
    l2: str = "cold",
    host: bool = False,
    environment: Mapping[str, object] | None = None,
    log: Callable[[str], None] = print,
) -> SignoffResult:
    """Our subjects at ``base`` against the same subjects at ``head`` (commits of ``repo``; one
    commit on both sides is an A/A run), measured paired and judged
    (:func:`specsample.track.signoff.compare`). ``ValueError`` for a rev that is not a commit."""
    import os

    from ...subjects.commits import resolve_commit
    from ...subjects.base import SubjectError

    repo = Path(repo)
    os.environ["SPECSAMPLE_REPO"] = str(repo)  # the workers resolve NAME@COMMIT in this repository
    start = time.monotonic()
    try:
        base_sha, head_sha = (resolve_commit(repo, rev) for rev in (base, head))
    except SubjectError as exc:
        raise ValueError(str(exc)) from None
    log(f"specsample signoff: base {base_sha[:8]} vs head {head_sha[:8]}, {tier} tier, "
        f"{samples} samples a side, paired in one process")  # fmt: skip
    sides = [Side(label, sha, _commit_date(repo, sha), lambda s, sha=sha: f"{s}@{sha}")
             for label, sha in (("base", base_sha), ("head", head_sha))]  # fmt: skip
    chosen = points(tier, sweeps, subjects)
    frame = measure_paired(*sides, chosen, samples=samples, machine=machine, device=device, l2=l2, host=host,
                           environment=environment, log=log)  # fmt: skip
    seconds = time.monotonic() - start
    verdicts, report, code = _judge(frame, "base", "head", f"specsample sign-off: {head_sha[:8]} vs {base_sha[:8]}",
                                    tier, samples, seconds, alpha, min_effect, min_abs_seconds)  # fmt: skip
    return SignoffResult(base_sha, head_sha, frame, verdicts, report, code, seconds)


def signoff_subjects(
    base: str,
    head: str,
    *,
    tier: str = "quick",
    sweeps: Collection[str] | None = None,
    template: str = "mrv2",
    samples: int = DEFAULT_SAMPLES,
    machine: str = "unknown",
    alpha: float = 0.002,
    min_effect: float = stats.PAIRED_MIN_EFFECT,
    min_abs_seconds: float = stats.PAIRED_MIN_ABS_SECONDS,
    device: str = "cuda",
    l2: str = "cold",
    host: bool = False,
    environment: Mapping[str, object] | None = None,
    log: Callable[[str], None] = print,
) -> SignoffResult:
    """Subject ``base`` against subject ``head`` (e.g. ``vllm==0.32.0`` and ``vllm==0.33.0``,
    or ``vllm@main`` and ``vllm@my-branch``) at the points the tier measures ``template`` at."""
    start = time.monotonic()
    log(f"specsample signoff: base {base} vs head {head}, {tier} tier, {samples} samples a side, "
        f"paired in one process")  # fmt: skip
    sides = [Side("base", None, None, lambda s: base), Side("head", None, None, lambda s: head)]
    chosen = points(tier, sweeps, [template])
    frame = measure_paired(*sides, chosen, samples=samples, machine=machine, device=device, l2=l2, host=host,
                           environment=environment, log=log)  # fmt: skip
    seconds = time.monotonic() - start
    key = [c for c in stats.default_key(frame, frame) if c != "subject"]
    verdicts, report, code = _judge(frame, f"`{base}`", f"`{head}`", f"specsample sign-off: {head} vs {base}",
                                    tier, samples, seconds, alpha, min_effect, min_abs_seconds, key)  # fmt: skip
    return SignoffResult(base, head, frame, verdicts, report, code, seconds)


def _commit_date(repo: Path, sha: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "show", "-s", "--format=%cI", sha], capture_output=True,
                          text=True, check=True).stdout.strip()  # fmt: skip
