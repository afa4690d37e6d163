"""Measuring for the bisection: a commit against GOOD and against BAD, paired, in one process.

Each probe is one worker process (:func:`specsample.worker.run_units`, the paired worker of
sign-off) timing three subjects at the point, their samples interleaved: GOOD, the commit, and
BAD. The commit is judged against each end with sign-off's four-way verdict
(:func:`specsample.track.signoff.stats.compare_samples`). A retry (``effort`` 1, 2, ...) doubles
the samples, halves the noise target and doubles the time cap.

What is bisected (:class:`Target`):

- refs of a vLLM checkout (``--vllm-repo``): subject ``vllm@SHA`` at each commit;
- commits of this repository: one of our subjects, ``NAME@SHA``.

Bad input raises :class:`~.search.BisectError` before anything is measured or written: an
unknown ref, GOOD not an ancestor of BAD, no commit between them, a point neither end can run.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .. import worker
from ..noise import relative_halfwidth
from ..schema import POINT_AXES
from ..track.signoff import stats
from .search import BisectError, Comparison, Probe

LABELS = ("good", "mid", "bad")
DEFAULT_SAMPLES = 30
CALLS_PER_SAMPLE = 10


@dataclass(frozen=True)
class Target:
    """What is bisected: commits of ``repo``, subject ``subject`` (``"vllm"`` for a vLLM
    checkout, else one of ours), at ``point`` (the workload's axes, no ``subject``)."""

    repo: Path
    subject: str
    point: dict
    vllm: bool

    def name_at(self, sha: str) -> str:
        return f"vllm@{sha}" if self.vllm else f"{self.subject}@{sha}"

    @contextlib.contextmanager
    def environment(self) -> Iterator[None]:
        """The variable the workers resolve ``NAME@SHA`` with, set inside."""
        var = "SPECSAMPLE_VLLM_REPO" if self.vllm else "SPECSAMPLE_REPO"
        saved = os.environ.get(var)
        os.environ[var] = str(self.repo)
        try:
            yield
        finally:
            if saved is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = saved


def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)


def resolve(repo: Path, ref: str) -> str:
    proc = _git(repo, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if proc.returncode != 0:
        raise BisectError(f"{ref!r} is not a commit of {repo}")
    return proc.stdout.strip()


def commit_range(repo: Path, good: str, bad: str) -> list[str]:
    """GOOD, the first-parent commits after it up to BAD, and BAD (full hashes, oldest first).
    ``BisectError`` for an unknown ref, GOOD not an ancestor of BAD, or GOOD == BAD."""
    repo = Path(repo)
    if _git(repo, "rev-parse", "--git-dir").returncode != 0:
        raise BisectError(f"{repo} is not a git checkout")
    good_sha, bad_sha = resolve(repo, good), resolve(repo, bad)
    if good_sha == bad_sha:
        raise BisectError(f"GOOD {good!r} and BAD {bad!r} are the same commit {good_sha[:10]}")
    if _git(repo, "merge-base", "--is-ancestor", good_sha, bad_sha).returncode != 0:
        raise BisectError(f"GOOD {good!r} ({good_sha[:10]}) is not an ancestor of BAD {bad!r} ({bad_sha[:10]})")
    listed = _git(repo, "rev-list", "--first-parent", "--reverse", f"{good_sha}..{bad_sha}").stdout.split()
    if not listed or listed[-1] != bad_sha:
        # BAD reached through a merge's second parent only: walk the whole ancestry path.
        listed = _git(repo, "rev-list", "--reverse", "--ancestry-path", f"{good_sha}..{bad_sha}").stdout.split()
    return [good_sha, *listed]


def check_point(target: Target, good: str, bad: str) -> None:
    """``BisectError`` unless both ends can run the point (loaded here, nothing measured)."""
    from .. import subjects
    from ..workloads import workload_of

    try:
        w = workload_of(target.point)
    except (TypeError, ValueError) as exc:
        raise BisectError(f"point: {exc}") from None
    reasons = {}
    with target.environment():
        for label, sha in (("GOOD", good), ("BAD", bad)):
            name = target.name_at(sha)
            try:
                why = subjects.get(name).unsupported(w)
            except (subjects.SubjectError, ValueError) as exc:
                why = str(exc)
            if why:
                reasons[label] = why
    if len(reasons) == 2:
        raise BisectError(f"neither end can run the point: GOOD: {reasons['GOOD']}; BAD: {reasons['BAD']}")
    if reasons:
        ((label, why),) = reasons.items()
        raise BisectError(f"{label} cannot run the point, so the change cannot be measured: {why}")


@dataclass
class PairedMeasurer:
    """The measurer of :func:`.search.bisect`: ``(commit, effort) -> Probe``."""

    target: Target
    good: str
    bad: str
    samples: int = DEFAULT_SAMPLES
    noise_target: float | None = None
    time_cap_s: float = 5.0
    lock_clocks: bool = False
    device: str = "cuda"
    host: bool = False
    l2: str = "cold"
    alpha: float = stats.ALPHA
    min_effect: float = stats.PAIRED_MIN_EFFECT
    min_abs_seconds: float = stats.PAIRED_MIN_ABS_SECONDS
    log: Callable[[str], None] = print
    run_units: Callable = worker.run_units
    gpu: dict = field(default_factory=dict)

    def options(self, effort: int) -> worker.JobOptions:
        scale = 2**effort
        return worker.JobOptions(
            l2=self.l2,
            calls_per_sample=1 if self.host else CALLS_PER_SAMPLE,
            num_samples=self.samples * scale,
            device=self.device,
            host=self.host,
            lock_clocks=self.lock_clocks,
            noise_target=self.noise_target / scale if self.noise_target else None,
            time_cap_s=self.time_cap_s * scale,
        )

    def __call__(self, commit: str, effort: int) -> Probe:
        names = tuple(self.target.name_at(sha) for sha in (self.good, commit, self.bad))
        unit = worker.Unit(f"bisect/{commit[:12]}/{effort}", dict(self.target.point), names, labels=LABELS)
        start = time.monotonic()
        with self.target.environment():
            outcome = self.run_units([unit], self.options(effort), log=self.log)
        seconds = time.monotonic() - start
        self.gpu = outcome.gpu or self.gpu
        records = outcome.records.get(unit.key, {})
        for label in LABELS:
            records.setdefault(label, {"status": "failed", "reason": "no record came back"})
        bad_status = {k: records[k] for k in ("good", "bad") if records[k].get("status") != "ok"}
        figures = {label: _figures(records[label]) for label in LABELS}
        if records["mid"]["status"] != "ok":
            why = f"{records['mid']['status']}: {records['mid'].get('reason') or 'no reason given'}"
            return Probe(commit, skipped=why, seconds=seconds, effort=effort, figures=figures)
        if bad_status:
            ends = "; ".join(f"{k} {r['status']}: {r.get('reason')}" for k, r in bad_status.items())
            return Probe(
                commit,
                skipped=f"an end could not be measured with it ({ends})",
                seconds=seconds,
                effort=effort,
                figures=figures,
            )
        capped = any(records[label].get("capped") for label in LABELS)
        judged = {
            end: stats.compare_samples(
                records[end]["samples"],
                records["mid"]["samples"],
                alpha=self.alpha,
                min_effect=self.min_effect,
                min_abs=self.min_abs_seconds,
                capped=capped,
            )
            for end in ("good", "bad")
        }
        comparisons = {
            end: Comparison(j["verdict"], j["ratio"], j["p_value"], j["equivalence_p"]) for end, j in judged.items()
        }
        return Probe(
            commit,
            vs_good=comparisons["good"],
            vs_bad=comparisons["bad"],
            seconds=seconds,
            effort=effort,
            figures={**figures, "capped": capped},
        )


def _figures(record: dict) -> dict:
    """What a step's report shows for one side: status, median, samples, noise, GPU state."""
    out = {"status": record.get("status")}
    samples = record.get("samples")
    if samples:
        arr = np.asarray(samples, dtype="float64")
        out.update(
            median_us=float(np.median(arr)) * 1e6,
            n_samples=int(arr.size),
            rel_halfwidth=float(relative_halfwidth(arr)),
            n_throttled=record.get("n_throttled"),
        )
        state = record.get("gpu_state") or {}
        if state.get("sm_clock_mhz"):
            out["sm_clock_mhz"] = state["sm_clock_mhz"]
    if record.get("reason"):
        out["reason"] = record["reason"]
    return out


def point_of(values: dict) -> dict:
    """The point's axes (every one of :data:`POINT_AXES` but ``subject`` that is given)."""
    return {k: v for k, v in values.items() if k in POINT_AXES and k != "subject" and v is not None}
