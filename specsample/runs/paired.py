"""Paired measurement of two sides, point by point: what ``specsample signoff BASE HEAD`` measures.

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
  ours against a release, at the points where the tier measures a template subject (``mrv2``).

The measurement runs in worker processes (:mod:`specsample.worker`): each point's two sides in
one process, and a side that faults or hangs costs only its own points (recorded as
``crashed`` with the reason, which fails the sign-off). Each side's output is checked at every
point (:mod:`specsample.semantics`). A subject one commit does not have is not measured: the
other side's row says so (``skipped``, with the reason), and the point is one-sided.

The result is a tidy frame with the columns of :data:`specsample.track.results.COLUMNS`, one
row per (side, point), named like the asv benchmark of the sweep, so :func:`.stats.compare`
reads it unchanged; ``env`` names the side (:data:`ENVS`). Verdicts, exit code and report are
:mod:`.stats` and :mod:`.report`'s, with the paired thresholds (:data:`.stats.PAIRED_MIN_EFFECT`,
:data:`.stats.PAIRED_MIN_ABS_SECONDS`).

Unknown input (a rev that is not a commit, a subject that cannot be resolved, a sweep or axis
value the tier does not have) raises :class:`.resolve.SignoffError` before anything is measured;
its message names what was given and lists what is known (:mod:`.resolve` resolves the names).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from .. import tiers, worker
from ..schema import OUR_SUBJECTS, PATH_AXES, PATH_DEFAULTS, POINT_AXES
from ..track.results import machine_environment, to_frame
from ..track.signoff import report, stats
from .resolve import SignoffError, check_subject, commit_date, repository_env, resolve_rev, subjects_absent

SIDES = ("base", "head")
# The env column names the side; the commit cannot (A/A runs compare a commit with itself).
ENVS = {"base": "paired-base", "head": "paired-head"}
DEFAULT_SAMPLES = 30
# Calls per sample on the GPU: enough to amortise the event pair, as the asv suite times.
CALLS_PER_SAMPLE = 10
BENCH_MODULE = "bench_sampler"
METRIC = "time_sample"


# ---------------------------------------------------------------------------------------------
# What is measured
# ---------------------------------------------------------------------------------------------


def points(
    tier: str,
    sweeps: Collection[str] | None = None,
    subjects: Collection[str] | None = None,
    only: Mapping[str, Collection] | None = None,
) -> list[tuple[tiers.Sweep, dict]]:
    """``(sweep, point)`` pairs of the tier's sampler sweeps, optionally only some sweeps
    (names as in :mod:`specsample.tiers`, e.g. ``"Density"``, any case), some subjects, and
    points whose axes take given values (``only={"mode": ["block"]}``).

    ``SignoffError`` names a tier, sweep, subject or axis value that selects nothing, and
    lists what the tier has.
    """
    try:
        sampler_sweeps = [s for s in tiers.sweeps(tier) if s.kind == "sampler"]
    except ValueError as exc:
        raise SignoffError(str(exc)) from None
    if sweeps:
        known = {s.name.lower() for s in sampler_sweeps}
        unknown = sorted(n for n in sweeps if n.lower() not in known)
        if unknown:
            raise SignoffError(
                f"sweep: {', '.join(unknown)} not in tier {tier!r}; its sweeps: "
                f"{', '.join(s.name for s in sampler_sweeps)}"
            )
        wanted = {n.lower() for n in sweeps}
        sampler_sweeps = [s for s in sampler_sweeps if s.name.lower() in wanted]
    chosen = [(s, p) for s in sampler_sweeps for p in s.points()]
    selections = [("subject", subjects)] if subjects else []
    for axis, values in selections + list(dict(only or {}).items()):
        if axis not in (*POINT_AXES, *PATH_AXES):
            raise SignoffError(f"axis: expected one of {', '.join((*POINT_AXES, *PATH_AXES))}, got {axis!r}")
        present = sorted({p.get(axis, PATH_DEFAULTS.get(axis)) for _, p in chosen}, key=str)
        unknown = [v for v in values if v not in present]
        if unknown:
            raise SignoffError(
                f"{axis}: {', '.join(map(str, unknown))} not measured by the selected sweeps of "
                f"tier {tier!r}; they measure {', '.join(map(str, present))}"
            )
        chosen = [(s, p) for s, p in chosen if p.get(axis, PATH_DEFAULTS.get(axis)) in set(values)]
    return chosen


def benchmark_name(sweep: tiers.Sweep) -> str:
    """The asv benchmark that measures ``sweep``'s latency, e.g. ``bench_sampler.QuickDensityLatency.time_sample``."""
    return f"{BENCH_MODULE}.{sweep.class_name}Latency.{METRIC}"


@dataclass(frozen=True)
class Side:
    """One side of a sign-off: what its ``commit`` column says, the subject it times at a point
    whose tier subject is ``s`` (``name_of(s)``), and the tier subjects it does not have, with
    the reason (those points are not measured)."""

    label: str  # "base" or "head"
    commit: str | None
    date: str | None
    name_of: Callable[[str], str]
    absent: Mapping[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------
# Measurement
# ---------------------------------------------------------------------------------------------


def measure_paired(
    base: Side,
    head: Side,
    chosen: list[tuple[tiers.Sweep, dict]],
    *,
    samples: int = DEFAULT_SAMPLES,
    machine: str = "unknown",
    device: str = "cuda",
    l2: str = "cold",
    host: bool = False,
    environment: Mapping[str, object] | None = None,
    log: Callable[[str], None] = print,
    sampling: Mapping[str, object] | None = None,
) -> pd.DataFrame:
    """Time base and head at every ``(sweep, point)`` of ``chosen``, paired and interleaved, in
    worker processes. ``sampling``: more :class:`specsample.worker.JobOptions` fields
    (``noise_target``, ``time_cap_s``, ``lock_clocks``).

    Returns a frame of :data:`specsample.track.results.COLUMNS`, one row per side and point:
    ``status`` "ok" with the samples, "skipped" (the side does not support the point, or the
    other side lacks its subject: not measured), "failed" or "crashed" with the ``reason``.
    ``semantics`` holds each side's output check at the point. ``attrs``: ``provenance`` (per
    subject timed), ``workers`` (processes started) and ``crashes``.
    """
    if samples < 1:
        raise ValueError(f"samples: expected >= 1, got {samples}")
    env = dict(environment) if environment is not None else _environment(device)
    units, where, rows = [], {}, []
    for i, (sweep, point) in enumerate(chosen):
        s = point["subject"]
        missing = {side.label: side.absent[s] for side in (base, head) if s in side.absent}
        if missing:
            # Not measured: the side that has the subject gets a row saying why; the side without
            # it gets none (the point is one-sided), unless neither has it (skipped on both).
            why = "; ".join(f"{label} has no subject {s} ({reason})" for label, reason in missing.items())
            for side in (base, head):
                if side.label in missing and len(missing) == 1:
                    continue
                record = {"status": "skipped", "reason": f"not measured: {why}"}
                rows.append(_row(side, side.name_of(s), sweep, point, record, machine=machine, env=env))
            continue
        key = f"{sweep.class_name}/{i}"
        names = (base.name_of(s), head.name_of(s))
        units.append(worker.Unit(key, {k: v for k, v in point.items() if k != "subject"}, names, labels=SIDES))
        where[key] = (sweep, point)
    options = worker.JobOptions(
        l2=l2,
        calls_per_sample=1 if host else CALLS_PER_SAMPLE,
        num_samples=samples,
        device=device,
        host=host,
        **dict(sampling or {}),
    )
    start = time.monotonic()
    outcome = worker.run_units(units, options, log=log) if units else worker.Outcome()
    for unit in units:
        sweep, point = where[unit.key]
        for side, subject in zip((base, head), unit.subjects):
            record = outcome.records[unit.key].get(side.label, {"status": "failed", "reason": "no record came back"})
            rows.append(_row(side, subject, sweep, point, record, machine=machine, env=env))
    log(
        f"specsample paired: {len(units)} points in {time.monotonic() - start:.0f} s "
        f"({outcome.workers} worker process{'es' * (outcome.workers != 1)}, {len(outcome.crashes)} crashes)"
    )
    frame = to_frame(rows)
    frame.attrs.update(
        provenance=outcome.provenance, workers=outcome.workers, crashes=list(outcome.crashes), gpu=outcome.gpu
    )
    return frame


def _environment(device: str) -> dict:
    if device != "cuda":
        return {}
    from ..machine import gpu_info

    return gpu_info(measure_bandwidth=False)


def _row(
    side: Side, subject: str, sweep: tiers.Sweep, point: dict, record: dict, *, machine: str, env: Mapping[str, object]
) -> dict:
    status = record["status"]
    samples = [float(s) for s in record.get("samples") or ()] if status == "ok" else None
    reason = record.get("reason") or record.get("semantics_detail") or None
    if status == "ok" and not samples:
        status, samples, reason = "failed", None, "measured no samples"
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
        # The path axes: a sweep without one was measured at its default.
        **{k: point.get(k, PATH_DEFAULTS[k]) for k in PATH_AXES},
        # Our package at a commit: the tier's subject name (the commit column says which code).
        "subject": point["subject"] if side.commit else subject,
        "stage": point.get("stage"),
        "status": status,
        "samples": samples,
        "semantics": record.get("semantics"),
        "reason": reason,
        "capped": record.get("capped"),
        "n_throttled": record.get("n_throttled"),
        "sm_clock_mhz": (record.get("gpu_state") or {}).get("sm_clock_mhz"),
        "acceptance_rate": record.get("acceptance_rate"),
        "deferral_rate": record.get("deferral_rate"),
    }
    if samples:
        arr = np.asarray(samples)
        q25, q75 = np.percentile(arr, [25, 75])
        row.update(value=float(np.median(arr)), q25=float(q25), q75=float(q75), n_samples=len(arr))
        row["ci_lo"], row["ci_hi"] = stats.median_ci(arr)
    return row


def split_sides(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The base and head rows of a :func:`measure_paired` frame."""
    return frame[frame["env"] == ENVS["base"]], frame[frame["env"] == ENVS["head"]]


# ---------------------------------------------------------------------------------------------
# Sign-off
# ---------------------------------------------------------------------------------------------


@dataclass
class SignoffResult:
    """One paired sign-off: the measurement, the verdicts, the report and the exit code."""

    base: str
    head: str
    frame: pd.DataFrame
    verdicts: pd.DataFrame
    report: str
    exit_code: int
    seconds: float


@dataclass(frozen=True)
class SignoffOptions:
    """How a sign-off measures (:func:`measure_paired`'s keywords) and judges (the thresholds
    of :func:`.stats.compare`, the paired ones by default; :func:`.stats.exit_code`'s flags):
    the keyword arguments :func:`signoff_commits` and :func:`signoff_subjects` share."""

    samples: int = DEFAULT_SAMPLES
    machine: str = "unknown"
    alpha: float = stats.ALPHA
    min_effect: float = stats.PAIRED_MIN_EFFECT
    min_abs_seconds: float = stats.PAIRED_MIN_ABS_SECONDS
    allow_missing: bool = False
    fail_on_inconclusive: bool = False
    sampling: Mapping[str, object] | None = None
    device: str = "cuda"
    l2: str = "cold"
    host: bool = False
    environment: Mapping[str, object] | None = None
    log: Callable[[str], None] = print


def _measure(sides: list[Side], chosen: list[tuple[tiers.Sweep, dict]], o: SignoffOptions) -> pd.DataFrame:
    return measure_paired(
        *sides,
        chosen,
        samples=o.samples,
        machine=o.machine,
        device=o.device,
        l2=o.l2,
        host=o.host,
        environment=o.environment,
        log=o.log,
        sampling=o.sampling,
    )


def _judged(
    frame: pd.DataFrame,
    o: SignoffOptions,
    *,
    compared: tuple[str, str],
    called: tuple[str, str],
    title: str,
    tier: str,
    sweeps,
    start: float,
    notes: Collection[str] = (),
    key_columns=None,
) -> SignoffResult:
    """A measured sign-off judged: ``compared`` names base and head in the result, ``called`` in
    the report's notes on how they were measured, which ``notes`` follow."""
    seconds = time.monotonic() - start
    notes = [*_how_measured(frame, *called, tier, sweeps, o.samples, o.host, seconds), *notes]
    verdicts = stats.compare(
        *split_sides(frame),
        alpha=o.alpha,
        min_effect=o.min_effect,
        min_abs_seconds=o.min_abs_seconds,
        key_columns=key_columns,
    )
    text = report.report_markdown(
        verdicts,
        machine_environment(frame),
        allow_missing=o.allow_missing,
        fail_on_inconclusive=o.fail_on_inconclusive,
        title=title,
        notes=notes,
    )
    code = stats.exit_code(verdicts, allow_missing=o.allow_missing, fail_on_inconclusive=o.fail_on_inconclusive)
    return SignoffResult(*compared, frame, verdicts, text, code, seconds)


def _how_measured(
    frame: pd.DataFrame, base: str, head: str, tier: str, sweeps, samples: int, host: bool, seconds: float
) -> list[str]:
    where = f"{tier} tier" + (f" (sweeps {', '.join(sweeps)})" if sweeps else "")
    workers = frame.attrs.get("workers", 0)
    notes = [
        f"Measured paired: at each point {base} and {head} in one worker process on the same inputs, "
        f"{samples} samples a side alternated ABBA; {where}; {workers} worker "
        f"process{'es' * (workers != 1)}; {seconds:.0f} s."
    ]
    gpu = frame.attrs.get("gpu") or {}
    throttled = int(pd.to_numeric(frame.get("n_throttled"), errors="coerce").fillna(0).sum()) if len(frame) else 0
    if gpu.get("state") == "unknown":
        notes.append(f"GPU state: unknown ({gpu.get('why')}); no sample was checked for throttling.")
    elif gpu:
        locked = "clocks locked" if gpu.get("clocks_locked") else "clocks not locked"
        if gpu.get("lock", {}).get("why") and not gpu.get("clocks_locked"):
            locked += f" ({gpu['lock']['why']})"
        notes.append(f"GPU state read per sample (NVML): {throttled} throttled samples left out; {locked}.")
    capped = int(frame["capped"].fillna(False).astype(bool).sum()) if "capped" in frame else 0
    if capped:
        notes.append(f"{capped} point sides stopped on the time cap before their noise target (inconclusive).")
    if host:
        notes.append(
            "Timed on the host clock under the Triton interpreter (no GPU): the times check the "
            "flow and say nothing about GPU latency."
        )
    return notes


def signoff_commits(
    repo: str | Path,
    base: str,
    head: str,
    *,
    tier: str = "quick",
    sweeps: Collection[str] | None = None,
    subjects: Collection[str] | None = None,
    only: Mapping[str, Collection] | None = None,
    head_subject: Callable[[str, str], str] | None = None,
    **options,
) -> SignoffResult:
    """Our subjects at ``base`` against the same subjects at ``head`` (revs of ``repo``; one
    commit on both sides is an A/A run), measured paired (:func:`measure_paired`) and judged
    (:func:`.stats.compare`, :func:`.stats.exit_code`); ``options``: :class:`SignoffOptions`.

    ``head_subject(s, sha)``: the subject timed as head for the tier's subject ``s`` (default
    ``s@sha``); the sign-off's validation wraps some in a planted delay
    (:func:`.plants.planted_name`).

    ``tier``, ``sweeps``, ``subjects`` and ``only`` select the points (:func:`points`). A subject
    one commit lacks is not measured and its points are one-sided. ``SignoffError`` for a rev
    that is not a commit (listing the repository's refs and newest commits), a commit whose
    package cannot be loaded, or a selection that selects nothing.
    """
    o = SignoffOptions(**options)
    repo = Path(repo).resolve()
    start = time.monotonic()
    base_sha, head_sha = resolve_rev(repo, base), resolve_rev(repo, head)
    chosen = points(tier, sweeps, subjects, only)
    # Two commits of this repository sign off our subjects; a tier's vLLM subjects (the nightly
    # Vllm sweep) are the same code on both sides and are compared with signoff_subjects.
    others = sorted({p["subject"] for _, p in chosen} - set(OUR_SUBJECTS))
    if others and subjects:
        raise SignoffError(
            f"subject: {', '.join(others)} not ours: two commits sign off our subjects "
            f"({', '.join(OUR_SUBJECTS)}); compare vLLM subjects as `signoff vllm==A vllm==B`"
        )
    chosen = [(s, p) for s, p in chosen if p["subject"] in OUR_SUBJECTS]
    if not chosen:
        raise SignoffError(f"tier {tier!r}: the selected sweeps measure none of our subjects")
    wanted = sorted({p["subject"] for _, p in chosen}, key=OUR_SUBJECTS.index)
    o.log(
        f"specsample signoff: base {base_sha[:8]} vs head {head_sha[:8]}, {tier} tier, {len(chosen)} points, "
        f"{o.samples} samples a side, paired"
    )
    with repository_env(repo):
        sides = []
        for label, sha in (("base", base_sha), ("head", head_sha)):
            absent = subjects_absent(sha, wanted, label)
            for name, why in absent.items():
                o.log(f"specsample signoff: {label} {sha[:8]} has no subject {name}: its points are one-sided ({why})")
            name_of = (
                (lambda s, sha=sha: head_subject(s, sha))
                if label == "head" and head_subject
                else (lambda s, sha=sha: f"{s}@{sha}")
            )
            sides.append(Side(label, sha, commit_date(repo, sha), name_of, absent))
        frame = _measure(sides, chosen, o)
    notes = []
    if others:
        notes.append(f"Not part of a sign-off of two commits: the tier's subjects {', '.join(others)} (not ours).")
    notes += [
        f"Not measured: subject `{name}` is not at {side.label} `{side.commit[:8]}` ({why})."
        for side in sides
        for name, why in side.absent.items()
    ]
    return _judged(
        frame,
        o,
        compared=(base_sha, head_sha),
        called=("base", "head"),
        title=f"specsample sign-off: {head_sha[:8]} vs {base_sha[:8]}",
        tier=tier,
        sweeps=sweeps,
        start=start,
        notes=notes,
    )


def signoff_subjects(
    base: str,
    head: str,
    *,
    tier: str = "quick",
    sweeps: Collection[str] | None = None,
    template: str = "mrv2",
    only: Mapping[str, Collection] | None = None,
    **options,
) -> SignoffResult:
    """Subject ``base`` against subject ``head`` (e.g. ``vllm==0.32.0`` and ``vllm==0.33.0``,
    or ``vllm@main`` and ``vllm@my-branch``) at the points the tier measures ``template`` at;
    ``options``: :class:`SignoffOptions`. ``SignoffError`` for a subject that cannot be
    resolved (listing the known ones)."""
    o = SignoffOptions(**options)
    start = time.monotonic()
    for name in (base, head):
        check_subject(name)
    chosen = points(tier, sweeps, [template], only)
    o.log(
        f"specsample signoff: base {base} vs head {head}, {tier} tier, {len(chosen)} points, {o.samples} samples "
        f"a side, paired"
    )
    sides = [Side("base", None, None, lambda s: base), Side("head", None, None, lambda s: head)]
    frame = _measure(sides, chosen, o)
    return _judged(
        frame,
        o,
        compared=(base, head),
        called=(f"`{base}`", f"`{head}`"),
        title=f"specsample sign-off: {head} vs {base}",
        tier=tier,
        sweeps=sweeps,
        start=start,
        key_columns=[c for c in stats.default_key(frame, frame) if c != "subject"],
    )
