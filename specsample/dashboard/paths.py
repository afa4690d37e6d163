"""The releases page's path section: which vLLM release has which of the sampler's newer paths
(FLy, watermarking, masked-block skipping, the sharded draft-logits cache: docs/paths.md), and its
latency with each path off and on, from the releases tier's Paths sweeps. One table per sweep:
a row per subject (the releases in version order, then ours), a column per setting of the
sweep's path axes; a cell is the latency, with the acceptance and FLy deferral rates measured at
that point, or why there is none (the subject lacks the path: skipped; crashed; failed).

Reads the results frame only, like the rest of the dashboard.
"""

from __future__ import annotations

import math

import pandas as pd

from ..schema import PATH_AXES, PATH_DEFAULTS, subject_sort_key
from ..track import changepoints
from ..track.results import PARAM_COLUMNS

LATENCY_METRIC = "track_latency_us"  # one value per point, in µs
# The sweeps, in the order the page shows them, with what each turns on.
PATH_SWEEPS: tuple[tuple[str, str], ...] = (
    ("PathsFly", "FLy deferral"),
    ("PathsWatermark", "watermarking"),
    ("PathsMasked", "masked-vocabulary block skipping"),
    ("PathsCache", "the row-mapped draft-logits cache"),
)
AXIS_NAMES = {
    "fly_window_size": "window",
    "watermark": "watermark",
    "masked_vocab_fraction": "masked",
    "skip_masked_vocab_blocks": "skip",
    "draft_cache": "cache",
    "row_entropy": "entropy",
    "logits_shape": "logits",
}


def _value_text(value: object) -> str:
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def _setting_label(setting: dict) -> str:
    return ", ".join(f"{AXIS_NAMES.get(axis, axis)} {_value_text(value)}" for axis, value in setting.items())


def _rate(value: object) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return None if math.isnan(number) else number


def _cell(row: dict | None) -> dict:
    if row is None:
        return {"text": "", "rates": "", "title": "not measured", "status": "missing"}
    status = str(row.get("status") or "")
    reason = str(row.get("reason") or "")
    if status != "ok":
        return {
            "text": "—" if status == "skipped" else status,
            "rates": "",
            "title": reason or status,
            "status": status,
        }
    rates = []
    acceptance, deferral = _rate(row.get("acceptance_rate")), _rate(row.get("deferral_rate"))
    if acceptance is not None:
        rates.append(f"accept {acceptance:.2f}")
    if deferral is not None:
        rates.append(f"defer {deferral:.2f}")
    return {"text": f"{float(row['value']):.1f} µs", "rates": " · ".join(rates), "title": "", "status": "ok"}


def path_tables(rows: pd.DataFrame) -> list[dict]:
    """One table per Paths sweep of the releases tier in ``rows`` (:func:`.select.release_rows`):
    ``{"sweep", "what", "columns", "rows": [{"subject", "cells"}]}``; empty without such
    results."""
    if rows.empty or "sweep" not in rows:
        return []
    tables = []
    for sweep, what in PATH_SWEEPS:
        part = rows[(rows["sweep"] == sweep) & (rows["metric"] == LATENCY_METRIC)]
        if part.empty:
            continue
        varied = [a for a in PATH_AXES if a in part and part[a].astype(str).nunique() > 1]
        settings = (
            part[varied].drop_duplicates().sort_values(varied, kind="stable").to_dict("records") if varied else [{}]
        )
        settings.sort(key=lambda s: [s[a] != PATH_DEFAULTS[a] for a in varied])  # every path off first
        releases = changepoints.release_order(part["release"].dropna())
        ours = sorted(set(part.loc[part["release"].isna(), "subject"]), key=subject_sort_key)
        subjects = [f"vllm=={r}" for r in releases] + ours
        by_point = {
            (r["subject"], *(_value_text(r[a]) for a in varied)): r
            for r in part.sort_values("commit", kind="stable").to_dict("records")
        }
        table_rows = [
            {
                "subject": subject,
                "cells": [_cell(by_point.get((subject, *(_value_text(s[a]) for a in varied)))) for s in settings],
            }
            for subject in subjects
        ]
        held = [a for a in PARAM_COLUMNS if a != "subject" and a not in varied]
        tables.append(
            {
                "sweep": sweep,
                "what": what,
                "point": changepoints.point_label(part.iloc[0].to_dict(), held),
                "columns": [_setting_label(s) for s in settings],
                "rows": table_rows,
            }
        )
    return tables
