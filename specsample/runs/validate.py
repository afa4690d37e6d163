"""Validate the sign-off: it must catch planted slowdowns and stay quiet on A/A runs.

``specsample signoff-validate`` (:func:`validate`), in four steps (progress on the log):

a. **Calibrate** the planted delay on the validated head's code at the base point (R=128, K=4,
   V=151936, block verification, draft logits, phi=0, ``mrv2``): the wrapper subject
   ``mrv2@HEAD+extra=n`` (:mod:`specsample.subjects.planted`: ``mrv2@HEAD`` followed by a delay
   kernel of ``n`` dependent iterations per row) in this process, ``mrv2@HEAD`` against
   doubling candidates, interleaved, until the slowdown passes 1.5x the largest target;
   fit it (least squares, for the record), pick the iteration counts for about 3%, 5% and 10%
   by interpolating the measured curve, then measure those counts against 0 again and report
   what they give (re-picking up to twice when a count misses its target by more than 30%).
b. **Plant** each count as a head side: ``S@HEAD+extra=<n>`` for the subjects of
   :data:`PLANTED_SUBJECTS` (the delay kernel runs in block verification with draft logits
   only), ``S@HEAD`` for every other subject. Nothing is committed and no product code carries
   a knob. If HEAD's ``specsample/`` differs from the working tree, a snapshot commit of the
   working tree's ``specsample/`` on top of HEAD stands in for HEAD, so the code validated is
   the code present.
c. **Sign off** with :func:`.paired.signoff_commits` (what ``specsample signoff`` runs):
   ``aa_runs`` A/A runs (head vs head) and one run per plant (head vs planted head), on the
   tier (a subset with sweeps / subjects). Runs are ordered A/A 1, 5%, 10%, A/A 2, 3%, A/A 3, ...
   so that a budget cut keeps both kinds; a run that would not finish inside the budget is left
   out and says so.
d. **Separate-process comparisons**, at no extra measurement: every paired run's base side is
   head's code measured in its own worker process, so two runs' base sides are the same code
   measured in separate processes, as two asv runs measure it, and a planted run's head side
   against the previous run's base side is a planted slowdown seen that way. They are judged as
   committed results are (``specsample signoff --results`` and comparisons across commits):
   asv's threshold (:data:`.stats.ASV_MIN_EFFECT`, 5%), no absolute floor. That measures the
   false alarms of the separate-process comparison and whether it catches each plant. (Within
   one asv run the subjects of a point are interleaved in one worker; these rows are the
   conservative case of two separate runs.)

Outputs, in ``out``, rewritten after every run so an interrupted validation keeps what it
measured; few files, so the folder fits a size-limited results transfer:
``detection-matrix.md`` (calibration, one row per paired run: regressions flagged among touched
points, i.e. block verification with draft logits of :data:`PLANTED_SUBJECTS`, and among the
untouched rest, improvements, unverified points, verdict; then the separate-process rows),
``reports.md`` (every sign-off's markdown report), ``frames.parquet`` (or ``frames.csv`` without
pyarrow: the tidy frames, plus a ``run`` column), ``verdicts.csv`` (``run`` and ``comparison``,
paired or separate), ``calibration.json``.

Criterion (the exit code): every A/A run flags no regression and verifies every point; the 5%
and 10% plants are flagged at every touched point and nowhere else; the 3% plant is reported,
with no requirement. The separate-process rows are reported (false alarms, plants caught), with
no requirement.

``--smoke`` runs on a CPU (Triton interpreter, tiny shapes, host wall-clock timer) and checks
the flow and the outputs, not detection.
"""

from __future__ import annotations

import dataclasses
import gc
import importlib.util
import json
import math
import shutil
import time
import traceback
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from ..track.signoff import report, stats
from . import paired

TARGETS = (0.03, 0.05, 0.10)
REQUIRED_FROM = 0.05  # planted slowdowns at or above this must be caught; smaller ones are reported
# The subjects a plant wraps in the delay (specsample.subjects.planted): it slows their
# block-verification points with draft logits; every other point of the tier is a control.
PLANTED_SUBJECTS = ("mrv2", "mrv2-pre50939")


def planted_name(subject: str, sha: str, iters: int) -> str:
    """The head side of a plant: ``S@SHA+extra=iters`` for :data:`PLANTED_SUBJECTS`, else ``S@SHA``."""
    return f"{subject}@{sha}+extra={iters}" if subject in PLANTED_SUBJECTS and iters > 0 else f"{subject}@{sha}"


GIT_USER = (
    "-c",
    "user.name=specsample validation",
    "-c",
    "user.email=validation@specsample.invalid",
    "-c",
    "commit.gpgsign=false",
)
# The calibration point: the base point of the issue, where the residual-mass kernel runs.
CALIBRATION_POINT = dict(
    subject="mrv2",
    mode="block",
    draft="logits",
    num_reqs=128,
    num_speculative_steps=4,
    vocab_size=151936,
    placeholder_density=0.0,
    placeholder_pattern="trailing",
)
SMOKE_POINT = dict(CALIBRATION_POINT, num_reqs=2, num_speculative_steps=2, vocab_size=300)


class ValidationError(RuntimeError):
    """The validation cannot run (a repository that is not one, a head that cannot be loaded);
    the CLI exits 2 with it."""


@dataclasses.dataclass
class Options:
    """What to validate and how (``specsample signoff-validate``'s options; :func:`options`
    fills in the defaults of a GPU run or a ``--smoke`` run)."""

    out: Path
    repo: Path
    tier: str = "quick"
    sweeps: tuple[str, ...] = ()
    subjects: tuple[str, ...] = ()
    samples: int = paired.DEFAULT_SAMPLES
    aa_runs: int = 5
    targets: tuple[float, ...] = TARGETS
    budget: float = 450.0  # seconds for the whole validation; runs that would not fit are left out
    machine: str = "h200"
    alpha: float = stats.ALPHA
    min_effect: float = stats.PAIRED_MIN_EFFECT
    min_abs_seconds: float = stats.PAIRED_MIN_ABS_SECONDS
    separate_min_effect: float = stats.ASV_MIN_EFFECT  # the separate-process rows (no absolute floor)
    smoke: bool = False
    device: str = "cuda"
    l2: str = "cold"
    host: bool = False  # host wall-clock timer (--smoke)
    # Calibration: scan doubling from first_iters up to scan_max, pick at most max_iters, re-pick
    # up to `refine` times.
    first_iters: int = 2
    scan_max: int = 4096
    max_iters: int = 8192
    refine: int = 2


def options(out: Path, repo: Path, *, smoke: bool = False, cuda: bool | None = None, **given) -> Options:
    """:class:`Options` with the defaults of a GPU run, or of a ``--smoke`` run: smoke tier,
    2 samples, warm L2, host timer, a one-step calibration scan; the compiled kernels where
    there is a GPU (the interpreter is for machines without CUDA). ``given`` values that are
    ``None`` keep the default."""
    given = {k: v for k, v in given.items() if v is not None}
    if cuda is None:
        import torch

        cuda = torch.cuda.is_available()
    if smoke:
        defaults = dict(
            tier="smoke",
            samples=2,
            device="cuda" if cuda else "cpu",
            l2="warm",
            host=True,
            first_iters=1,
            scan_max=1,
            max_iters=64,
            refine=0,
        )
    else:
        defaults = {}
    merged = {**defaults, **given}
    if "targets" in merged:
        merged["targets"] = tuple(sorted(merged["targets"]))
    return Options(out=Path(out), repo=Path(repo).resolve(), smoke=smoke, **merged)


def log_to_stdout(line: str) -> None:
    print(line, flush=True)


# ---------------------------------------------------------------------------------------------
# a. Calibration
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Calibration:
    point: dict
    base_seconds: float  # median latency without the delay in the first scan step
    scan: list[tuple[int, float]]  # (iterations, measured slowdown), including (0, 0)
    fit: tuple[float, float]  # slowdown ~ intercept + slope * iterations (least squares)
    chosen: dict[float, int]  # target -> iterations
    measured: dict[float, float]  # target -> slowdown measured for the chosen iterations
    seconds: float


def choose_iters(scan: list[tuple[int, float]], targets: tuple[float, ...], max_iters: int) -> dict[float, int]:
    """Iterations expected to give each target slowdown: linear interpolation on the measured
    curve (made non-decreasing), extrapolated from its last rising segment past the largest
    measurement; distinct, increasing with the target, between 1 and ``max_iters``."""
    pts = sorted(dict(scan).items())
    xs = [float(n) for n, _ in pts]
    ys, top = [], -float("inf")
    for _, s in pts:
        top = max(top, s)
        ys.append(top)
    chosen, previous = {}, 0
    for t in sorted(targets):
        if ys[-1] <= 0 or len(xs) < 2:  # no measurable effect (e.g. CPU noise): spread the scan range
            n = xs[-1] * t / max(targets)
        elif t <= ys[-1]:
            i = next(i for i, y in enumerate(ys) if y >= t)
            n = (
                xs[i]
                if i == 0 or ys[i] == ys[i - 1]
                else xs[i - 1] + (t - ys[i - 1]) * (xs[i] - xs[i - 1]) / (ys[i] - ys[i - 1])
            )
        else:
            j = max((i for i in range(1, len(xs)) if ys[i] > ys[i - 1]), default=len(xs) - 1)
            slope = (ys[j] - ys[j - 1]) / (xs[j] - xs[j - 1]) if ys[j] > ys[j - 1] else ys[-1] / xs[-1]
            n = xs[-1] + (t - ys[-1]) / slope
        chosen[t] = previous = min(max(round(n), previous + 1, 1), max_iters)
    return chosen


def linear_fit(scan: list[tuple[int, float]]) -> tuple[float, float]:
    """``(intercept, slope)`` of slowdown against iterations (least squares; 0, 0 for fewer than
    two distinct iteration counts)."""
    if len({n for n, _ in scan}) < 2:
        return 0.0, 0.0
    fit = scipy_stats.linregress([n for n, _ in scan], [s for _, s in scan])
    return float(fit.intercept), float(fit.slope)


def calibrate(repo: Path, sha: str, opts: Options, log: Callable[[str], None] = log_to_stdout) -> Calibration:
    """Step a, on commit ``sha``'s code, in this process."""
    from .. import subjects
    from ..measure import input_copies
    from ..subjects.planted import PLANTED_MODES
    from ..timing import HostSampler, Sampler, TimingConfig, interleave
    from ..workloads import workload_of

    start = time.monotonic()
    point = SMOKE_POINT if opts.smoke else CALIBRATION_POINT
    assert (point["mode"], point["draft"]) in PLANTED_MODES
    w = workload_of(point)
    with paired.repository_env(repo):
        try:
            subjects.get(f"mrv2@{sha}")
        except subjects.SubjectError as exc:
            raise ValidationError(f"{sha[:8]}: mrv2 cannot be loaded: {exc}") from None
    copies = input_copies(w, opts.l2, opts.device)

    def sampler(iters: int):
        with paired.repository_env(repo):
            subject = subjects.get(planted_name("mrv2", sha, iters))
            calls = [subject.prepare(w, opts.device, inputs).call for inputs in copies]
        if opts.host:
            return HostSampler(calls, TimingConfig("warm", 1, opts.samples))
        return Sampler(calls, TimingConfig(opts.l2, max(paired.CALLS_PER_SAMPLE, len(calls)), opts.samples))

    def slowdowns(samplers: dict) -> tuple[dict, float]:
        taken, errors = interleave(samplers, dict.fromkeys(samplers, opts.samples))
        if errors:
            raise RuntimeError(f"calibration failed: {errors}")
        base = float(np.median(taken[0]))
        return {n: float(np.median(s)) / base - 1.0 for n, s in taken.items() if n}, base

    log(f"calibration at {report.point_label(point)}: mrv2 vs mrv2+extra=n, n doubling")
    zero = sampler(0)
    scan, base_seconds, iters = [(0, 0.0)], None, opts.first_iters
    while True:
        step_start = time.monotonic()
        measured, base = slowdowns({0: zero, iters: sampler(iters)})
        base_seconds = base_seconds or base
        scan.append((iters, measured[iters]))
        log(
            f"  extra={iters:<5} {100 * measured[iters]:+6.2f}%  (base {base * 1e6:.1f} us, "
            f"{time.monotonic() - step_start:.1f} s)"
        )
        if measured[iters] >= 1.5 * max(opts.targets) or iters * 2 > opts.scan_max:
            break
        iters *= 2
    gc.collect()
    chosen = choose_iters(scan, opts.targets, opts.max_iters)
    for round_ in range(1 + opts.refine):
        measured, _ = slowdowns({0: zero, **{n: sampler(n) for n in sorted(set(chosen.values()))}})
        gc.collect()
        got = {t: measured[n] for t, n in chosen.items()}
        log(
            "  chosen: "
            + ", ".join(f"{100 * t:g}% -> {n} iterations ({100 * got[t]:+.2f}%)" for t, n in chosen.items())
        )
        if round_ == opts.refine or all(abs(got[t] / t - 1) <= 0.3 for t in chosen):
            break
        scan += [(n, s) for n, s in measured.items() if n not in dict(scan)]
        chosen = choose_iters(scan, opts.targets, opts.max_iters)
    fit = linear_fit(scan)
    log(
        f"  fit: slowdown ~ {100 * fit[0]:+.2f}% + {100 * fit[1]:.3f}% per iteration "
        f"({fit[1] * base_seconds * 1e6:.2f} us per iteration); {time.monotonic() - start:.0f} s"
    )
    del zero
    copies.clear()  # the input tensors (GPU memory) are not needed after this
    gc.collect()
    _release_gpu_memory(opts.device)
    return Calibration(point, base_seconds, scan, fit, chosen, got, time.monotonic() - start)


def _release_gpu_memory(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()


# ---------------------------------------------------------------------------------------------
# b. The validated head
# ---------------------------------------------------------------------------------------------


def validated_head(repo: Path) -> tuple[str, str]:
    """HEAD, or a snapshot commit of the working tree's ``specsample/`` on top of it when they
    differ; ``(sha, how)``."""
    from .asv import git, worktree

    head = git(repo, "rev-parse", "HEAD")
    if not git(repo, "status", "--porcelain", "--", "specsample"):
        return head, "HEAD"
    with worktree(repo, head) as wt:
        shutil.rmtree(wt / "specsample")
        for name in git(repo, "ls-files", "-co", "--exclude-standard", "--", "specsample").splitlines():
            if (repo / name).is_file():
                (wt / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(repo / name, wt / name)
        git(wt, "add", "-A", "--", "specsample")
        git(
            wt,
            *GIT_USER,
            "commit",
            "-q",
            "--no-verify",
            "--allow-empty",
            "-m",
            "validation: snapshot of the working tree's specsample/ (not on any branch)",
        )
        sha = git(wt, "rev-parse", "HEAD")
    return sha, f"snapshot of the working tree's specsample/ on HEAD {head[:8]}"


# ---------------------------------------------------------------------------------------------
# c./d. Sign-offs, separate-process comparisons and the detection matrix
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Run:
    name: str  # "A/A 1", "planted 5%"
    target: float | None  # planted slowdown aimed at; None for A/A
    head: str  # the commit of both sides
    extra: int = 0  # the head side's delay iterations (specsample.subjects.planted); 0 for A/A
    index: int = 0  # A/A run number
    result: paired.SignoffResult | None = None
    skipped: str | None = None
    order: int = 0  # position in execution order


@dataclasses.dataclass
class Separate:
    """One separate-process comparison (step d): ``base_of``'s base side against ``head_of``'s
    base side (A/A) or head side (a plant)."""

    name: str
    target: float | None
    base_of: str
    head_of: str
    verdicts: pd.DataFrame


def touched(verdicts: pd.DataFrame) -> pd.Series:
    """Points the knob slows down: block verification with draft logits of :data:`PLANTED_SUBJECTS`."""
    return (verdicts["mode"] == "block") & (verdicts["draft"] == "logits") & verdicts["subject"].isin(PLANTED_SUBJECTS)


def _tally(v: pd.DataFrame) -> dict:
    hit = touched(v).to_numpy(dtype=bool)
    reg = (v["verdict"] == "slower").to_numpy()
    n = stats.counts(v)
    return {
        "hit": hit,
        "reg": reg,
        "touched": f"{int((reg & hit).sum())} / {int(hit.sum())}",
        "untouched": f"{int((reg & ~hit).sum())} / {int((~hit).sum())}",
        "improvements": n["faster"],
        "unverified": sum(n[k] for k in (*stats.FAILED_VERDICTS, *stats.ONE_SIDED_VERDICTS)),
    }


def judge(run: Run) -> dict:
    """One paired row of the detection matrix."""
    if run.result is None:
        return {"verdict": f"not run ({run.skipped})"}
    t = _tally(run.result.verdicts)
    hit, reg = t.pop("hit"), t.pop("reg")
    row = dict(t, exit=run.result.exit_code)
    all_caught = hit.any() and bool(reg[hit].all())
    clean = not reg[~hit].any() and row["unverified"] == 0
    if run.target is None:
        row["verdict"] = "pass" if not reg.any() and row["unverified"] == 0 else "FAIL"
    elif run.target >= REQUIRED_FROM:
        row["verdict"] = "pass" if all_caught and clean else "FAIL"
    else:
        missed = int(hit.sum() - (reg & hit).sum())
        row["verdict"] = (
            ("caught everywhere" if all_caught else f"missed {missed}")
            + ("" if clean else ", flagged elsewhere")
            + " (no requirement)"
        )
    return row


def judge_separate(sep: Separate) -> dict:
    """One separate-process row: false alarms (A/A) or what a plant looks like there."""
    t = _tally(sep.verdicts)
    hit, reg = t.pop("hit"), t.pop("reg")
    row = dict(t)
    if sep.target is None:
        alarms = int(reg.sum())
        row["verdict"] = "no false alarm" if not alarms else f"{alarms} false alarm{'s' * (alarms != 1)}"
    else:
        missed = int(hit.sum() - (reg & hit).sum())
        row["verdict"] = ("caught everywhere" if hit.any() and not missed else f"missed {missed}") + (
            "" if not reg[~hit].any() else ", flagged elsewhere"
        )
    return row


def separate_comparisons(runs: list[Run], opts: Options) -> list[Separate]:
    """Step d over the finished runs, in execution order: consecutive runs' base sides (A/A),
    and each plant's head side against the previous run's base side."""
    done = sorted((r for r in runs if r.result is not None), key=lambda r: r.order)
    out = []

    def judge_sides(base: pd.DataFrame, head: pd.DataFrame) -> pd.DataFrame:
        return stats.compare(base, head, alpha=opts.alpha, min_effect=opts.separate_min_effect, min_abs_seconds=0.0)

    for i, (prev, run) in enumerate(zip(done, done[1:]), 1):
        prev_base = paired.split_sides(prev.result.frame)[0]
        run_base, run_head = paired.split_sides(run.result.frame)
        out.append(Separate(f"A/A (separate) {i}", None, prev.name, run.name, judge_sides(prev_base, run_base)))
        if run.target is not None:
            out.append(
                Separate(f"{run.name} (separate)", run.target, prev.name, run.name, judge_sides(prev_base, run_head))
            )
    return out


def _false_alarm_line(seps: list[Separate], opts: Options) -> str:
    aa = [s for s in seps if s.target is None]
    if not aa:
        return "No separate-process comparison yet (it needs two finished runs)."
    compared = sum(int(s.verdicts["verdict"].isin(stats.COMPARED_VERDICTS).sum()) for s in aa)
    alarms = sum(int((s.verdicts["verdict"] == "slower").sum()) for s in aa)
    rate = f"{100 * alarms / compared:.1f}%" if compared else "n/a"
    return (
        f"Separate-process false alarms at {100 * opts.separate_min_effect:g}% (no absolute floor): {alarms} "
        f"regressions flagged in {compared} A/A point comparisons over {len(aa)} pairs of runs ({rate})."
    )


def overall(runs: list[Run]) -> str:
    """PASS, FAIL or INCOMPLETE (a run left out), by the criterion of the module docstring."""
    rows = [(run, judge(run)) for run in runs]
    if any("not run" in r["verdict"] for _, r in rows):
        return "INCOMPLETE"
    required = [r for run, r in rows if run.target is None or run.target >= REQUIRED_FROM]
    return "PASS" if all(r["verdict"] == "pass" for r in required) else "FAIL"


def matrix_markdown(
    runs: list[Run],
    seps: list[Separate],
    calibration: Calibration | None,
    opts: Options,
    head: str,
    head_how: str,
    elapsed: float,
) -> str:
    lines = [
        "# Sign-off validation: detection matrix",
        "",
        f"**{overall(runs)}**. Criterion: A/A runs flag no regression and verify every point; planted "
        f"slowdowns of {100 * REQUIRED_FROM:g}% and more are flagged at every touched point and nowhere else; "
        "smaller ones are reported only. The separate-process rows are reported only.",
        "",
        f"Head `{head[:8]}` ({head_how}); tier `{opts.tier}`"
        + (f", sweeps {', '.join(opts.sweeps)}" if opts.sweeps else "")
        + (f", subjects {', '.join(opts.subjects)}" if opts.subjects else "")
        + f"; {opts.samples} samples a side; alpha {opts.alpha:g}, min_effect {100 * opts.min_effect:g}%, "
        + f"min_abs {opts.min_abs_seconds * 1e6:g} us; machine `{opts.machine}`"
        + (" (SMOKE: host timer, tiny shapes; detection meaningless)" if opts.smoke else "")
        + f"; {elapsed:.0f} s so far.",
        "",
        f"Touched points: block verification with draft logits of {', '.join(f'`{s}`' for s in PLANTED_SUBJECTS)} "
        "(where the planted delay kernel runs); every other point is a control.",
        "",
    ]
    if calibration is not None:
        c = calibration
        lines += [
            "## Calibration",
            "",
            f"At {report.point_label(c.point)}: mrv2 takes {c.base_seconds * 1e6:.1f} us. Fit over the "
            f"scan: slowdown = {100 * c.fit[0]:+.2f}% + {100 * c.fit[1]:.3f}% per iteration "
            f"({c.fit[1] * c.base_seconds * 1e6:.2f} us per iteration).",
            "",
            "| delay iterations | slowdown |",
            "|---:|---:|",
            *[f"| {n} | {100 * s:+.2f}% |" for n, s in c.scan],
            "",
            "| target | delay iterations (`+extra=n`) | measured |",
            "|---:|---:|---:|",
            *[f"| {100 * t:g}% | {c.chosen[t]} | {100 * c.measured[t]:+.2f}% |" for t in sorted(c.chosen)],
            "",
        ]

    def planted_cell(target: float | None, sha: str) -> str:
        if target is None:
            return "—"
        if calibration is None:
            return f"{100 * target:g}% (`{sha[:8]}`)"
        return (
            f"{100 * target:g}%: {calibration.chosen[target]} iterations, "
            f"{100 * calibration.measured[target]:+.2f}% (`{sha[:8]}`)"
        )

    lines += [
        "## Paired runs (`specsample signoff`)",
        "",
        "| run | planted (measured at the base point) | regressions, touched | regressions, untouched | "
        "improvements | unverified | exit | verdict |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for run in runs:
        r = judge(run)
        cells = [r.get(k, "") for k in ("touched", "untouched", "improvements", "unverified", "exit")]
        lines.append(
            f"| {run.name} | {planted_cell(run.target, run.head)} | "
            + " | ".join(map(str, cells))
            + f" | {r['verdict']} |"
        )
    by_name = {run.name: run for run in runs}
    lines += [
        "",
        "## Separate-process comparisons (committed results, `--results`)",
        "",
        f"Each run's sides measured in their own worker process, compared unpaired at "
        f"{100 * opts.separate_min_effect:g}% (asv's threshold), no absolute floor: A/A = two runs' base "
        "sides (head's code twice); a plant = its head side against the previous run's base side.",
        "",
        _false_alarm_line(seps, opts),
        "",
        "| comparison | base side of | head side of | regressions, touched | regressions, untouched | "
        "improvements | unverified | verdict |",
        "|---|---|---|---:|---:|---:|---:|---|",
    ]
    for sep in seps:
        r = judge_separate(sep)
        head_side = "head" if sep.target is not None else "base"
        cells = [r[k] for k in ("touched", "untouched", "improvements", "unverified")]
        lines.append(
            f"| {sep.name} | {sep.base_of} (base) | {sep.head_of} ({head_side}; "
            f"{planted_cell(sep.target, by_name[sep.head_of].head)}) | "
            + " | ".join(map(str, cells))
            + f" | {r['verdict']} |"
        )
    return "\n".join(lines) + "\n"


def write_outputs(
    out: Path,
    runs: list[Run],
    seps: list[Separate],
    calibration: Calibration | None,
    opts: Options,
    head: str,
    head_how: str,
    elapsed: float,
) -> None:
    out.mkdir(parents=True, exist_ok=True)
    done = [run for run in runs if run.result is not None]
    (out / "detection-matrix.md").write_text(matrix_markdown(runs, seps, calibration, opts, head, head_how, elapsed))
    texts = [f"# {run.name}\n\n{run.result.report}" for run in done]
    texts += [
        f"# {sep.name}: {sep.base_of} base vs {sep.head_of}\n\n"
        + report.report_markdown(sep.verdicts, title=f"separate-process comparison: {sep.name}")
        for sep in seps
    ]
    (out / "reports.md").write_text("\n".join(texts))
    if calibration is not None:
        payload = dataclasses.asdict(calibration)
        payload["chosen"] = {str(k): v for k, v in calibration.chosen.items()}
        payload["measured"] = {str(k): v for k, v in calibration.measured.items()}
        (out / "calibration.json").write_text(json.dumps(payload, indent=1))
    if not done:
        return
    frames = pd.concat([run.result.frame.assign(run=run.name) for run in done], ignore_index=True)
    verdicts = pd.concat(
        [run.result.verdicts.assign(run=run.name, comparison="paired") for run in done]
        + [sep.verdicts.assign(run=sep.name, comparison="separate") for sep in seps],
        ignore_index=True,
    )
    verdicts.to_csv(out / "verdicts.csv", index=False)
    if importlib.util.find_spec("pyarrow") is not None:
        frames.to_parquet(out / "frames.parquet", index=False)
    else:
        frames.assign(samples=frames["samples"].map(_json_samples)).to_csv(out / "frames.csv", index=False)


def _json_samples(samples) -> str:
    return json.dumps(
        None if samples is None or (isinstance(samples, float) and math.isnan(samples)) else list(samples)
    )


def run_order(aa_runs: int, targets: tuple[float, ...]) -> list[tuple[str, float | None, int]]:
    """``(name, target, A/A number)``: A/A 1, the required plants (5%, 10%), then the other A/A
    runs alternating with the remaining plants, so that a budget cut keeps both kinds."""
    required = sorted(t for t in targets if t >= REQUIRED_FROM)
    rest = sorted(t for t in targets if t < REQUIRED_FROM)
    plants = [(f"planted {100 * t:g}%", t, 0) for t in required + rest]
    aa = [(f"A/A {i}", None, i) for i in range(1, aa_runs + 1)]
    order = aa[:1] + plants[:2]
    for pair in zip(aa[1:], plants[2:]):
        order += pair
    order += aa[1 + len(plants[2:]) :] + plants[2 + len(aa[1:]) :]
    return order


def display_order(runs: list[Run]) -> list[Run]:
    """A/A 1..n, then the plants by size."""
    return sorted(runs, key=lambda r: (r.target is not None, r.target or 0, r.index))


# ---------------------------------------------------------------------------------------------
# The whole validation
# ---------------------------------------------------------------------------------------------


def validate(opts: Options, log: Callable[[str], None] = log_to_stdout) -> int:
    """Steps a-d (module docstring); 0 when the matrix says PASS, else 1."""
    import os
    import sys

    start = time.monotonic()
    if opts.device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
        # The calibration runs a commit's kernels here, under the interpreter: Triton must not
        # have been imported yet (its language functions are decorated at import).
        if "triton" in sys.modules:
            raise ValidationError("a CPU run needs TRITON_INTERPRET=1 set before Triton is imported")
        os.environ["TRITON_INTERPRET"] = "1"
    repo = opts.repo
    if not (repo / ".git").exists():
        raise ValidationError(f"{repo} is not a git repository")
    head, head_how = validated_head(repo)
    log(f"specsample signoff-validate: head {head[:8]} ({head_how}), output to {opts.out}")
    environment = {} if opts.host else None

    # a. calibrate on head's code
    calibration = calibrate(repo, head, opts, log)
    # b. plants: head sides with the calibrated delay
    log(
        "plants: "
        + ", ".join(f"{100 * t:g}% S@{head[:8]}+extra={n}" for t, n in calibration.chosen.items())
        + f" for S in {', '.join(PLANTED_SUBJECTS)} ({time.monotonic() - start:.0f} s)"
    )
    # c. sign-offs, in an order that keeps both kinds if the budget runs out
    runs = [
        Run(name, target, head, calibration.chosen[target] if target is not None else 0, index, order=i)
        for i, (name, target, index) in enumerate(run_order(opts.aa_runs, opts.targets))
    ]
    seps: list[Separate] = []
    last = 0.0  # the previous run's seconds: the estimate of the next one's
    for i, run in enumerate(runs, 1):
        elapsed = time.monotonic() - start
        if last and elapsed + last * 1.1 > opts.budget:
            run.skipped = f"time budget: {elapsed:.0f} s used of {opts.budget:.0f}, a run takes ~{last:.0f} s"
            log(f"[run {i}/{len(runs)}] {run.name}: {run.skipped}")
            continue
        log(f"[run {i}/{len(runs)}] {run.name}: {head[:8]} vs {planted_name('mrv2', head[:8], run.extra)}")
        try:
            run.result = paired.signoff_commits(
                repo,
                head,
                run.head,
                head_subject=lambda s, sha, extra=run.extra: planted_name(s, sha, extra),
                tier=opts.tier,
                sweeps=opts.sweeps or None,
                subjects=opts.subjects or None,
                samples=opts.samples,
                machine=opts.machine,
                alpha=opts.alpha,
                min_effect=opts.min_effect,
                min_abs_seconds=opts.min_abs_seconds,
                device=opts.device,
                l2=opts.l2,
                host=opts.host,
                environment=environment,
                log=log,
            )
        except Exception as exc:  # noqa: BLE001 - recorded in the matrix; the other runs go on
            traceback.print_exc()
            run.skipped = f"error: {type(exc).__name__}: {exc}".splitlines()[0][:200]
            continue
        last = run.result.seconds
        row = judge(run)
        log(
            f"[run {i}/{len(runs)}] {run.name}: exit {run.result.exit_code}, regressions touched {row['touched']}, "
            f"untouched {row['untouched']}: {row['verdict']} ({run.result.seconds:.0f} s; "
            f"{time.monotonic() - start:.0f} s so far)"
        )
        gc.collect()
        seps = separate_comparisons(runs, opts)
        write_outputs(opts.out, display_order(runs), seps, calibration, opts, head, head_how, time.monotonic() - start)
    # d. final outputs (also when every run was cut)
    seps = separate_comparisons(runs, opts)
    write_outputs(opts.out, display_order(runs), seps, calibration, opts, head, head_how, time.monotonic() - start)
    text = (opts.out / "detection-matrix.md").read_text()
    log(text)
    return 0 if overall(runs) == "PASS" else 1
