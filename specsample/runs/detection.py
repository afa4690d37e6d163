"""Steps c and d of the sign-off's validation (:mod:`.validate`), judged: the detection matrix.

A paired run (:class:`Run`) is one sign-off, A/A or a plant; a separate-process comparison
(:class:`Separate`) pairs the sides of two runs as two asv runs would measure them. Each is
judged against the points a plant touches (:func:`.plants.touched`): :func:`judge` and
:func:`judge_separate` give its row of the matrix, :func:`overall` the verdict, and
:func:`write_outputs` writes the matrix, the reports, the frames, the verdicts and the
calibration.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import math
from pathlib import Path

import pandas as pd

from ..track.signoff import report, stats
from . import paired
from .calibration import Calibration
from .plants import PLANTED_SUBJECTS, REQUIRED_FROM, Options, touched


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


def display_order(runs: list[Run]) -> list[Run]:
    """A/A 1..n, then the plants by size."""
    return sorted(runs, key=lambda r: (r.target is not None, r.target or 0, r.index))
