"""The pages' tables as template contexts: each builder takes the rows :mod:`.select` and
:mod:`specsample.track.changepoints` computed and returns the text the templates print (numbers
formatted, tones for the cells to colour, captions with this build's thresholds).

:mod:`.page` puts them into the pages: :func:`newest_context`, :func:`changes_table` and
:func:`environment_context` on ``index.html``; :func:`fastest_context`, :func:`drop_context`,
:func:`versus_context`, :func:`fidelity_context` and :func:`outcomes_context` on
``releases.html``; :func:`provenance_context` on both.
"""

from __future__ import annotations

import math

import pandas as pd

from ..schema import BASE_POINT, STATUSES, SYMBOLS, subject_sort_key
from ..tiers import REPLICATED_RELEASE
from ..track import changepoints
from ..track.results import ENV_COLUMNS, PARAM_COLUMNS
from ..track.signoff import format_value
from ..track.signoff.stats import TIME_UNITS
from . import select as sel
from .names import benchmark_label, metric_label
from .specs import (
    FIDELITY_SUBJECTS,
    FIDELITY_TOLERANCE,
    MAX_FAULT_ROWS,
    MAX_TABLE_ROWS,
    PLACEHOLDER_CHANGE,
    PLACEHOLDER_CHANGE_RELEASE,
    SHOWN_TABLE_ROWS,
    VERSUS_SUBJECTS,
)

CHANGES_CAPTION = (
    "Steps found by asv's own step detection (asv.step_detect) in every series, one machine, "
    "benchmark and point {over}, and still present at the {newest}; ranked by effect. "
    "Range: the last {unit} at the old level … the first at the new level; points: how many "
    "{unit}s each level spans. Interval: the change between every pair of one point of each "
    "level, each widened to its 99% CI where stored (—: one point a side and no CI). Noise: "
    "the series' relative sample IQR (— where none was stored); threshold: the larger of it "
    "and the noise floor ({floor}), the A/A noise of how the levels were measured. Nothing "
    "below the threshold is listed."
)
NEWEST_CAPTION = (
    "Each point at the newest commit against the newest earlier commit that measured it. "
    "Beyond the noise floor: a change larger than {floor} (or the series' sample IQR where "
    "larger), the A/A noise between separate asv runs on the H200 "
    "(specsample.track.changepoints)."
)


def _floor_text(dimension: str) -> str:
    relative = changepoints.NOISE_FLOOR[dimension]
    absolute = changepoints.MIN_ABS_SECONDS[dimension]
    return f"{relative:.0%} and {absolute * 1e6:g} µs of the point's latency"


def changes_caption(dimension: str) -> str:
    over, newest, unit = (
        ("over commits in date order", "newest commit", "commit")
        if dimension == "commits"
        else ("less the subject, over vLLM releases in version order", "newest release", "release")
    )
    return CHANGES_CAPTION.format(over=over, newest=newest, unit=unit, floor=_floor_text(dimension))


def changes_table(changes: pd.DataFrame, dimension: str, empty: str) -> dict:
    """A ranked table of ``changes``: the subjects an engineer changes in ``head`` (the first
    :data:`SHOWN_TABLE_ROWS`) and ``tail``; the reference subjects' changes apart, in
    ``references`` (:func:`.select.is_reference`), so they cannot crowd the top."""
    merged = sel.one_per_point(changes, ["direction", "before", "after"])
    apart = sel.is_reference(merged["subject"]) if "subject" in merged else pd.Series(False, index=merged.index)
    ours, references = merged[~apart.to_numpy()], merged[apart.to_numpy()]
    rows = _change_rows(ours.head(MAX_TABLE_ROWS), dimension)
    more = len(ours) - min(len(ours), MAX_TABLE_ROWS) + max(0, len(references) - MAX_TABLE_ROWS)
    count = (
        f"{len(changes)} changes in {len(merged)} points (a point's metrics that changed alike in one row)."
        if len(merged)
        else ""
    )
    subjects = (
        ", ".join(sorted(set(references["subject"].astype(str)), key=subject_sort_key)) if len(references) else ""
    )
    return {
        "head": rows[:SHOWN_TABLE_ROWS],
        "tail": rows[SHOWN_TABLE_ROWS:],
        "empty": empty,
        "ours_empty": "None in the subjects ranked here; only reference subjects changed."
        if references.shape[0]
        else "",
        "count": count,
        "references": _change_rows(references.head(MAX_TABLE_ROWS), dimension),
        "references_caption": f"{len(references)} points of reference subjects ({subjects}), ranked apart: "
        "peers and frozen code that no change here is meant to speed up."
        if len(references)
        else "",
        "more": f"{more} more not shown (specsample regressions --json lists all)." if more > 0 else "",
    }


def _change_rows(shown: pd.DataFrame, dimension: str) -> list[dict]:
    axes = [a for a in PARAM_COLUMNS if a != "subject"]
    rows = []
    for change in shown.to_dict("records"):
        before, after = str(change["before"]), str(change["after"])
        if dimension == "commits":
            before, after = before[:8], after[:8]
        call = f"; the call {_pct(change['call_change'])}" if change["shift"] else ""
        rows.append(
            {
                "direction": "shift" if change["shift"] else change["direction"],
                "change": _pct(change["change"]),
                "interval": _interval(change["change_lo"], change["change_hi"], change["change"]),
                "benchmark": change["benchmark"],
                "label": benchmark_label(change["benchmark"]),
                "subject": _text(change.get("subject")) or "vLLM releases",
                "point": changepoints.point_label(change, axes),
                "range": f"{before} … {after}" + (f"; {change['culprit']}" if change.get("culprit") else ""),
                "levels": f"{_value(change['value_before'], change['unit'])} → "
                f"{_value(change['value_after'], change['unit'])}{call}",
                "sizes": f"{change['n_before']} / {change['n_after']}",
                "noise": _pct(change["noise"], signed=False),
                "threshold": _pct(change["threshold"], signed=False),
                "also": ", ".join(metric_label(m) for m in change["also"]),
            }
        )
    return rows


def newest_context(points: pd.DataFrame) -> dict:
    summary = changepoints.newest_summary(points)
    caption = NEWEST_CAPTION.format(floor=_floor_text("commits"))
    if summary.empty:
        return {
            "summary": None,
            "caption": caption,
            "flagged": None,
            "more": "",
            "empty": "No series was measured at the newest commit and an earlier one.",
        }
    regressions = int(summary["regressions"].sum())
    improvements = int(summary["improvements"].sum())
    newest = ", ".join(sorted({str(c)[:8] for c in summary["newest"]}))
    headline = (
        f"{int(summary['points'].sum())} points in {len(summary)} benchmarks, each at the "
        f"newest commit that measured it ({newest}) against the one before: "
        f"{regressions} worse and {improvements} better beyond the noise floor."
    )
    rows = [
        {
            "benchmark": row["benchmark"],
            "label": benchmark_label(row["benchmark"]),
            "commits": f"{str(row['previous'])[:8]} → {str(row['newest'])[:8]}",
            "points": str(row["points"]),
            "geomean": _pct(row["geomean_change"]),
            "range": f"{_pct(row['min_change'])} … {_pct(row['max_change'])}",
            "regressions": str(int(row["regressions"])),
            "improvements": str(int(row["improvements"])),
        }
        for row in summary.to_dict("records")
    ]
    # stage shifts (changepoints' module docstring) are not flagged: the call did not change
    flagged = points[points["verdict"].isin(["regression", "improvement"])]
    # the subjects an engineer changes first, the reference subjects after them
    flagged = (
        flagged.assign(_size=flagged["effect"].abs(), _reference=sel.is_reference(flagged["subject"]).to_numpy())
        .sort_values(["_reference", "verdict", "_size"], ascending=[True, False, False], kind="stable")
        .drop(columns=["_size", "_reference"])
    )
    flagged = sel.one_per_point(flagged, ["verdict", "previous", "newest"])
    shown = flagged.head(MAX_TABLE_ROWS)
    axes = [a for a in PARAM_COLUMNS if a != "subject"]
    flagged_rows = [
        {
            "verdict": row["verdict"],
            "change": _pct(row["change"]),
            "interval": _interval(row["change_lo"], row["change_hi"], row["change"]),
            "benchmark": row["benchmark"],
            "label": benchmark_label(row["benchmark"]),
            "subject": _text(row.get("subject")),
            "point": changepoints.point_label(row, axes),
            "levels": f"{_value(row['value_previous'], row['unit'])} → {_value(row['value_newest'], row['unit'])}",
            "threshold": _pct(row["threshold"], signed=False),
            "also": ", ".join(metric_label(m) for m in row["also"]),
        }
        for row in shown.to_dict("records")
    ]
    more = len(flagged) - len(shown)
    table = {"head": flagged_rows[:SHOWN_TABLE_ROWS], "tail": flagged_rows[SHOWN_TABLE_ROWS:]}
    changed = [r for r in rows if r["regressions"] != "0" or r["improvements"] != "0"]
    quiet = [r for r in rows if r not in changed]
    return {
        "summary": {"changed": changed, "quiet": quiet},
        "headline": headline,
        "caption": caption,
        "flagged": table if flagged_rows else None,
        "tone": "bad" if regressions else "good",
        "empty": "",
        "more": f"{more} more not shown." if more > 0 else "",
    }


def environment_context(data: pd.DataFrame) -> dict:
    columns = ["commit", "date", "env", *ENV_COLUMNS]
    if data.empty:
        return {"rows": [], "columns": columns, "note": ""}
    runs = sel.environment_changes(data)
    rows = [
        [str(r["commit"])[:8], f"{r['date']:%Y-%m-%d %H:%M}", *(_text(r[c]) or "—" for c in columns[2:])]
        for r in runs.to_dict("records")
    ]
    note = "No <sha8>.gpuinfo recorded for these results." if data[list(ENV_COLUMNS)].isna().all().all() else ""
    return {"rows": rows, "columns": columns, "note": note}


def drop_context(rows: pd.DataFrame) -> dict:
    change = sel.placeholder_change(rows)
    table = sel.placeholder_ratio_change(change)
    before, after = sel.placeholder_releases(rows) if not rows.empty else (None, None)
    if table.empty:
        missing = [
            r
            for r, got in (
                (f"the release before {PLACEHOLDER_CHANGE_RELEASE}", before),
                (PLACEHOLDER_CHANGE_RELEASE, after),
            )
            if got is None
        ]
        why = (
            f"not measured: {', '.join(missing)}"
            if missing
            else "the Density sweep was not measured at phi=0 and phi=1 for both"
        )
        return {"rows": [], "empty": f"No placeholder change to show ({why})."}
    key = ["mode", "draft", "placeholder_pattern"]
    densities = sorted(change["placeholder_density"].unique())
    by_point = change.set_index([*key, "placeholder_density"])
    out = []
    for row in table.to_dict("records"):
        cells = []
        for phi in densities:
            point = (row["mode"], row["draft"], row["placeholder_pattern"], phi)
            if point not in by_point.index:
                cells.append({"text": "—", "tone": ""})  # not measured on both sides (a fault)
                continue
            ratio, beyond = by_point.loc[point, "ratio"], bool(by_point.loc[point, "beyond_noise"])
            tone = ("improvement" if ratio < 1 else "regression") if beyond else ""
            cells.append({"text": _pct(ratio - 1), "tone": tone})
        out.append(
            {
                "mode": row["mode"],
                "draft": row["draft"],
                "pattern": row["placeholder_pattern"],
                "cells": cells,
                "ratio_before": _ratio_text(row["phi1_over_phi0_before"]),
                "ratio_after": _ratio_text(row["phi1_over_phi0_after"]),
            }
        )
    caption = (
        f"Latency change from vLLM {before} (the newest release measured before "
        f"{after}) to {after} at the base point, per placeholder density phi; "
        f"{PLACEHOLDER_CHANGE} is about placeholder-heavy batches, so phi=0 is the "
        f"control. Coloured: beyond the releases' noise floor ({_floor_text('releases')}); "
        f"—: not measured on both sides (a release crashed there, see Faults and semantics)."
    )
    heavy = change[change["beyond_noise"] & (change["ratio"] < 1)]
    largest = ""
    if not heavy.empty:
        top = heavy.loc[heavy["ratio"].idxmin()]
        largest = (
            f"Largest drop measured here: {_pct(top['ratio'] - 1)} ({top['mode']} mode, draft="
            f"{top['draft']}, {top['placeholder_pattern']} placeholders, phi={top['placeholder_density']:g})."
        )
    return {
        "rows": out,
        "largest": largest,
        "densities": [f"{phi:g}" for phi in densities],
        "before": before,
        "after": after,
        "caption": caption,
        "empty": "",
    }


def fastest_context(rows: pd.DataFrame) -> dict:
    """Which vLLM release is fastest, per mode, at the base point."""
    table = sel.fastest_releases(rows)
    if table.empty:
        return {"rows": [], "empty": "No release timed at the base point."}
    out, lines = [], []
    for r in table.to_dict("records"):
        faulted = f" ({r['faulted']} more crashed or failed there)" if r["faulted"] else ""
        if not r["release"]:
            out.append({"mode": r["mode"], "release": "—", "latency": "—", "ties": "", "next": "", "timed": "none"})
            lines.append(f"{r['mode']}: no release timed{faulted}")
            continue
        release = f"vllm=={r['release']}"
        ties = f"{len(r['ties'])}: {', '.join(r['ties'])}" if r["ties"] else "none"
        following = f"vllm=={r['next']}, {_pct(r['next_ratio'] - 1)}" if r["next"] else "—"
        latency = _value(r["latency"], "seconds")
        out.append(
            {
                "mode": r["mode"],
                "release": release,
                "latency": latency,
                "ties": ties,
                "next": following,
                "timed": f"{r['timed']}{faulted}",
            }
        )
        tied = f", tied with {len(r['ties'])} more" if r["ties"] else ""
        lines.append(f"{r['mode']}: {release}, {latency}{tied}")
    point = ", ".join(f"{SYMBOLS.get(k, k)}={v}" for k, v in BASE_POINT.items() if k != "mode")
    caption = (
        f"Per mode, the vLLM release with the lowest latency at the base point ({point}): the "
        f"median over the sweeps that hold it, the releases of a sweep measured in one run. Tied: the releases within the releases' noise floor "
        f"({_floor_text('releases')}) of it, which this run cannot tell apart from it; next: "
        f"the fastest release beyond that floor, and how much slower it is. —: no release timed "
        f"there (not in the releases tier, or every release crashed)."
    )
    return {"rows": out, "caption": caption, "summary": "; ".join(lines) + ".", "empty": ""}


def _ratio_text(value) -> str:
    return "—" if value != value else f"{value:.3f}"


def versus_context(rows: pd.DataFrame) -> dict:
    table = sel.newest_release_vs_ours(rows, VERSUS_SUBJECTS) if not rows.empty else pd.DataFrame()
    if table.empty:
        return {"rows": [], "empty": "No release measured beside mrv2 or fast."}
    subjects = [c.removeprefix("ratio_") for c in table.columns if c.startswith("ratio_")]
    out = [
        {
            "sweep": r["sweep"],
            "mode": r["mode"],
            "draft": r["draft"],
            "points": r["points"],
            "cells": [
                {"ratio": f"{r[f'ratio_{s}']:.3f}", "range": f"{r[f'min_{s}']:.3f} … {r[f'max_{s}']:.3f}"}
                for s in subjects
            ],
        }
        for r in table.to_dict("records")
    ]
    release = table["release"].iloc[0]
    caption = (
        f"Latency of vLLM {release} over ours at the same points, measured in the same "
        f"run (above 1: the release is slower), geomean and range over each sweep's "
        f"points."
    )
    return {"rows": out, "subjects": subjects, "release": f"vllm=={release}", "caption": caption, "empty": ""}


def fidelity_context(table: pd.DataFrame) -> dict:
    if table.empty:
        return {"rows": [], "empty": f"{REPLICATED_RELEASE} was not measured beside {' or '.join(FIDELITY_SUBJECTS)}."}
    rows = []
    for r in table.to_dict("records"):
        within = r["within"] == r["points"]
        rows.append(
            {
                "cells": [
                    r["tier"],
                    r["sweep"],
                    r["subject"],
                    r["commit"][:8],
                    r["points"],
                    f"{r['geomean']:.3f}",
                    f"{r['min']:.3f} … {r['max']:.3f}",
                    {"text": f"{r['within']} of {r['points']}", "tone": "" if within else "regression"},
                    r["worst"],
                ],
                "tone": "",
            }
        )
    caption = (
        f"Latency of ours over {REPLICATED_RELEASE} (the newest release whose draws mrv2 "
        f"reproduces), point by point, measured in the same run, at each tier's newest commit "
        f"that measured it. Aim: within {FIDELITY_TOLERANCE:.0%} at every point. mrv2 maps NaN "
        f"logits to -inf on load (its one deliberate difference) and runs its stats kernels at 8 warps "
        f"(vLLM's: 4); mrv2-vllm does neither."
    )
    columns = [
        "tier",
        "sweep",
        "subject",
        "commit",
        "points",
        "geomean",
        "range",
        f"within {FIDELITY_TOLERANCE:.0%}",
        "furthest",
    ]
    return {"rows": rows, "columns": columns, "caption": caption, "empty": ""}


def outcomes_context(rows: pd.DataFrame) -> dict:
    table = sel.release_outcomes(rows) if not rows.empty else pd.DataFrame()
    if table.empty:
        return {"rows": [], "empty": "No release points."}
    columns = ["release", "points", *STATUSES, *sel.OUTCOME_SEMANTICS]
    out = []
    for row in table.to_dict("records"):
        bad = row["crashed"] + row["failed"] + row["violates placeholder semantics"]
        out.append({"cells": [row[c] for c in columns], "tone": "flagged" if bad else ""})
    faults = sel.release_faults(rows)
    shown = faults.head(MAX_FAULT_ROWS)
    fault_rows = [{k: _text(v) or "—" for k, v in r.items()} for r in shown.to_dict("records")]
    more = len(faults) - len(shown)
    caption = (
        "Per release: the latency points measured, their status (crashed: the "
        "subject's worker process died, a fault or a hang; a fresh worker went on) and "
        "what its outputs were against mrv2's on the same inputs (specsample.semantics): "
        "the same draws, the same placeholder semantics with other random draws, or "
        "violating them."
    )
    return {
        "rows": out,
        "columns": columns,
        "faults": fault_rows,
        "caption": caption,
        "empty": "",
        "more": f"{more} more not shown." if more > 0 else "",
    }


def provenance_context(provenance: dict, machine, commits: list[str]) -> list[dict]:
    """One row per subject: its newest record among ``commits`` (oldest first), with that
    commit's sha8 (a subject not measured at the newest commit keeps its last record: the
    FlashInfer version of the last Peers sweep, say)."""
    newest: dict[str, tuple[str, dict]] = {}
    for commit in reversed(commits):
        for name, record in (provenance.get((str(machine), commit[:8])) or {}).items():
            newest.setdefault(name, (commit[:8], record or {}))
    rows = []
    for name in sorted(newest, key=subject_sort_key):
        commit, record = newest[name]
        files = record.get("files") or {}
        rows.append(
            {
                "subject": name,
                "commit": commit,
                "kind": _text(record.get("kind")) or "—",
                "version": _text(
                    record.get("release")
                    or record.get("commit")
                    or record.get("ref")
                    or record.get("module")
                    or " ".join(str(record[k]) for k in ("package", "version") if record.get(k))
                )
                or "—",
                "wheel": " ".join(p for p in (_text(record.get("wheel")), _short_hash(record.get("wheel_sha256"))) if p)
                or "—",
                "files": [(path, _short_hash(digest)) for path, digest in sorted(files.items())]
                if isinstance(files, dict)
                else [],
            }
        )
    return rows


# ---------------------------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------------------------


def _pct(value, signed: bool = True) -> str:
    """A fraction as a percentage: ``+8.1%``, ``−4.9%`` (a true minus); "—" when missing."""
    if value is None or value is pd.NA or not math.isfinite(float(value)):
        return "—"
    value = 100 * float(value)
    text = f"{value:+.1f}%" if signed else f"{value:.1f}%"
    return "0.0%" if text in ("+0.0%", "-0.0%") else text.replace("-", "−")


def _interval(lo, hi, change) -> str:
    """``[lo, hi]``, or "—" where it collapses onto the change (one unreplicated point a side)."""
    if not (math.isfinite(float(lo)) and math.isfinite(float(hi))) or abs(float(hi) - float(lo)) < 1e-12:
        return "—"
    return f"[{_pct(lo)}, {_pct(hi)}]"


# Units shown compactly; times are scaled by sign-off's format_value (ns, µs, ms, s).
_UNIT_FORMATS = {"ratio": "{:.3f}×", "fraction of copy bandwidth": "{:.3f}"}


def _value(value, unit) -> str:
    if value is None or not math.isfinite(float(value)):
        return "n/a"
    if unit in TIME_UNITS:
        return format_value(float(value) * TIME_UNITS[unit], "seconds")
    if unit in _UNIT_FORMATS:
        return _UNIT_FORMATS[unit].format(float(value))
    return format_value(float(value), unit)


def _text(value) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return ""
    return str(value)


def _short_hash(digest) -> str:
    text = _text(digest)
    return text[:12] if text else ""
