#!/usr/bin/env python3
"""Validate ``specsample signoff``: it must catch planted slowdowns and stay quiet on A/A runs.

One process, in four steps (progress and timings on stdout):

a. **Calibrate** the planted knob (:mod:`specsample.kernels.planted`, ``BALLAST_ITERS``) on
   HEAD's code at the base point (R=128, K=4, V=151936, block verification, draft logits,
   phi=0, ``mrv2``): time BALLAST_ITERS=0 against doubling candidates, interleaved, until the
   slowdown passes 1.5x the largest target; fit it (least squares, for the record), pick the
   iteration counts for about 3%, 5% and 10% by interpolating the measured curve, then measure
   those counts against 0 again and report what they give (re-picking up to twice when a count
   misses its target by more than 30%).
b. **Plant** each count as a commit on top of HEAD (made in a temporary detached worktree; no
   branch moves) whose only change is ``BALLAST_ITERS = <n>`` in ``planted.py``. If HEAD's
   ``specsample/`` differs from the working tree (e.g. the GPU box's history bundle is older
   than the copied files), a snapshot commit of the working tree's ``specsample/`` is made on
   top of HEAD first and stands in for HEAD, so the code validated is the code present.
c. **Sign off** with :func:`specsample.paired.signoff_commits` (what ``specsample signoff``
   runs; in-process, so torch is imported once): ``--aa-runs`` A/A runs (HEAD vs HEAD) and one
   run per planted commit (HEAD vs planted), on ``--tier`` (``--sweep`` for a subset). Runs
   are ordered A/A 1, 5%, 10%, A/A 2, 3%, A/A 3, ... so that a ``--budget`` cut keeps both
   kinds; a run that would not finish inside the budget is left out and says so.
d. **Write** to ``--out`` (default ``$OUT``, else ``./validation``), rewritten after every run
   so an interrupted validation keeps what it measured; few files, so the folder fits a
   size-limited results transfer: ``detection-matrix.md`` (calibration, then one row per run:
   regressions flagged among touched points, i.e. block verification with draft logits of the
   variants built on mrv2's pipeline, and among the untouched rest, improvements, verdict),
   ``reports.md`` (every sign-off's markdown report), ``frames.parquet`` (or ``frames.csv``
   without pyarrow: the tidy frames, plus a ``run`` column), ``verdicts.csv``,
   ``calibration.json``.

Criterion: every A/A run flags no regression; the 5% and 10% plants are flagged at every
touched point and nowhere else; the 3% plant is reported, with no requirement.

GPU box (repository root, ``source scripts/gpu-env.sh`` first)::

    python3 scripts/validate_signoff.py --out "$OUT"

CPU smoke run (Triton interpreter, tiny shapes, host wall-clock timer: checks the flow and the
outputs, not detection)::

    python3 scripts/validate_signoff.py --smoke --aa-runs 1 --out /tmp/validation
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import gc
import importlib.util
import json
import os
import re
import shutil
import statistics
import sys
import time
import traceback
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TARGETS = (0.03, 0.05, 0.10)
REQUIRED_FROM = 0.05  # planted slowdowns at or above this must be caught; smaller ones are reported
PLANTED_FILE = "specsample/kernels/planted.py"
GIT_USER = ("-c", "user.name=specsample validation", "-c", "user.email=validation@specsample.invalid",
            "-c", "commit.gpgsign=false")  # fmt: skip
# The calibration point: the base point of the issue, where the residual-mass kernel runs.
CALIBRATION_POINT = dict(variant="mrv2", mode="block", draft="logits", num_reqs=128, K=4, vocab_size=151936,
                         phi=0.0, pattern="trailing")  # fmt: skip
SMOKE_POINT = dict(CALIBRATION_POINT, num_reqs=2, K=2, vocab_size=300)


def log(line: str) -> None:
    print(line, flush=True)


# ---------------------------------------------------------------------------------------------
# a. Calibration
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Calibration:
    point: dict
    base_seconds: float  # median latency at BALLAST_ITERS=0 in the first scan step
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
            n = xs[i] if i == 0 or ys[i] == ys[i - 1] else xs[i - 1] + (t - ys[i - 1]) * (xs[i] - xs[i - 1]) / (ys[i] - ys[i - 1])
        else:
            j = max((i for i in range(1, len(xs)) if ys[i] > ys[i - 1]), default=len(xs) - 1)
            slope = (ys[j] - ys[j - 1]) / (xs[j] - xs[j - 1]) if ys[j] > ys[j - 1] else ys[-1] / xs[-1]
            n = xs[-1] + (t - ys[-1]) / slope
        chosen[t] = previous = min(max(round(n), previous + 1, 1), max_iters)
    return chosen


def linear_fit(scan: list[tuple[int, float]]) -> tuple[float, float]:
    import numpy as np

    if len(scan) < 2:
        return 0.0, 0.0
    slope, intercept = np.polyfit([n for n, _ in scan], [s for _, s in scan], 1)
    return float(intercept), float(slope)


class _Knobbed:
    """A variant whose calls run with ``planted.BALLAST_ITERS = iters`` (the pipeline reads it at
    construction, i.e. in every call; a CUDA graph captures the kernel built with it)."""

    def __init__(self, variant, planted, iters: int) -> None:
        self.variant, self.planted, self.iters = variant, planted, iters

    def prepare(self, w, **kwargs):
        prepared = self.variant.prepare(w, **kwargs)
        return dataclasses.replace(prepared, call=functools.partial(self._call, prepared.call))

    def _call(self, call):
        saved, self.planted.BALLAST_ITERS = self.planted.BALLAST_ITERS, self.iters
        try:
            return call()
        finally:
            self.planted.BALLAST_ITERS = saved


def calibrate(head, opts, make_sampler) -> Calibration:
    """Step a, on ``head`` (a loaded checkout) in this process."""
    from specsample import grid, paired
    from specsample.measure import input_copies

    start = time.monotonic()
    point = SMOKE_POINT if opts.smoke else CALIBRATION_POINT
    w = grid.workload_of(point)
    variant = head.variants.get(point["variant"])
    planted = head.module("kernels.planted")
    w_side = paired.side_workload(w, head.workloads.Workload)
    copies = input_copies(w, opts.l2, opts.device)

    def sampler(iters: int):
        with head.active():
            return make_sampler(_Knobbed(variant, planted, iters), w_side, copies)

    def slowdowns(samplers: dict) -> tuple[dict, float]:
        taken, errors = paired.interleave(samplers, dict.fromkeys(samplers, opts.samples))
        if errors:
            raise RuntimeError(f"calibration failed: {errors}")
        base = statistics.median(taken[0])
        return {n: statistics.median(s) / base - 1.0 for n, s in taken.items() if n}, base

    log(f"calibration at {paired.point_label(point)}: BALLAST_ITERS=0 vs doubling candidates")
    zero = sampler(0)
    scan, base_seconds, iters = [(0, 0.0)], None, opts.first_iters
    while True:
        step_start = time.monotonic()
        measured, base = slowdowns({0: zero, iters: sampler(iters)})
        base_seconds = base_seconds or base
        scan.append((iters, measured[iters]))
        log(f"  BALLAST_ITERS={iters:<5} {100 * measured[iters]:+6.2f}%  (base {base * 1e6:.1f} us, "
            f"{time.monotonic() - step_start:.1f} s)")
        if measured[iters] >= 1.5 * max(opts.targets) or iters * 2 > opts.scan_max:
            break
        iters *= 2
    gc.collect()
    chosen = choose_iters(scan, opts.targets, opts.max_iters)
    for round_ in range(1 + opts.refine):
        measured, _ = slowdowns({0: zero, **{n: sampler(n) for n in sorted(set(chosen.values()))}})
        gc.collect()
        got = {t: measured[n] for t, n in chosen.items()}
        log("  chosen: " + ", ".join(f"{100 * t:g}% -> {n} iterations ({100 * got[t]:+.2f}%)" for t, n in chosen.items()))
        if round_ == opts.refine or all(abs(got[t] / t - 1) <= 0.3 for t in chosen):
            break
        scan += [(n, s) for n, s in measured.items() if n not in dict(scan)]
        chosen = choose_iters(scan, opts.targets, opts.max_iters)
    fit = linear_fit(scan)
    log(f"  fit: slowdown ~ {100 * fit[0]:+.2f}% + {100 * fit[1]:.3f}% per iteration "
        f"({fit[1] * base_seconds * 1e6:.2f} us per iteration); {time.monotonic() - start:.0f} s")
    del zero, copies
    gc.collect()
    return Calibration(point, base_seconds, scan, fit, chosen, got, time.monotonic() - start)


# ---------------------------------------------------------------------------------------------
# b. Planted commits
# ---------------------------------------------------------------------------------------------


def validated_head(repo: Path) -> tuple[str, str]:
    """HEAD, or a snapshot commit of the working tree's ``specsample/`` on top of it when they
    differ; ``(sha, how)``."""
    from specsample.asv_runs import git, worktree

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
        git(wt, *GIT_USER, "commit", "-q", "--no-verify", "--allow-empty", "-m",
            "validation: snapshot of the working tree's specsample/ (not on any branch)")
        sha = git(wt, "rev-parse", "HEAD")
    return sha, f"snapshot of the working tree's specsample/ on HEAD {head[:8]}"


def planted_commit(repo: Path, base: str, iters: int, target: float) -> str:
    """A commit on ``base`` whose only change is ``BALLAST_ITERS = iters`` (no branch moves)."""
    from specsample.asv_runs import git, worktree

    with worktree(repo, base) as wt:
        path = wt / PLANTED_FILE
        if not path.is_file():
            raise SystemExit(f"validate_signoff: {base[:8]} has no {PLANTED_FILE}; commit the knob first")
        text, count = re.subn(r"^BALLAST_ITERS = \d+$", f"BALLAST_ITERS = {iters}", path.read_text(), flags=re.M)
        if count != 1:
            raise SystemExit(f"validate_signoff: no single 'BALLAST_ITERS = <n>' line in {PLANTED_FILE}")
        path.write_text(text)
        git(wt, *GIT_USER, "commit", "-q", "--no-verify", "-m",
            f"validation: planted {100 * target:g}% slowdown, BALLAST_ITERS = {iters} (not on any branch)",
            "--", PLANTED_FILE)  # fmt: skip
        return git(wt, "rev-parse", "HEAD")


# ---------------------------------------------------------------------------------------------
# c./d. Sign-offs and the detection matrix
# ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class Run:
    name: str  # "A/A 1", "planted 5%"
    target: float | None  # planted slowdown aimed at; None for A/A
    head: str
    index: int = 0  # A/A run number
    result: object = None  # paired.SignoffResult
    skipped: str | None = None


def touched(verdicts):
    """Points the knob slows down: block verification with draft logits, mrv2-pipeline variants."""
    from specsample.kernels import planted

    return (verdicts["mode"] == "block") & (verdicts["draft"] == "logits") & verdicts["variant"].isin(planted.VARIANTS)


def judge(run: Run) -> dict:
    """One detection-matrix row."""
    if run.result is None:
        return {"verdict": f"not run ({run.skipped})"}
    v = run.result.verdicts
    hit = touched(v).to_numpy(dtype=bool)
    reg = (v["verdict"] == "regression").to_numpy()
    row = {
        "touched": f"{int((reg & hit).sum())} / {int(hit.sum())}",
        "untouched": f"{int((reg & ~hit).sum())} / {int((~hit).sum())}",
        "improvements": int((v["verdict"] == "improvement").sum()),
        "failed": int((v["verdict"] == "failed").sum()),
        "exit": run.result.exit_code,
    }
    all_caught = hit.any() and bool(reg[hit].all())
    clean = not reg[~hit].any() and row["failed"] == 0
    if run.target is None:
        row["verdict"] = "pass" if not reg.any() and row["failed"] == 0 else "FAIL"
    elif run.target >= REQUIRED_FROM:
        row["verdict"] = "pass" if all_caught and clean else "FAIL"
    else:
        missed = int(hit.sum() - (reg & hit).sum())
        row["verdict"] = ("caught everywhere" if all_caught else f"missed {missed}") + (
            "" if clean else ", flagged elsewhere") + " (no requirement)"
    return row


def matrix_markdown(runs: list[Run], calibration: Calibration | None, opts, head: str, head_how: str,
                    elapsed: float) -> str:
    from specsample.paired import point_label

    rows = [(run, judge(run)) for run in runs]
    required = [r for run, r in rows if run.target is None or run.target >= REQUIRED_FROM]
    if any("not run" in r["verdict"] for _, r in rows):
        overall = "INCOMPLETE"
    else:
        overall = "PASS" if all(r["verdict"] == "pass" for r in required) else "FAIL"
    lines = [
        "# Sign-off validation: detection matrix",
        "",
        f"**{overall}**. Criterion: A/A runs flag no regression; planted slowdowns of "
        f"{100 * REQUIRED_FROM:g}% and more are flagged at every touched point and nowhere else; "
        "smaller ones are reported only.",
        "",
        f"HEAD `{head[:8]}` ({head_how}); tier `{opts.tier}`"
        + (f", sweeps {', '.join(opts.sweep)}" if opts.sweep else "")
        + (f", variants {', '.join(opts.variant)}" if opts.variant else "")
        + f"; {opts.samples} samples a side; alpha {opts.alpha:g}, min_effect {100 * opts.min_effect:g}%, "
        + f"min_abs {opts.min_abs_seconds * 1e6:g} us; "
        f"machine `{opts.machine}`{' (SMOKE: CPU interpreter, host timer; detection meaningless)' if opts.smoke else ''}; "
        f"{elapsed:.0f} s so far.",
        "",
        "Touched points: block verification with draft logits of `mrv2` and `mrv2-pre50939` (the "
        "residual-mass kernel the knob slows); every other point is a control.",
        "",
    ]
    if calibration is not None:
        c = calibration
        lines += [
            "## Calibration",
            "",
            f"At {point_label(c.point)}: BALLAST_ITERS=0 takes {c.base_seconds * 1e6:.1f} us. Fit over the scan: "
            f"slowdown = {100 * c.fit[0]:+.2f}% + {100 * c.fit[1]:.3f}% per iteration "
            f"({c.fit[1] * c.base_seconds * 1e6:.2f} us per iteration).",
            "",
            "| BALLAST_ITERS | slowdown |",
            "|---:|---:|",
            *[f"| {n} | {100 * s:+.2f}% |" for n, s in c.scan],
            "",
            "| target | BALLAST_ITERS | measured |",
            "|---:|---:|---:|",
            *[f"| {100 * t:g}% | {c.chosen[t]} | {100 * c.measured[t]:+.2f}% |" for t in sorted(c.chosen)],
            "",
        ]
    lines += [
        "## Runs",
        "",
        "| run | planted (measured at the base point) | regressions, touched | regressions, untouched | improvements | failed | exit | verdict |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for run, r in rows:
        planted = "—" if run.target is None else (
            f"{100 * run.target:g}%: {calibration.chosen[run.target]} iterations, "
            f"{100 * calibration.measured[run.target]:+.2f}% (`{run.head[:8]}`)")
        cells = [r.get(k, "") for k in ("touched", "untouched", "improvements", "failed", "exit")]
        lines.append(f"| {run.name} | {planted} | " + " | ".join(str(c) for c in cells) + f" | {r['verdict']} |")
    return "\n".join(lines) + "\n"


def write_outputs(out: Path, runs: list[Run], calibration: Calibration | None, opts, head: str, head_how: str,
                  elapsed: float) -> None:
    import pandas as pd

    out.mkdir(parents=True, exist_ok=True)
    done = [run for run in runs if run.result is not None]
    (out / "detection-matrix.md").write_text(matrix_markdown(runs, calibration, opts, head, head_how, elapsed))
    (out / "reports.md").write_text("\n".join(f"# {run.name}\n\n{run.result.report}" for run in done))
    if calibration is not None:
        payload = dataclasses.asdict(calibration)
        payload["chosen"] = {str(k): v for k, v in calibration.chosen.items()}
        payload["measured"] = {str(k): v for k, v in calibration.measured.items()}
        (out / "calibration.json").write_text(json.dumps(payload, indent=1))
    if not done:
        return
    frames = pd.concat([run.result.frame.assign(run=run.name) for run in done], ignore_index=True)
    verdicts = pd.concat([run.result.verdicts.assign(run=run.name) for run in done], ignore_index=True)
    verdicts.to_csv(out / "verdicts.csv", index=False)
    if importlib.util.find_spec("pyarrow") is not None:
        frames.to_parquet(out / "frames.parquet", index=False)
    else:
        frames.assign(samples=frames["samples"].map(json.dumps)).to_csv(out / "frames.csv", index=False)


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
    order += aa[1 + len(plants[2:]):] + plants[2 + len(aa[1:]):]
    return order


def display_order(runs: list[Run]) -> list[Run]:
    """A/A 1..n, then the plants by size."""
    return sorted(runs, key=lambda r: (r.target is not None, r.target or 0, r.index))


# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, default=Path(os.environ.get("OUT") or "validation"))
    p.add_argument("--repo", type=Path, default=REPO)
    p.add_argument("--tier", help="default quick (smoke with --smoke)")
    p.add_argument("--sweep", action="append", metavar="NAME", help="only this sweep of the tier (repeatable)")
    p.add_argument("--variant", action="append", metavar="NAME", help="only this variant (repeatable)")
    p.add_argument("--samples", type=int, help="samples per side and point (default 30; 2 with --smoke)")
    p.add_argument("--aa-runs", type=int, default=5)
    p.add_argument("--targets", type=float, nargs="+", default=list(TARGETS), help="planted slowdowns (fractions)")
    p.add_argument("--budget", type=float, default=450.0, help="seconds for the whole validation; runs that "
                   "would not fit are left out (default 450)")
    p.add_argument("--machine", default=os.environ.get("SPECSAMPLE_MACHINE", "h200"))
    p.add_argument("--alpha", type=float, default=0.002)
    p.add_argument("--min-effect", type=float, help="default: specsample.signoff.PAIRED_MIN_EFFECT")
    p.add_argument("--min-abs-us", type=float, help="default: specsample.signoff.PAIRED_MIN_ABS_SECONDS in us")
    p.add_argument("--smoke", action="store_true", help="CPU: Triton interpreter, tiny shapes, host timer")
    opts = p.parse_args(argv)
    opts.targets = tuple(sorted(opts.targets))
    opts.tier = opts.tier or ("smoke" if opts.smoke else "quick")
    opts.samples = opts.samples or (2 if opts.smoke else 30)
    # The smoke run uses the GPU's compiled kernels where there is one (the interpreter is for
    # machines without CUDA; on the GPU box it also breaks on that box's numpy).
    smoke_device = "cuda" if _has_cuda() else "cpu"
    opts.device, opts.l2 = (smoke_device, "warm") if opts.smoke else ("cuda", "cold")
    # Calibration: scan doubling from first_iters up to scan_max, pick at most max_iters, re-pick
    # up to `refine` times.
    opts.first_iters, opts.scan_max, opts.max_iters, opts.refine = (1, 1, 64, 0) if opts.smoke else (2, 4096, 8192, 2)
    return opts


def _has_cuda() -> bool:
    import torch

    return torch.cuda.is_available()


def main(argv: list[str] | None = None) -> int:
    start = time.monotonic()
    opts = parse_args(argv)
    if opts.smoke and opts.device == "cpu":
        os.environ.setdefault("TRITON_INTERPRET", "1")  # before any kernel module is imported
    if importlib.util.find_spec("specsample") is None:
        sys.path.insert(0, str(REPO))
    from specsample import paired, signoff

    opts.min_effect = signoff.PAIRED_MIN_EFFECT if opts.min_effect is None else opts.min_effect
    opts.min_abs_seconds = signoff.PAIRED_MIN_ABS_SECONDS if opts.min_abs_us is None else opts.min_abs_us * 1e-6
    repo = opts.repo.resolve()
    if opts.smoke:
        make_sampler = functools.partial(paired.host_sampler, warmup=0)
        environment = {}
    else:
        import torch

        if not torch.cuda.is_available():
            print("validate_signoff: needs a CUDA GPU (or --smoke)", file=sys.stderr)
            return 2
        make_sampler = paired.gpu_sampler(opts.l2, opts.samples)
        environment = None
    from specsample.asv_runs import worktree

    head, head_how = validated_head(repo)
    log(f"validate_signoff: HEAD {head[:8]} ({head_how}), output to {opts.out}")

    # a. calibrate on HEAD's code
    with worktree(repo, head) as tree:
        calibration = calibrate(paired.load_checkout(tree, "head", head), opts, make_sampler)
    # b. planted commits
    plants = {t: planted_commit(repo, head, n, t) for t, n in calibration.chosen.items()}
    log("planted commits: " + ", ".join(f"{100 * t:g}% {sha[:8]}" for t, sha in plants.items())
        + f" ({time.monotonic() - start:.0f} s)")
    # c. sign-offs, in an order that keeps both kinds if the budget runs out
    runs = [Run(name, target, plants[target] if target is not None else head, index)
            for name, target, index in run_order(opts.aa_runs, opts.targets)]
    last = 0.0  # the previous run's seconds: the estimate of the next one's
    for i, run in enumerate(runs, 1):
        elapsed = time.monotonic() - start
        if last and elapsed + last * 1.1 > opts.budget:
            run.skipped = f"time budget: {elapsed:.0f} s used of {opts.budget:.0f}, a run takes ~{last:.0f} s"
            log(f"[run {i}/{len(runs)}] {run.name}: {run.skipped}")
            continue
        log(f"[run {i}/{len(runs)}] {run.name}: {head[:8]} vs {run.head[:8]}")
        try:
            run.result = paired.signoff_commits(
                repo, head, run.head, tier=opts.tier, sweeps=opts.sweep, variants=opts.variant,
                samples=opts.samples, machine=opts.machine, alpha=opts.alpha, min_effect=opts.min_effect,
                min_abs_seconds=opts.min_abs_seconds,
                device=opts.device, l2=opts.l2, make_sampler=make_sampler, environment=environment, log=log,
            )  # fmt: skip
        except Exception as exc:  # noqa: BLE001 - recorded in the matrix; the other runs go on
            traceback.print_exc()
            run.skipped = f"error: {type(exc).__name__}: {exc}".splitlines()[0][:200]
            continue
        last = run.result.seconds
        row = judge(run)
        log(f"[run {i}/{len(runs)}] {run.name}: exit {run.result.exit_code}, regressions touched {row['touched']}, "
            f"untouched {row['untouched']}: {row['verdict']} ({run.result.seconds:.0f} s; "
            f"{time.monotonic() - start:.0f} s so far)")
        gc.collect()
        write_outputs(opts.out, display_order(runs), calibration, opts, head, head_how, time.monotonic() - start)
    # d. final outputs (also when every run was cut)
    write_outputs(opts.out, display_order(runs), calibration, opts, head, head_how, time.monotonic() - start)
    text = (opts.out / "detection-matrix.md").read_text()
    log(text)
    return 0 if "**PASS**" in text else 1


if __name__ == "__main__":
    sys.exit(main())
