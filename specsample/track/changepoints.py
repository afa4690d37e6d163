"""Change points: the steps in every history series of the results frame, regressions apart from
improvements, each above the series' measured noise.

Pure functions, frame in, frame out (and :func:`report`, the same as text for ``specsample
regressions``); nothing here reads files (``commands/bench.py`` and the dashboard call
:func:`specsample.track.results.load_results` first).

Which library
-------------
Steps are found by asv's own step detection, called as a library: :func:`asv.step_detect.
detect_steps` fits a piecewise-constant function to a series (an L1 Potts model whose penalty is
chosen by an information criterion), and :func:`asv.step_detect.detect_regressions` picks the
upward steps that are still present at the newest value, with asv's relative threshold. That is
the code ``asv publish`` runs on the same results, so the two agree; it is maintained with asv
0.6.6, already a runtime dependency (the suite is an asv suite), and costs nothing to install.
The other candidates do not install on the GPU box (Python 3.12, numpy 2.5): Apache Otava 0.8.0
pins ``numpy==2.2.0`` and pulls in google-cloud-bigquery and slack-sdk for its integrations;
signal-processing-algorithms 2.1.6 (MongoDB's E-divisive means) requires Python ~3.11 and
``numpy<2``.

Two dimensions
--------------
``"commits"``: one series per machine, benchmark and point (every point axis, the subject among
them), over this repository's commits in date order: did a commit change a subject's time?
``"releases"``: one series per machine, benchmark and point less the subject, over the vLLM
releases (``vllm==X.Y.Z`` subjects) in version order, at the newest commit that measured them:
which release changed the sampler's time?

What is a series
----------------
Every metric but the two derived from a point's latency and something measured apart from it
(:data:`DERIVED_METRICS`), whose latency is a series of its own:

* :data:`~specsample.schema.RATIO_METRIC`: a subject's ratio to ``mrv2`` moves whenever
  ``mrv2`` does. Counted as a change of the subject, ``mrv2``'s own 5-10% gain (a
  stats-kernel restructure) read as 29 "regressions" of every other subject at unchanged
  latency.
* :data:`~specsample.schema.BANDWIDTH_METRIC`: the point's bytes over its latency, over the
  copy bandwidth measured once at the start of its sweep, which moves between runs. In the
  committed H200 history that measurement (the latency times the fraction, per point, against
  the point's median) moved by up to 4.4% between consecutive nightly runs: from 093c776 to
  abe6f31 the Vllm sweep's fractions fell 4.6% (geomean) while its latencies moved +0.5%, and
  39 points of every subject, ``vllm==0.33.0`` among them, read as "slower".

Stage shifts
------------
A stage series (``track_stage_us``, one kernel of a call) can step while the call does not:
work moved from one kernel to another (express's row 0 read by ``stats`` instead of
``resample`` doubled express's stats stage at phi=1 and cut its resample stage by 70%, and the
calls got 10-20% faster), or a kernel got slower where the next one's overlap hides it. Such a
step is a **shift**: the point's call latency (the median of its latency metrics over every
sweep that timed the call at those two commits or releases; the sum of its stage times at both
where the call was not timed at both: never one against the other) did not change beyond the
noise floor (on the call's latency) in the step's direction. A shift is listed (:func:`shifts`), not counted among the regressions or
improvements, and does not fail ``specsample regressions``: the call's own latency series judge
the call, the stages explain it.

Direction and noise
-------------------
Lower is better, except for the metrics in :data:`specsample.track.signoff.HIGHER_IS_BETTER`.
Improvements are found the same way as regressions, on the reciprocal of the fitted levels (one
fit per series). A change is reported only when it is larger than the series' threshold, the
largest of:

* the series' noise: the median over its points of the relative interquartile range of the
  stored per-call samples, ``(q75 - q25) / median`` (``q25``/``q75``, else ``samples``); about
  0.3% for the committed H200 ``time_sample`` points, NaN where nothing was stored
  (``track_*`` metrics);
* a noise floor per dimension, the A/A noise measured on the H200 for how the two sides of a
  step were measured, which is far above the within-run spread: a relative floor
  (:data:`NOISE_FLOOR`) and an absolute one in time (:data:`MIN_ABS_SECONDS`), the latter as a
  fraction of the series' median time (a stage's for a stage series):

  - ``"commits"``: each commit is a separate asv run, in separate processes and often hours
    apart. Relative: 5%, asv's own threshold and what sign-off of separately measured results
    uses (:data:`~specsample.track.signoff.ASV_MIN_EFFECT`); the README measures up to ~6%
    between processes. Absolute: 1 us (:data:`SEPARATE_RUNS_MIN_ABS_SECONDS`), from the
    committed history itself: from b340c9d (after 9e9d5f2 changed how the Latency classes
    measure) to c1b5b1c, ``mrv2`` and ``mrv2-pre50939`` did not change, and their points stray
    from each series' median by 0.2% (median), 2.1% (99th percentile), but the smallest ones,
    greedy at R=1 and R=8 (8-12 us), by up to 8.7%, 0.8 us. With both floors no change is
    flagged in those series over that window (``tests/test_committed_results.py``).
  - ``"releases"``: the releases of a point are measured in one run, interleaved in one worker
    process, as the paired sign-off measures base and head; its 2% relative floor
    (:data:`~specsample.track.signoff.PAIRED_MIN_EFFECT`, above the well-under-1% paired A/A
    noise) and 0.5 us absolute floor
    (:data:`~specsample.track.signoff.PAIRED_MIN_ABS_SECONDS`: separate buffers and CUDA
    graphs alone offset 11 us points by up to 0.39 us) apply.

What a change reports
---------------------
asv's ``detect_regressions`` reports the jump where a series left a level and the level it
kept until the next reported jump or the newest point (a regression that was later halved is
reported as the half that is still present; the recovery, if beyond the threshold, as an
improvement). Each change names its range, ``before`` (the last commit or release at the old
level) and ``after`` (the first one beyond the threshold from it, where the series left the old
level), the old level and the kept one, their relative change with an interval, the series'
noise and the threshold it cleared. The interval spans the change of every pair of one point of
the old level and one of the kept level, each point widened to asv's 99% confidence interval of
its median where that was stored: between-run drift, not the within-run spread, is what
separates two levels, and this interval shows it. Steps smaller than about the noise of a
series' levels are not segmented by asv at all, so a slow creep of small steps is not reported.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from asv.step_detect import detect_regressions, detect_steps

from ..schema import AXES, BANDWIDTH_METRIC, RATIO_METRIC, SYMBOLS, release_key, release_version
from .results import commit_order
from .signoff.stats import (
    ASV_MIN_EFFECT,
    HIGHER_IS_BETTER,
    PAIRED_MIN_ABS_SECONDS,
    PAIRED_MIN_EFFECT,
    TIME_UNITS,
)

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


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def lower_is_better(metric: object) -> bool:
    return metric not in HIGHER_IS_BETTER


def series_key(frame: pd.DataFrame, dimension: str = "commits") -> list[str]:
    """The columns that name one series: machine, benchmark and every point axis in the frame
    (less ``subject`` over releases, where the subject is the x axis)."""
    _check_dimension(dimension)
    axes = [a for a in AXES if a in frame and not (dimension == "releases" and a == "subject")]
    return ["machine", "benchmark", *axes]


def detect(frame: pd.DataFrame, dimension: str = "commits") -> pd.DataFrame:
    """Every change point of every series, regressions and improvements, ranked by effect.

    Parameters
    ----------
    frame : DataFrame
        A results frame (:func:`specsample.track.results.load_results`); rows that are not
        ``status == "ok"`` with a positive value are left out.
    dimension : str
        ``"commits"`` or ``"releases"`` (module docstring).

    Returns
    -------
    DataFrame
        One row per change: the key columns (:func:`series_key`), ``module``, ``tier``,
        ``sweep``, ``metric``, ``unit``, then :data:`CHANGE_COLUMNS`. Sorted by direction
        (regressions first), then effect, largest first.
    """
    points = _series_points(frame, dimension)
    key = series_key(frame, dimension)
    if points.empty:
        return _empty_changes(frame, key)
    rows = []
    for _, series in _candidate_series(points, key):
        rows.extend(_changes_of(series, key, dimension))
    if not rows:
        return _empty_changes(frame, key)
    changes = pd.DataFrame(rows)
    changes["call_change"], shift = _stage_shifts(
        changes, changes["direction"], points, key, dimension, changes["before_position"], changes["after_position"]
    )
    changes["shift"] = shift
    changes["id"] = [change_id(row, key) for row in changes.to_dict("records")]
    return _ranked(_typed(changes, frame, key, CHANGE_COLUMNS))


def change_id(row: dict, key: list[str]) -> str:
    """A change point's stable id: the first 10 hex digits of a hash of its series (the key
    columns), dimension and its two ends, so the same change keeps its id over later runs."""
    import hashlib

    parts = [f"{k}={_id_text(row.get(k))}" for k in key]
    parts += [f"dimension={row['dimension']}", f"before={row['before']}", f"after={row['after']}"]
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:10]


def _id_text(value: object) -> str:
    if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
        return ""
    return f"{value:g}" if isinstance(value, float) else str(value)


def find_change(changes: pd.DataFrame, change: str) -> dict:
    """The change whose id starts with ``change`` (at least 4 characters); ``ValueError`` naming
    the known ids when none or several match."""
    if len(change) < 4:
        raise ValueError(f"change id {change!r}: give at least 4 characters")
    found = changes[changes["id"].str.startswith(change)]
    if len(found) != 1:
        known = ", ".join(changes["id"].head(10)) or "none"
        what = "no change point" if found.empty else f"{len(found)} change points"
        raise ValueError(f"change id {change!r}: {what} has it (`specsample regressions` lists them; known: {known})")
    return to_records(found)[0]


def detect_all(frame: pd.DataFrame) -> pd.DataFrame:
    """:func:`detect` over commits and over releases in one frame, ranked (regressions first,
    then by effect)."""
    parts = [detect(frame, dimension) for dimension in DIMENSIONS]
    parts = [p for p in parts if not p.empty] or parts[:1]
    return _ranked(pd.concat(parts, ignore_index=True))


def regressions(changes: pd.DataFrame) -> pd.DataFrame:
    """The regressions of :func:`detect`'s frame (not the shifts), largest effect first."""
    return changes[(changes["direction"] == "regression") & ~changes["shift"]].reset_index(drop=True)


def improvements(changes: pd.DataFrame) -> pd.DataFrame:
    """The improvements of :func:`detect`'s frame (not the shifts), largest effect first."""
    return changes[(changes["direction"] == "improvement") & ~changes["shift"]].reset_index(drop=True)


def shifts(changes: pd.DataFrame) -> pd.DataFrame:
    """The stage shifts of :func:`detect`'s frame (module docstring), slower ones first, each
    direction by effect."""
    return changes[changes["shift"]].reset_index(drop=True)


def newest_vs_previous(frame: pd.DataFrame) -> pd.DataFrame:
    """Each series' value at its benchmark's newest commit against the commit before it.

    Per machine and benchmark, "newest" is the newest commit that measured the benchmark (a
    releases run or a partial run need not measure every benchmark); "the commit before" is,
    per series, the newest earlier commit with a value for it. A series without a value at the
    newest commit, or with nothing before it, is left out. ``verdict`` is ``"regression"`` or
    ``"improvement"`` where the direction-aware ``effect`` is beyond the series' threshold (the
    ``"commits"`` noise floor, or the series' noise where larger), else ``"unchanged"``.

    Returns one row per point: the key columns, ``module``, ``tier``, ``sweep``, ``metric``,
    ``unit``, then :data:`NEWEST_COLUMNS`.
    """
    points = _series_points(frame, "commits")
    key = series_key(frame, "commits")
    if points.empty:
        return _typed(pd.DataFrame(), frame, key, NEWEST_COLUMNS)
    newest = points.groupby(["machine", "benchmark"])["position"].transform("max")
    last_two = points.groupby(key, sort=False, dropna=False).tail(2)
    group = last_two.groupby(key, sort=False, dropna=False).ngroup().to_numpy()
    last = ~pd.Series(group).duplicated(keep="last").to_numpy()
    at_newest = last & (last_two["position"].to_numpy() == newest.loc[last_two.index].to_numpy())
    keep = pd.Series(at_newest).groupby(group).transform("any").to_numpy()
    counts = pd.Series(group).map(pd.Series(group).value_counts()).to_numpy()
    last_two = last_two[keep & (counts == 2)]
    if last_two.empty:
        return _typed(pd.DataFrame(), frame, key, NEWEST_COLUMNS)
    prev = last_two.iloc[0::2].reset_index(drop=True)
    new = last_two.iloc[1::2].reset_index(drop=True)
    out = new[key + list(_DESCRIPTION)].copy()
    out["previous"], out["newest"] = prev["label"].to_numpy(), new["label"].to_numpy()
    out["value_previous"], out["value_newest"] = prev["value"].to_numpy(), new["value"].to_numpy()
    out["change"] = out["value_newest"] / out["value_previous"] - 1
    out["change_lo"] = new["lo"].to_numpy() / prev["hi"].to_numpy() - 1
    out["change_hi"] = new["hi"].to_numpy() / prev["lo"].to_numpy() - 1
    lower = new["metric"].map(lower_is_better).to_numpy(dtype=bool)
    out["effect"] = _effect(out["change"].to_numpy(), lower, "regression")
    out["noise"] = new["noise"].to_numpy()
    out["threshold"] = new["threshold"].to_numpy()
    worse, better = out["effect"] > out["threshold"], -out["effect"] > out["threshold"]
    direction = np.where(better, "improvement", "regression")
    out["call_change"], shift = _stage_shifts(out, direction, points, key, "commits", prev["position"], new["position"])
    out["verdict"] = np.select(
        [(worse | better) & shift, worse, better], ["shift", "regression", "improvement"], "unchanged"
    )
    within = (out["change_lo"] >= -out["threshold"]) & (out["change_hi"] <= out["threshold"])
    out["four_way"] = np.select(
        [worse, better, within.fillna(False).to_numpy(dtype=bool)], ["slower", "faster", "same"], "inconclusive"
    )
    return _typed(out, frame, key, NEWEST_COLUMNS)


def newest_summary(points: pd.DataFrame) -> pd.DataFrame:
    """:func:`newest_vs_previous` per machine and benchmark: ``previous`` (the commit most of its
    points are compared with), ``newest``, ``points``, ``geomean_change`` (of newest/previous),
    ``min_change``, ``max_change``, ``regressions``, ``improvements``, ``same`` and
    ``inconclusive`` (the four-way verdict's other two); benchmarks with
    regressions first, then by the largest regression."""
    columns = [
        "machine",
        "benchmark",
        "metric",
        "unit",
        "previous",
        "newest",
        "points",
        "geomean_change",
        "min_change",
        "max_change",
        "regressions",
        "improvements",
        "same",
        "inconclusive",
    ]
    if points.empty:
        return pd.DataFrame(columns=columns)
    ratio = points["value_newest"] / points["value_previous"]
    frame = points.assign(
        _log=np.log(ratio.astype("float64")),
        _reg=points["verdict"] == "regression",
        _imp=points["verdict"] == "improvement",
        _worst=points["effect"].where(points["verdict"] == "regression", 0.0),
        _same=points["four_way"] == "same",
        _inc=points["four_way"] == "inconclusive",
    )
    summary = (
        frame.groupby(["machine", "benchmark"], sort=False)
        .agg(
            metric=("metric", "first"),
            unit=("unit", "first"),
            previous=("previous", lambda s: s.mode().iloc[0]),
            newest=("newest", "first"),
            points=("change", "size"),
            _log=("_log", "mean"),
            min_change=("change", "min"),
            max_change=("change", "max"),
            regressions=("_reg", "sum"),
            improvements=("_imp", "sum"),
            same=("_same", "sum"),
            inconclusive=("_inc", "sum"),
            _worst=("_worst", "max"),
        )
        .reset_index()
    )
    summary["geomean_change"] = np.exp(summary.pop("_log")) - 1
    summary = summary.sort_values(["regressions", "_worst", "benchmark"], ascending=[False, False, True], kind="stable")
    return summary[columns].reset_index(drop=True)


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
        _iqr=_relative_iqr(ok),
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


def _relative_iqr(rows: pd.DataFrame) -> np.ndarray:
    """(q75 - q25) / value per row: the stored quartiles, else the samples' own; NaN if neither."""
    q25 = rows["q25"].to_numpy(dtype="float64", copy=True)
    q75 = rows["q75"].to_numpy(dtype="float64", copy=True)
    samples = rows["samples"].to_numpy(dtype=object)
    for i in np.flatnonzero(~(np.isfinite(q25) & np.isfinite(q75))):
        if isinstance(samples[i], (list, tuple, np.ndarray)) and len(samples[i]) >= 2:
            q25[i], q75[i] = np.percentile(np.asarray(samples[i], dtype="float64"), [25, 75])
    return (q75 - q25) / rows["value"].astype("float64").to_numpy()


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


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def point_label(row: dict, columns=AXES) -> str:
    """``block logits R=128 K=4 V=151936 phi=0.5 trailing`` for the axes a row sets: the
    categorical ones by value, the numeric ones as symbol=value."""
    parts = []
    for column in columns:
        value = row.get(column)
        if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
            continue
        text = f"{value:g}" if isinstance(value, float) else str(value)
        parts.append(text if column in _NAMED_BY_VALUE else f"{SYMBOLS.get(column, column)}={text}")
    return " ".join(parts)


def report(changes: pd.DataFrame, newest: pd.DataFrame, *, limit: int = 50) -> str:
    """Plain text for a terminal: the newest-vs-previous summary, then the ranked regressions
    and improvements (``limit`` of each; all of them are in the frames)."""

    def pct(value) -> str:
        return "n/a" if value is None or not np.isfinite(value) else f"{100 * value:+.1f}%"

    axes = [a for a in AXES if a != "subject"]
    lines = []
    summary = newest_summary(newest)
    for machine, part in summary.groupby("machine", sort=False):
        flagged = int(part["regressions"].sum()), int(part["improvements"].sum())
        lines.append(
            f"{machine}: newest vs previous, {int(part['points'].sum())} points in "
            f"{len(part)} benchmarks: {flagged[0]} slower, {flagged[1]} faster beyond the "
            f"noise floor, {int(part['same'].sum())} same, {int(part['inconclusive'].sum())} inconclusive"
        )
        for row in part[(part["regressions"] > 0) | (part["improvements"] > 0)].to_dict("records"):
            lines.append(
                f"  {row['benchmark']} {str(row['previous'])[:8]} -> {str(row['newest'])[:8]}: "
                f"{row['regressions']} slower, {row['improvements']} faster, geomean "
                f"{pct(row['geomean_change'])}"
            )
    sections = (
        ("regressions", "(ranked by effect)", regressions(changes)),
        ("improvements", "(ranked by effect)", improvements(changes)),
        ("stage shifts", SHIFTS_TEXT, shifts(changes)),
    )
    for title, how, part in sections:
        lines.append(f"{len(part)} {title} {how}:" if len(part) else f"no {title}")
        for i, row in enumerate(part.head(limit).to_dict("records"), 1):
            where = (
                f"{str(row['before'])[:8]}..{str(row['after'])[:8]}"
                if row["dimension"] == "commits"
                else f"vllm {row['before']}..{row['after']}"
            )
            subject = row.get("subject") if isinstance(row.get("subject"), str) else "vLLM releases"
            noise = "n/a" if not np.isfinite(row["noise"]) else f"{100 * row['noise']:.1f}%"
            call = f", the call {pct(row['call_change'])}" if row["shift"] else ""
            lines.append(
                f"  {i:3d}. [{row['id']}] {pct(row['change'])} [{pct(row['change_lo'])}, {pct(row['change_hi'])}] "
                f"{row['benchmark']} {subject} {point_label(row, axes)} {where} (noise {noise}, "
                f"threshold {100 * row['threshold']:.1f}%{call})"
            )
        if len(part) > limit:
            lines.append(f"  ... {len(part) - limit} more (--json FILE lists all)")
    return "\n".join(lines)


def to_records(frame: pd.DataFrame) -> list[dict]:
    """Rows as JSON-ready dicts: missing values None, timestamps ISO text."""
    out = []
    for row in frame.to_dict("records"):
        clean = {}
        for key, value in row.items():
            if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
                clean[key] = None
            elif isinstance(value, pd.Timestamp):
                clean[key] = value.isoformat()
            elif isinstance(value, np.generic):
                clean[key] = value.item()
            else:
                clean[key] = value
        out.append(clean)
    return out
