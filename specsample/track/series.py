"""The series change points are found in: the constants that name and bound them, each
series' points, the steps asv finds in them and the changes kept, as typed frames.
:mod:`.changepoints` is the public API over them (frame in, frame out)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from asv.step_detect import detect_regressions, detect_steps

from ..schema import AXES, BANDWIDTH_METRIC, PATH_AXES, RATIO_METRIC, release_key, release_version
from .results import commit_order
from .signoff.stats import (
    ASV_MIN_EFFECT,
    HIGHER_IS_BETTER,
    PAIRED_MIN_ABS_SECONDS,
    PAIRED_MIN_EFFECT,
    TIME_UNITS,
)
from .signoff.verdict import relative_iqr

DIMENSIONS = ("commits", "releases")
DIRECTIONS = ("regression", "improvement")
VERDICTS = ("regression", "improvement", "shift", "unchanged")
# Metrics that are not series of their own (module docstring).
DERIVED_METRICS = (RATIO_METRIC, BANDWIDTH_METRIC)

# Between separate asv runs the smallest points of unchanged code moved by up to 0.8 us
# (module docstring: mrv2 and mrv2-pre50939 from b340c9d to c1b5b1c on the H200).
SEPARATE_RUNS_MIN_ABS_SECONDS = 1.0e-6
# The relative noise floor and the absolute one in time (seconds, a fraction of the point's
# latency), per dimension (module docstring).
NOISE_FLOOR: dict[str, float] = {"commits": ASV_MIN_EFFECT, "releases": PAIRED_MIN_EFFECT}
MIN_ABS_SECONDS: dict[str, float] = {
    "commits": SEPARATE_RUNS_MIN_ABS_SECONDS,
    "releases": PAIRED_MIN_ABS_SECONDS,
}
# Metrics that time a point: their value (in their unit) is the point's latency.
LATENCY_METRICS = ("time_sample", "track_latency_us")

# How the report and the dashboard introduce the shifts (module docstring).
SHIFTS_TEXT = (
    "(a stage slower or faster while its call did not change beyond the threshold: work moved "
    "between kernels, or a change the next kernel's overlap hides; not counted)"
)
# Axes written by value alone in point labels (their values name them).
_NAMED_BY_VALUE = ("subject", "mode", "draft", "placeholder_pattern", "stage")
# What describes a series besides its point axes (one value per series).
_DESCRIPTION = ("module", "tier", "sweep", "metric", "unit")

# Columns of detect()'s frame after the series' key columns; positions count points of the
# series (commits of the machine in date order, or releases in version order).
CHANGE_COLUMNS: dict[str, str] = {
    "id": "str",  # stable id (change_id): what `specsample bisect --change ID` names
    "dimension": "str",  # "commits" | "releases"
    "direction": "str",  # "regression" | "improvement"
    "before": "str",  # last commit hash (or release "0.27.1") at the old level
    "after": "str",  # first commit hash (or release) at the new level
    "before_position": "Int64",
    "after_position": "Int64",
    "n_before": "Int64",  # points at the old level
    "n_after": "Int64",  # points at the new level (the one kept, not any passed on the way)
    "value_before": "float64",  # the levels (asv's segment values), in the metric's unit
    "value_after": "float64",
    "change": "float64",  # value_after / value_before - 1
    "change_lo": "float64",  # the interval of change (module docstring)
    "change_hi": "float64",
    "effect": "float64",  # |change| in the direction's sense, > threshold; ranks the changes
    "noise": "float64",  # the series' relative IQR; NaN where no quartiles were stored
    "threshold": "float64",  # the smallest effect that would have been reported
    "measured_at": "str",  # releases: the commit the releases were measured at
    "call_change": "float64",  # a stage series: its point's call latency, before -> after
    "shift": "boolean",  # a stage's step its point's call does not show (docstring)
}

# Columns of newest_vs_previous()'s frame after the key columns.
NEWEST_COLUMNS: dict[str, str] = {
    "previous": "str",
    "newest": "str",
    "value_previous": "float64",
    "value_newest": "float64",
    "change": "float64",
    "change_lo": "float64",
    "change_hi": "float64",
    "effect": "float64",  # how much worse, as a fraction (< 0: better; change for lower-is-better)
    "noise": "float64",
    "threshold": "float64",
    "call_change": "float64",  # a stage series: its point's call latency, previous -> newest
    "verdict": "str",  # "regression" | "improvement" | "shift" | "unchanged"
    # The four-way verdict (as sign-off's): "slower" | "faster" beyond the threshold; "same" when
    # the change's whole interval lies within ±threshold; "inconclusive" otherwise.
    "four_way": "str",
}


def lower_is_better(metric: object) -> bool:
    return metric not in HIGHER_IS_BETTER


def series_key(frame: pd.DataFrame, dimension: str = "commits") -> list[str]:
    """The columns that name one series: machine, benchmark, every point axis in the frame
    (less ``subject`` over releases, where the subject is the x axis) and every path axis in it
    (a path on and off are two series)."""
    _check_dimension(dimension)
    axes = [a for a in AXES if a in frame and not (dimension == "releases" and a == "subject")]
    return ["machine", "benchmark", *axes, *(a for a in PATH_AXES if a in frame)]


def release_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """Rows of vLLM release subjects (``vllm==X.Y.Z``) with ``release`` (``"0.27.1"``) added,
    per machine and benchmark at the newest commit that measured any release in it (the
    releases tier measures them all in one run; the nightly tier only the newest); empty when
    there are none."""
    if frame.empty or "subject" not in frame:
        return frame.iloc[0:0].assign(release=pd.Series(dtype="str"))
    releases = frame["subject"].map(release_version)
    rows = frame[releases.notna()].assign(release=releases[releases.notna()].astype("str"))
    if rows.empty:
        return rows
    newest = rows.sort_values("date", kind="stable").groupby(["machine", "benchmark"])["commit"].last()
    at = pd.MultiIndex.from_frame(rows[["machine", "benchmark"]]).map(newest)
    return rows[rows["commit"].to_numpy() == np.asarray(at, dtype=object)].reset_index(drop=True)


def release_order(releases) -> list[str]:
    """Distinct releases (``"0.27.1"``) in version order."""
    return sorted(set(releases), key=release_key)


# ---------------------------------------------------------------------------------------------
# Series
# ---------------------------------------------------------------------------------------------


def _check_dimension(dimension: str) -> None:
    if dimension not in DIMENSIONS:
        raise ValueError(f"dimension: expected one of {', '.join(DIMENSIONS)}, got {dimension!r}")


def _series_points(frame: pd.DataFrame, dimension: str) -> pd.DataFrame:
    """The successful points of every series with ``position`` (x order), ``label`` (commit
    hash or release), ``lo``/``hi`` (the 99% CI where stored, else the value), ``weight`` (asv
    publish's: 2 / CI width), ``noise`` and ``threshold`` (per series); one row per series and
    position (duplicates, e.g. two environments, averaged as asv publish does), sorted."""
    _check_dimension(dimension)
    if frame.empty:
        return pd.DataFrame()
    ok = frame[(frame["status"] == "ok") & (frame["value"] > 0) & ~frame["metric"].isin(DERIVED_METRICS)]
    if dimension == "commits":
        order = commit_order(ok)
        ok = ok.merge(order[["machine", "commit", "position"]], on=["machine", "commit"])
        ok = ok.assign(label=ok["commit"], measured_at=pd.Series(np.nan, index=ok.index, dtype="str"))
    else:
        ok = release_rows(ok)
        rank = {r: i for i, r in enumerate(release_order(ok["release"]))}
        ok = ok.assign(position=ok["release"].map(rank).astype("Int64"), label=ok["release"], measured_at=ok["commit"])
    if ok.empty:
        return pd.DataFrame()
    key = series_key(frame, dimension)
    value = ok["value"].astype("float64")
    ci_lo, ci_hi = ok["ci_lo"].astype("float64"), ok["ci_hi"].astype("float64")
    has_ci = np.isfinite(ci_lo) & np.isfinite(ci_hi) & (ci_lo > 0) & (ci_hi >= ci_lo)
    ok = ok.assign(
        value=value,
        lo=np.where(has_ci, np.minimum(ci_lo, value), value),
        hi=np.where(has_ci, np.maximum(ci_hi, value), value),
        weight=np.where(has_ci & (ci_hi > ci_lo), 2 / (ci_hi - ci_lo), np.nan),
        _iqr=relative_iqr(ok).to_numpy(),
        _seconds=_seconds(ok),
    )
    columns = [*key, "position"]
    agg = {
        "value": "mean",
        "lo": "min",
        "hi": "max",
        "weight": "mean",
        "_iqr": "mean",
        "_seconds": "mean",
        "label": "first",
        "measured_at": "first",
        **{c: "first" for c in _DESCRIPTION},
    }
    points = ok.groupby(columns, sort=True, dropna=False).agg(agg).reset_index()
    grouped = points.groupby(key, sort=False, dropna=False)
    points["noise"] = grouped["_iqr"].transform("median")
    latency = grouped["_seconds"].transform("median").to_numpy(dtype="float64")
    floor = np.fmax(NOISE_FLOOR[dimension], MIN_ABS_SECONDS[dimension] / latency)  # NaN: none
    points["threshold"] = np.fmax(floor, points["noise"].to_numpy(dtype="float64"))
    return points.drop(columns=["_iqr", "_seconds"])


def _stage_shifts(
    rows: pd.DataFrame, direction, points: pd.DataFrame, key: list[str], dimension: str, before, after
) -> tuple[np.ndarray, np.ndarray]:
    """For each row (a change, or a newest-vs-previous comparison; ``direction`` per row,
    "regression" or "improvement") of a stage series: the relative change of its call from
    position ``before`` to ``after`` (:func:`_call_seconds`: the call's latency where a sweep
    timed it at both positions, else the point's stages together at both; NaN for other
    series, or where neither is known at both), and whether the row is a shift (module
    docstring): the call did not change beyond the noise floor in the row's direction."""
    is_stage = rows["stage"].notna().to_numpy() if "stage" in rows else np.zeros(len(rows), dtype=bool)
    if not is_stage.any():
        return np.full(len(rows), np.nan), is_stage
    calls, sums, point = _call_seconds(points, key)
    ask = rows[point].reset_index(drop=True)

    def at(table: pd.DataFrame, positions) -> np.ndarray:
        found = ask.assign(position=np.asarray(positions)).merge(table, how="left", on=[*point, "position"])
        return found["_s"].to_numpy(dtype="float64")

    call_before, call_after = at(calls, before), at(calls, after)
    timed = np.isfinite(call_before) & np.isfinite(call_after)  # never a call against a sum
    before_s = np.where(timed, call_before, at(sums, before))
    after_s = np.where(timed, call_after, at(sums, after))
    change = np.where(is_stage, after_s / before_s - 1, np.nan)
    threshold = np.fmax(NOISE_FLOOR[dimension], MIN_ABS_SECONDS[dimension] / before_s)
    worse = _effect(change, True, "regression")
    effect = np.where(np.asarray(direction) == "regression", worse, -worse)
    with np.errstate(invalid="ignore"):
        shift = is_stage & np.isfinite(effect) & ~(effect > threshold)
    return change, shift


def _call_seconds(points: pd.DataFrame, key: list[str]) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """Per point and position (in seconds, column ``_s``): the call's latency, the median of
    its latency metrics over every sweep that timed the call there (the base point is in
    several); the sum of its stage times (each stage timed on its own, so the sum does not see
    their overlap); and the columns that name a point."""
    point = [k for k in key if k not in ("benchmark", "stage")]
    frame = points[point].assign(position=points["position"], _s=_seconds(points))
    staged = points["stage"].notna() if "stage" in points else pd.Series(False, index=points.index)
    timed = points["metric"].isin(LATENCY_METRICS) & ~staged
    by = [*point, "position"]
    calls = frame[timed.to_numpy()].groupby(by, dropna=False, sort=False)["_s"].median().reset_index()
    sums = frame[staged.to_numpy()].groupby(by, dropna=False, sort=False)["_s"].sum().reset_index()
    return calls, sums, point


def _seconds(rows: pd.DataFrame) -> np.ndarray:
    """Each row's value in seconds (every series' metric is a time: :data:`DERIVED_METRICS`
    are not series); NaN for a unit that is not a time."""
    return rows["value"].to_numpy(dtype="float64") * rows["unit"].map(TIME_UNITS).to_numpy(dtype="float64")


def _candidate_series(points: pd.DataFrame, key: list[str]):
    """(key, series) of every series that could hold a change: two or more points whose
    largest and smallest differ by more than the threshold (a change between two levels, each
    a median of its points, cannot be larger than that)."""
    grouped = points.groupby(key, sort=False, dropna=False)
    spread = grouped["value"].transform("max") / grouped["value"].transform("min") - 1
    size = grouped["value"].transform("size")
    keep = (size >= 2) & (spread > points["threshold"])
    if not keep.any():
        return iter(())
    return points[keep.to_numpy()].groupby(key, sort=False, dropna=False)


# ---------------------------------------------------------------------------------------------
# One series
# ---------------------------------------------------------------------------------------------


def _changes_of(series: pd.DataFrame, key: list[str], dimension: str) -> list[dict]:
    """The changes of one series (rows sorted by position, one per position)."""
    y = series["value"].to_numpy(dtype="float64")
    weights = series["weight"].to_numpy(dtype="float64")
    w = None if np.isnan(weights).all() else [None if math.isnan(v) else float(v) for v in weights]
    steps = detect_steps(y.tolist(), w)
    if len(steps) < 2:
        return []
    threshold = float(series["threshold"].iloc[0])
    lower = lower_is_better(series["metric"].iloc[0])
    # Upward steps of ``worse`` are regressions, upward steps of its reciprocal improvements.
    found = []
    for direction, flip in (("regression", not lower), ("improvement", lower)):
        oriented = [_reciprocal(s) for s in steps] if flip else steps
        _, _, jumps = detect_regressions(oriented, threshold=threshold)
        found.append((direction, jumps or []))
    first = series.iloc[0]
    base = {c: first[c] for c in (*key, *_DESCRIPTION)}
    rows = []
    for direction, jumps in found:
        for i, (before_pos, after_pos, *_rest) in enumerate(jumps):
            # asv reports a jump where the level left ``before``, and the level the series
            # then kept until the next jump (or the newest point) is what is still present;
            # the series may have got there through other levels. The change is that kept
            # level against ``before``; it started at the first level beyond the threshold.
            region_end = jumps[i + 1][0] if i + 1 < len(jumps) else len(y) - 1
            old = steps[_segment_at(steps, before_pos)]
            region = steps[_segment_at(steps, after_pos) : _segment_at(steps, region_end) + 1]
            kept = region[-1]
            if not _beyond(old, kept, direction, lower, threshold):
                continue
            start = next(seg for seg in region if _beyond(old, seg, direction, lower, threshold))
            row = _change_row(series, old, start, kept, direction, lower, threshold)
            rows.append({**base, **row, "dimension": dimension})
    return rows


def _effect(change, lower, direction: str):
    """How much worse (``direction="regression"``) or better a relative change of the value
    is, as a positive fraction of the old value: ``+0.08`` is 8% slower (or 8% less
    bandwidth), ``-0.08`` 8% faster; the same threshold applies both ways."""
    worse = np.where(lower, change, -np.asarray(change))
    return worse if direction == "regression" else -worse


def _reciprocal(step: tuple) -> tuple:
    """A detect_steps segment of y as one of 1 / y: the level inverted, its mean absolute
    deviation scaled to first order (|d(1/y)| = |dy| / y^2)."""
    left, right, value, _minimum, err = step
    return (left, right, 1.0 / value, 1.0 / value, err / value**2)


def _segment_at(steps: list[tuple], position: int) -> int:
    return next(i for i, (left, right, *_) in enumerate(steps) if left <= position < right)


def _beyond(old: tuple, new: tuple, direction: str, lower: bool, threshold: float) -> bool:
    """Is the level of segment ``new`` beyond ``threshold`` from ``old``'s, in ``direction``?"""
    return float(_effect(new[2] / old[2] - 1, lower, direction)) > threshold


def _change_row(series, old: tuple, start: tuple, kept: tuple, direction: str, lower: bool, threshold: float) -> dict:
    """The change from segment ``old`` to the level of segment ``kept``, which the series
    first left ``old``'s level for at segment ``start``."""
    before, after = float(old[2]), float(kept[2])
    lo, hi = series["lo"].to_numpy(), series["hi"].to_numpy()
    old_rows, new_rows = slice(old[0], old[1]), slice(kept[0], kept[1])
    labels, positions = series["label"].to_numpy(), series["position"].to_numpy()
    return {
        "direction": direction,
        "before": labels[old[1] - 1],
        "after": labels[start[0]],
        "before_position": positions[old[1] - 1],
        "after_position": positions[start[0]],
        "n_before": old[1] - old[0],
        "n_after": kept[1] - kept[0],
        "value_before": before,
        "value_after": after,
        "change": after / before - 1,
        "change_lo": lo[new_rows].min() / hi[old_rows].max() - 1,
        "change_hi": hi[new_rows].max() / lo[old_rows].min() - 1,
        "effect": float(_effect(after / before - 1, lower, direction)),
        "noise": series["noise"].iloc[0],
        "threshold": threshold,
        "measured_at": series["measured_at"].iloc[0],
    }


# ---------------------------------------------------------------------------------------------
# Frames
# ---------------------------------------------------------------------------------------------


def _typed(rows: pd.DataFrame, frame: pd.DataFrame, key: list[str], columns: dict) -> pd.DataFrame:
    """``rows`` with the key and description columns in the results frame's dtypes, then
    ``columns`` in theirs, in that order."""
    out = pd.DataFrame(index=rows.index)
    for column in (*key, *_DESCRIPTION):
        source = rows[column] if column in rows else pd.Series([None] * len(rows), index=rows.index)
        dtype = frame[column].dtype if column in frame else "str"
        out[column] = source.astype(dtype) if len(rows) else pd.Series(dtype=dtype)
    for column, dtype in columns.items():
        source = rows[column] if column in rows else pd.Series([None] * len(rows), index=rows.index)
        if dtype == "str":
            source = source.map(lambda v: None if v is None or (isinstance(v, float) and math.isnan(v)) else str(v))
        out[column] = source.astype(dtype) if len(rows) else pd.Series(dtype=dtype)
    return out.reset_index(drop=True)


def _empty_changes(frame: pd.DataFrame, key: list[str]) -> pd.DataFrame:
    return _typed(pd.DataFrame(), frame, key, CHANGE_COLUMNS)


def _ranked(changes: pd.DataFrame) -> pd.DataFrame:
    """Regressions, improvements, then shifts (slower ones first), each by effect."""
    rank = changes["direction"].map({d: i for i, d in enumerate(DIRECTIONS)})
    changes = changes.assign(_shift=changes["shift"].astype(bool), _rank=rank).sort_values(
        ["_shift", "_rank", "effect", "benchmark"], ascending=[True, True, False, True], kind="stable"
    )
    return changes.drop(columns=["_shift", "_rank"]).reset_index(drop=True)
