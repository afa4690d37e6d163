"""The bisection's report: ``bisect.json`` (everything) and ``bisect.md`` (each step's figures).

:func:`exit_code`: 0 found (one culprit, or a range of skipped commits that holds it), 1 not
reproducible; errors (exit 2) never reach a report.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict
from pathlib import Path

from .search import AMBIGUOUS, FOUND, BisectResult, Probe


def exit_code(result: BisectResult) -> int:
    return 0 if result.status in (FOUND, AMBIGUOUS) else 1


def _clean(value):
    """JSON-safe: NaN becomes None, recursively."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def to_json(result: BisectResult, context: dict) -> dict:
    """Everything about the bisection; ``context`` says what was bisected and how."""
    return _clean(
        {
            **context,
            "status": result.status,
            "direction": result.direction,
            "culprit": result.culprit,
            "last_good": result.last_good,
            "candidates": result.candidates,
            "why": result.why,
            "commits": result.commits,
            "measurements": result.measurements,
            "steps_count": len(result.steps),
            "device_seconds": result.seconds,
            "skipped": [{"commit": c, "reason": r} for c, r in result.skipped],
            "reproduction": [asdict(p) for p in result.reproduction],
            "steps": [
                {
                    "commit": s.commit,
                    "index": s.index,
                    "decision": s.decision,
                    "why": s.why,
                    "range_before": list(s.range_before),
                    "probes": [asdict(p) for p in s.probes],
                }
                for s in result.steps
            ],
        }
    )


def headline(result: BisectResult, label=lambda sha: sha[:10]) -> str:
    """One line: the culprit, the candidates, or why there is none."""
    if result.status == FOUND:
        return (
            f"culprit: {label(result.culprit)} (first commit {result.direction}; last good {label(result.last_good)}; "
            f"{len(result.steps)} steps, {result.measurements} measurements, {result.seconds:.0f} s)"
        )
    if result.status == AMBIGUOUS:
        return (
            f"culprit: one of {', '.join(label(c) for c in result.candidates)} ({result.why}; "
            f"last good {label(result.last_good)}; {len(result.steps)} steps, {result.seconds:.0f} s)"
        )
    return f"not reproducible: {result.why}"


def _comparison(probe: Probe, end: str) -> str:
    c = probe.vs_good if end == "good" else probe.vs_bad
    if c is None:
        return "—"
    return f"{c.verdict} {100 * (c.ratio - 1):+.2f}%"


def _median(probe: Probe, label: str) -> str:
    side = probe.figures.get(label) or {}
    if "median_us" not in side:
        return side.get("status", "—")
    throttled = f", {side['n_throttled']} throttled" if side.get("n_throttled") else ""
    return f"{side['median_us']:.2f} µs (n={side['n_samples']}{throttled})"


def to_markdown(result: BisectResult, context: dict, label=lambda sha: sha[:10]) -> str:
    lines = [
        "## specsample bisect",
        "",
        f"**{headline(result, label)}**",
        "",
        f"Subject `{context.get('subject')}` at {context.get('point_label', context.get('point'))}; "
        f"{len(result.commits)} commits from GOOD `{label(result.commits[0])}` to BAD `{label(result.commits[-1])}`"
        + (f" in `{context['repo']}`" if context.get("repo") else "")
        + ".",
        "",
        "Each measurement times GOOD, the commit and BAD in one worker process, samples interleaved; "
        "the commit is judged against each end with sign-off's four-way verdict.",
        "",
        "| step | commit | effort | GOOD | commit | BAD | vs GOOD | vs BAD | decision | s |",
        "|---:|---|---:|---:|---:|---:|---|---|---|---:|",
    ]
    for probe in result.reproduction:
        lines.append(
            f"| repro | `{label(probe.commit)}` (BAD) | {probe.effort} | {_median(probe, 'good')} | "
            f"{_median(probe, 'mid')} | {_median(probe, 'bad')} | {_comparison(probe, 'good')} | "
            f"{_comparison(probe, 'bad')} | {result.direction or '—'} | {probe.seconds:.0f} |"
        )
    for n, step in enumerate(result.steps, 1):
        for probe in step.probes:
            last = probe is step.probes[-1]
            decision = (step.decision + (f": {step.why}" if step.decision == "skip" else "")) if last else "more"
            lines.append(
                f"| {n} | `{label(step.commit)}` | {probe.effort} | {_median(probe, 'good')} | "
                f"{_median(probe, 'mid')} | {_median(probe, 'bad')} | {_comparison(probe, 'good')} | "
                f"{_comparison(probe, 'bad')} | {decision} | {probe.seconds:.0f} |"
            )
    if result.skipped:
        lines += ["", "Skipped (did not load or crashed):", ""]
        lines += [f"- `{label(c)}`: {r}" for c, r in result.skipped]
    lines += ["", f"Device time: {result.seconds:.0f} s over {result.measurements} measurements."]
    return "\n".join(lines) + "\n"


def write(result: BisectResult, context: dict, out: Path, label=lambda sha: sha[:10]) -> tuple[Path, Path]:
    out.mkdir(parents=True, exist_ok=True)
    js, md = out / "bisect.json", out / "bisect.md"
    js.write_text(json.dumps(to_json(result, context), indent=1, default=str) + "\n")
    md.write_text(to_markdown(result, context, label))
    return js, md
