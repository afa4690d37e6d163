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
(:data:`.series.DERIVED_METRICS`), whose latency is a series of its own:

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

from ..schema import PATH_DEFAULTS, SYMBOLS
from .results import PARAM_COLUMNS
from .series import (  # noqa: F401 (public names re-exported)
    _DESCRIPTION,
    _NAMED_BY_VALUE,
    CHANGE_COLUMNS,
    DERIVED_METRICS,
    DIMENSIONS,
    DIRECTIONS,
    LATENCY_METRICS,
    MIN_ABS_SECONDS,
    NEWEST_COLUMNS,
    NOISE_FLOOR,
    SEPARATE_RUNS_MIN_ABS_SECONDS,
    SHIFTS_TEXT,
    VERDICTS,
    _candidate_series,
    _changes_of,
    _effect,
    _empty_changes,
    _ranked,
    _series_points,
    _stage_shifts,
    _typed,
    lower_is_better,
    release_order,
    release_rows,
    series_key,
)

# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


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
    columns; a path axis only off its default, so a series measured before the path axes existed
    keeps its id), dimension and its two ends, so the same change keeps its id over later runs."""
    import hashlib

    parts = [f"{k}={_id_text(row.get(k))}" for k in key if not _at_path_default(k, row.get(k))]
    parts += [f"dimension={row['dimension']}", f"before={row['before']}", f"after={row['after']}"]
    return hashlib.sha1("\n".join(parts).encode()).hexdigest()[:10]


def _at_path_default(column: str, value: object) -> bool:
    """Whether ``column`` is a path axis at its default (or unset)."""
    if column not in PATH_DEFAULTS:
        return False
    return _id_text(value) in ("", _id_text(PATH_DEFAULTS[column]))


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


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def point_label(row: dict, columns=PARAM_COLUMNS) -> str:
    """``block logits R=128 K=4 V=151936 phi=0.5 trailing`` for the axes a row sets: the
    categorical ones by value, the numeric ones as symbol=value, a path axis as name=value only
    off its default (``... fly_window_size=2``)."""
    parts = []
    for column in columns:
        value = row.get(column)
        if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)):
            continue
        if _at_path_default(column, value):
            continue
        text = f"{value:g}" if isinstance(value, float) else str(value)
        parts.append(text if column in _NAMED_BY_VALUE else f"{SYMBOLS.get(column, column)}={text}")
    return " ".join(parts)


def report(changes: pd.DataFrame, newest: pd.DataFrame, *, limit: int = 50) -> str:
    """Plain text for a terminal: the newest-vs-previous summary, then the ranked regressions
    and improvements (``limit`` of each; all of them are in the frames)."""

    def pct(value) -> str:
        return "n/a" if value is None or not np.isfinite(value) else f"{100 * value:+.1f}%"

    axes = [a for a in PARAM_COLUMNS if a != "subject"]
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
