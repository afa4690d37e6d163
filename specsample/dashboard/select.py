"""Which rows of the results frame each figure and table shows, and the numbers the pages print.

Pure functions, frame in, frame (or list) out; nothing here draws or writes HTML. A figure whose
data is missing raises :class:`MissingData`, and the page says why instead of showing it.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from ..schema import (
    BANDWIDTH_METRIC,
    BASE_POINT,
    BASELINE_SUBJECT,
    CPU_INTERPRETER_MACHINE,
    MODES,
    RATIO_METRIC,
    SEMANTICS,
    STATUSES,
    release_key,
)
from ..track import changepoints
from ..track.changepoints import point_label
from ..track.results import ENV_COLUMNS, PARAM_COLUMNS, commit_order, point_ratio
from ..track.signoff.stats import TIME_UNITS
from .names import benchmark_label
from .specs import (
    CATEGORY_ORDER,
    FASTEST,
    FIDELITY_METRICS,
    FIDELITY_SUBJECTS,
    FIDELITY_TOLERANCE,
    METRIC_PREFERENCE,
    PLACEHOLDER_CHANGE_RELEASE,
    REFERENCE_PREFIX,
    REFERENCE_SUBJECTS,
    RELEASE_METRICS,
    FigureSpec,
)

# Semantics outcomes counted beside the statuses ("crashed" is both: counted once, as a status).
OUTCOME_SEMANTICS = tuple(s for s in SEMANTICS if s not in STATUSES)
# A point is placeholder-heavy from this density on (the drop PR #50939 is about).
PLACEHOLDER_HEAVY = 1.0


class MissingData(Exception):
    """A figure's data is not in the frame; the page says why instead of showing it."""


# ---------------------------------------------------------------------------------------------
# The frame the pages show
# ---------------------------------------------------------------------------------------------


def interpreter_machines(df: pd.DataFrame) -> set[str]:
    """Machines whose results are CPU-interpreter runs: named :data:`CPU_INTERPRETER_MACHINE`, or
    with no GPU recorded and only smoke-tier results. Their timings say nothing about a GPU, so a
    dashboard shows them only when asked to by name."""
    if df.empty:
        return set()
    found = set()
    for machine, rows in df.groupby("machine"):
        no_gpu = "gpu" not in rows or rows["gpu"].isna().all()
        only_smoke = "tier" in rows and set(rows["tier"].dropna()) <= {"smoke"}
        if machine == CPU_INTERPRETER_MACHINE or (no_gpu and only_smoke):
            found.add(str(machine))
    return found


def default_machine(df: pd.DataFrame) -> str | None:
    """The machine with the longest history (the most commits measured), the newest result
    breaking a tie; CPU-interpreter machines left out (None if no other). A history page shows
    most on the machine that has run longest, and the choice stays put when another machine
    gets a first run, so the committed site is what README's main job builds."""
    rows = df[~df["machine"].isin(interpreter_machines(df))] if not df.empty else df
    if rows.empty:
        return None
    per_machine = rows.groupby("machine").agg(commits=("commit", "nunique"), newest=("date", "max"))
    return str(per_machine.sort_values(["commits", "newest"], kind="stable").index[-1])


def without_self_ratios(df: pd.DataFrame) -> pd.DataFrame:
    """The frame less ``track_ratio_to_mrv2`` of mrv2 itself: not a measurement (1 by
    definition; the suite skips it, older runs recorded it as failed), so it is neither drawn
    nor reported as a failure."""
    if df.empty or "metric" not in df:
        return df
    self_ratio = (df["metric"] == RATIO_METRIC) & (df["subject"] == BASELINE_SUBJECT)
    return df[~self_ratio.fillna(False).to_numpy(dtype=bool)]


def status_notes(data: pd.DataFrame) -> list[str]:
    """Benchmarks with no successful point (left out of every figure), and points that failed
    or crashed."""
    if data.empty:
        return []
    counts = data.groupby(["benchmark", "status"]).size().unstack(fill_value=0)
    notes = []
    empty = counts.index[counts.get("ok", 0) == 0] if "ok" in counts else counts.index
    if len(empty):
        listed = ", ".join(
            f"{benchmark_label(b)} ({', '.join(f'{n} {s}' for s, n in counts.loc[b].items() if n)})" for b in empty
        )
        notes.append(f"Not drawn, every point skipped, failed or crashed: {listed}.")
    for status, what in (("failed", "failed"), ("crashed", "crashed (the subject's process died)")):
        if status not in counts:
            continue
        partial = [b for b in counts.index[counts[status] > 0] if b not in set(empty)]
        if partial:
            listed = ", ".join(
                f"{benchmark_label(b)} ({counts.loc[b, status]} of {counts.loc[b].sum()})" for b in partial
            )
            notes.append(f"Points that {what} (left out of the figures): {listed}.")
    return notes


def environment_changes(data: pd.DataFrame) -> pd.DataFrame:
    """One row per commit (commit, date, env and :data:`ENV_COLUMNS`), kept where any
    environment column differs from the previous commit's, and the newest."""
    columns = ["commit", "date", "env", *ENV_COLUMNS]
    runs = data[columns].drop_duplicates("commit").sort_values("date", kind="stable")
    signature = runs.drop(columns=["commit", "date"]).astype(object).fillna("").astype(str)
    signature = signature.agg("|".join, axis=1)
    changed = signature.ne(signature.shift())
    changed.iloc[-1] = True
    return runs[changed.to_numpy()].reset_index(drop=True)


# ---------------------------------------------------------------------------------------------
# Rows of one figure
# ---------------------------------------------------------------------------------------------


def select(df: pd.DataFrame, spec: FigureSpec) -> pd.DataFrame:
    """Rows a spec draws: filter applied, status among ``spec.statuses``, needed columns
    present and non-missing (and a value, for successful rows)."""
    needed = [
        c for c in (spec.x, spec.line, spec.facet, spec.facet_row, spec.split) if c and c not in ("commit", "release")
    ]
    missing = [c for c, _ in spec.filter if c not in df] + [c for c in needed if c not in df]
    if missing:
        raise MissingData(f"no column {', '.join(missing)} in the results")
    mask = df["status"].isin(spec.statuses)
    for column, wanted in spec.filter:
        mask &= df[column].isin(wanted) if isinstance(wanted, tuple) else df[column] == wanted
    selected = df[mask.fillna(False).to_numpy(dtype=bool)].dropna(subset=needed)
    selected = selected[(selected["status"] != "ok") | selected["value"].notna()]
    if selected.empty or not (selected["status"] == "ok").any():
        where = ", ".join(f"{c}={v}" for c, v in spec.filter) or "any rows"
        raise MissingData(f"no successful results with {where} and {', '.join(needed)} set")
    return selected


def require_varying(df: pd.DataFrame, column: str) -> None:
    """A sweep that holds x at one value has nothing to draw against it."""
    if df[column].nunique() < 2:
        raise MissingData(f"{column} takes fewer than two values")


def newest_commit(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of the newest commit present in df (a sweep may not run on every commit)."""
    order = commit_order(df)
    return df[df["commit"] == order["commit"].iloc[-1]]


def pair_subjects(df: pd.DataFrame, base_subject: str, head_subject: str) -> pd.DataFrame:
    """Points measured for both subjects in the same run: key columns, base_value, head_value,
    ratio (head / base). A plain join; sign-off's statistics are not needed to draw and would
    dominate the build time."""
    ok = df[df["status"] == "ok"]
    present = set(ok["subject"].dropna())
    absent = [s for s in (base_subject, head_subject) if s not in present]
    if absent:
        raise MissingData(f"no {' or '.join(absent)} results")
    key = [c for c in ("machine", "benchmark", "commit", *PARAM_COLUMNS) if c in ok and c != "subject"]
    sides = [
        ok.loc[ok["subject"] == s, key + ["value"]].rename(columns={"value": f"{n}_value"})
        for s, n in ((base_subject, "base"), (head_subject, "head"))
    ]
    pairs = sides[0].merge(sides[1], on=key, how="inner")
    pairs["base_value"] = pairs["base_value"].astype("float64")
    pairs["head_value"] = pairs["head_value"].astype("float64")
    pairs["ratio"] = pairs["head_value"] / pairs["base_value"]
    pairs = pairs[np.isfinite(pairs["ratio"]) & (pairs["ratio"] > 0)]
    if pairs.empty:
        raise MissingData(f"no points measured for both {base_subject} and {head_subject}")
    return pairs


def aggregate(values: pd.Series, how: str) -> float:
    values = values.astype("float64")
    values = values[np.isfinite(values)]
    if values.empty:
        return math.nan
    if how == "geomean":
        positive = values[values > 0]
        return float(np.exp(np.log(positive).mean())) if len(positive) else math.nan
    return float(values.median())


def group(df: pd.DataFrame, by: list[str], columns: str | list[str], how: str) -> pd.DataFrame:
    """Aggregate ``columns`` over every row sharing ``by`` (:func:`aggregate`'s ``how``,
    vectorized: missing and, for the geomean, non-positive values are left out); returns by +
    columns."""
    by = [b for b in by if b]
    names = [columns] if isinstance(columns, str) else list(columns)
    values = df[names].apply(pd.to_numeric, errors="coerce").astype("float64")
    values = values.where(np.isfinite(values))
    keys = [df[b] for b in by]
    if how == "geomean":
        out = np.exp(np.log(values.where(values > 0)).groupby(keys, sort=True, dropna=False).mean())
    else:
        out = values.groupby(keys, sort=True, dropna=False).median()
    return out.reset_index()


def ordered(values, column: str | None) -> list:
    """Distinct values in :data:`CATEGORY_ORDER`, unknown ones after in first-seen order
    (numbers in numeric order)."""
    seen = list(dict.fromkeys(values))
    known = dict(CATEGORY_ORDER).get(column, ())
    rank = {v: i for i, v in enumerate(known)}
    numeric = all(isinstance(v, (int, float, np.integer, np.floating)) for v in seen)
    return sorted(seen, key=lambda v: (rank.get(v, len(rank)), v if numeric else seen.index(v)))


def groups(df: pd.DataFrame, column: str | None) -> list[tuple[object, pd.DataFrame]]:
    """(value, rows) per value of column in canonical order; one group when column is None."""
    if column is None or column not in df:
        return [(None, df)]
    parts = dict(list(df.groupby(column, sort=False, dropna=False)))
    return [(value, parts[value]) for value in ordered(parts, column)]


def one_per_point(changes: pd.DataFrame, same: list[str]) -> pd.DataFrame:
    """``changes`` with one row per point and ``same`` columns (the range and direction):
    the row of the first metric in :data:`METRIC_PREFERENCE` (others after, by name), and
    ``also``, the other metrics of the sweep that changed alike (a list)."""
    if changes.empty:
        return changes.assign(also=pd.Series(dtype=object))
    point = ["machine", "tier", "sweep", *(a for a in PARAM_COLUMNS if a in changes), *same]
    rank = {m: i for i, m in enumerate(METRIC_PREFERENCE)}
    ordered_rows = changes.assign(_rank=changes["metric"].map(rank).fillna(len(rank)), _order=np.arange(len(changes)))
    ordered_rows = ordered_rows.sort_values(["_rank", "metric"], kind="stable")
    ident = ordered_rows.groupby(point, sort=False, dropna=False).ngroup().to_numpy()
    metrics = pd.Series(ordered_rows["metric"].to_numpy()).groupby(ident).agg(list)
    first = ~pd.Series(ident).duplicated().to_numpy()
    out = ordered_rows[first].assign(also=[metrics[i][1:] for i in ident[first]])
    return out.sort_values("_order").drop(columns=["_rank", "_order"]).reset_index(drop=True)


# ---------------------------------------------------------------------------------------------
# Bandwidth
# ---------------------------------------------------------------------------------------------


def is_reference(subjects: pd.Series) -> pd.Series:
    """True for subjects whose changes the change tables list apart, after the ranked ones:
    :data:`REFERENCE_SUBJECTS` and the vLLM releases measured beside ours."""
    text = subjects.astype("string")
    return (text.isin(REFERENCE_SUBJECTS) | text.str.startswith(REFERENCE_PREFIX)).fillna(False).astype(bool)


def bandwidth_above_one(df: pd.DataFrame) -> pd.DataFrame:
    """Subjects with a bandwidth fraction above 1: ``subject``, ``max``, ``points`` (above 1),
    ``benchmarks`` (their sweeps), largest first."""
    rows = df[(df["metric"] == BANDWIDTH_METRIC) & (df["status"] == "ok") & (df["value"] > 1)] if not df.empty else df
    if rows.empty:
        return pd.DataFrame(columns=["subject", "max", "points", "benchmarks"])
    out = rows.groupby("subject").agg(
        max=("value", "max"), points=("value", "size"), benchmarks=("sweep", lambda s: sorted(set(s.dropna())))
    )
    return out.reset_index().sort_values("max", ascending=False, kind="stable")


# ---------------------------------------------------------------------------------------------
# vLLM releases
# ---------------------------------------------------------------------------------------------


def release_rows(df: pd.DataFrame) -> pd.DataFrame:
    """The releases tier at the newest commit that measured it (per benchmark): the releases'
    rows (``release`` set) and ours measured beside them (``release`` missing)."""
    releases = changepoints.release_rows(df)
    releases = releases[releases["tier"] == "releases"] if not releases.empty else releases
    if releases.empty:
        return releases.reset_index(drop=True)
    runs = releases[["benchmark", "commit"]].drop_duplicates()
    ours = df[~df["subject"].isin(set(releases["subject"]))].merge(runs, on=["benchmark", "commit"])
    ours = ours.assign(release=pd.Series([None] * len(ours), index=ours.index, dtype="str"))
    return pd.concat([releases, ours], ignore_index=True)


def release_metric(rows: pd.DataFrame) -> str | None:
    """The latency metric the releases were measured with (:data:`RELEASE_METRICS` order)."""
    present = set(rows.loc[rows["status"] == "ok", "metric"]) if not rows.empty else set()
    return next((m for m in RELEASE_METRICS if m in present), None)


def fastest_releases(rows: pd.DataFrame) -> pd.DataFrame:
    """Per mode (:data:`specsample.schema.MODES` order, then any other mode measured), the vLLM
    release with the lowest latency at the base point (every other axis of
    :data:`specsample.schema.BASE_POINT`; the median over the sweeps that measured it there):
    ``mode``, ``release`` ("" where no release was timed there), ``latency`` (seconds),
    ``ties`` (the other releases within the releases' noise floor of it, version order),
    ``next`` and ``next_ratio`` (the fastest release beyond that floor, its latency over the
    fastest's; "" and NaN where none), ``timed`` (releases timed there) and ``faulted``
    (releases that crashed or failed there and were not timed)."""
    columns = ["mode", "release", "latency", "ties", "next", "next_ratio", "timed", "faulted"]
    if rows.empty:
        return pd.DataFrame(columns=columns)
    metric = release_metric(rows)
    released = rows[rows["release"].notna()]
    if metric is not None:
        released = released[released["metric"] == metric]
    for axis, value in BASE_POINT.items():
        if axis != "mode" and axis in released:
            released = released[released[axis] == value]
    out = []
    for mode in dict.fromkeys([*MODES, *sorted(set(released["mode"].dropna()))]):
        here = released[released["mode"] == mode]
        ok = here[here["status"] == "ok"]
        seconds = ok["value"].astype("float64") * ok["unit"].map(TIME_UNITS).astype("float64")
        ranked = seconds.groupby(ok["release"]).median().dropna().sort_values(kind="stable")
        faulted = len(set(here["release"]) - set(ranked.index))
        if ranked.empty:
            out.append(dict(zip(columns, [mode, "", math.nan, [], "", math.nan, 0, faulted])))
            continue
        latency = float(ranked.iloc[0])
        threshold = max(changepoints.NOISE_FLOOR["releases"], changepoints.MIN_ABS_SECONDS["releases"] / latency)
        ratio = ranked / latency
        ties = changepoints.release_order(list(ratio.index[1:][ratio.iloc[1:] - 1 <= threshold]))
        beyond = ratio[ratio - 1 > threshold]
        following = (str(beyond.index[0]), float(beyond.iloc[0])) if len(beyond) else ("", math.nan)
        out.append(dict(zip(columns, [mode, str(ranked.index[0]), latency, ties, *following, len(ranked), faulted])))
    return pd.DataFrame(out, columns=columns)


def release_outcomes(rows: pd.DataFrame) -> pd.DataFrame:
    """Per release in version order: ``points`` (timed points of the latency metric), one
    column per status (:data:`specsample.schema.STATUSES`) and per semantics outcome
    (:data:`OUTCOME_SEMANTICS`)."""
    metric = release_metric(rows)
    releases = rows[rows["release"].notna()]
    if metric is not None:
        releases = releases[releases["metric"] == metric]
    columns = ["release", "subject", "points", *STATUSES, *OUTCOME_SEMANTICS]
    if releases.empty:
        return pd.DataFrame(columns=columns)
    out = []
    for release in changepoints.release_order(releases["release"]):
        part = releases[releases["release"] == release]
        status = part["status"].value_counts()
        semantics = part["semantics"].value_counts()
        out.append(
            {
                "release": release,
                "subject": part["subject"].iloc[0],
                "points": len(part),
                **{s: int(status.get(s, 0)) for s in STATUSES},
                **{s: int(semantics.get(s, 0)) for s in OUTCOME_SEMANTICS},
            }
        )
    return pd.DataFrame(out, columns=columns)


def release_faults(rows: pd.DataFrame) -> pd.DataFrame:
    """Release points that crashed, failed or violate placeholder semantics, in version order:
    ``release``, ``sweep``, ``point`` (label), ``status``, ``semantics``, ``reason``."""
    metric = release_metric(rows)
    releases = rows[rows["release"].notna()]
    if metric is not None:
        releases = releases[releases["metric"] == metric]
    bad = releases[
        releases["status"].isin(["crashed", "failed"]) | (releases["semantics"] == "violates placeholder semantics")
    ]
    columns = ["release", "sweep", "point", "status", "semantics", "reason"]
    if bad.empty:
        return pd.DataFrame(columns=columns)
    axes = [a for a in PARAM_COLUMNS if a != "subject"]
    rank = {r: i for i, r in enumerate(changepoints.release_order(bad["release"]))}
    bad = bad.assign(_rank=bad["release"].map(rank)).sort_values(["_rank", "sweep"], kind="stable")
    return pd.DataFrame(
        {
            "release": bad["release"].to_numpy(),
            "sweep": bad["sweep"].to_numpy(),
            "point": [point_label(r, axes) for r in bad.to_dict("records")],
            "status": bad["status"].to_numpy(),
            "semantics": bad["semantics"].to_numpy(),
            "reason": bad["reason"].to_numpy(),
        }
    )


def placeholder_releases(rows: pd.DataFrame) -> tuple[str | None, str | None]:
    """(the newest release measured before :data:`PLACEHOLDER_CHANGE_RELEASE`, that release),
    each None when it was not measured."""
    measured = (
        changepoints.release_order(rows.loc[rows["status"] == "ok", "release"].dropna()) if not rows.empty else []
    )
    after = PLACEHOLDER_CHANGE_RELEASE if PLACEHOLDER_CHANGE_RELEASE in measured else None
    earlier = [r for r in measured if release_key(r) < release_key(PLACEHOLDER_CHANGE_RELEASE)]
    return (earlier[-1] if earlier else None), after


def placeholder_change(rows: pd.DataFrame) -> pd.DataFrame:
    """The latency change between the release before PR #50939 and the release with it, per
    point of the releases' Density sweep (the other axes at the base point): ``mode``,
    ``draft``, ``placeholder_pattern``, ``placeholder_density``, ``before``, ``after``
    (releases), ``latency_before``, ``latency_after`` (seconds), ``ratio`` (after / before),
    ``threshold`` (the releases' noise floor at that latency) and ``beyond_noise``. Empty when
    either release or the sweep was not measured."""
    columns = [
        "mode",
        "draft",
        "placeholder_pattern",
        "placeholder_density",
        "before",
        "after",
        "latency_before",
        "latency_after",
        "ratio",
        "threshold",
        "beyond_noise",
    ]
    before, after = placeholder_releases(rows)
    metric = release_metric(rows)
    if rows.empty or before is None or after is None or metric is None:
        return pd.DataFrame(columns=columns)
    density = rows[(rows["sweep"] == "Density") & (rows["metric"] == metric) & (rows["status"] == "ok")]
    for axis in ("num_reqs", "num_speculative_steps", "vocab_size"):
        density = density[density[axis] == BASE_POINT[axis]]
    key = ["mode", "draft", "placeholder_pattern", "placeholder_density"]
    sides = [
        density[density["release"] == r].groupby(key)["value"].median().rename(name)
        for r, name in ((before, "latency_before"), (after, "latency_after"))
    ]
    out = pd.concat(sides, axis=1, join="inner").reset_index()
    if out.empty:
        return pd.DataFrame(columns=columns)
    seconds = TIME_UNITS.get(str(density["unit"].iloc[0]), math.nan)
    out["latency_before"] *= seconds
    out["latency_after"] *= seconds
    out["ratio"] = out["latency_after"] / out["latency_before"]
    floor, min_abs = (changepoints.NOISE_FLOOR["releases"], changepoints.MIN_ABS_SECONDS["releases"])
    out["threshold"] = np.fmax(floor, min_abs / out["latency_before"])
    out["beyond_noise"] = (out["ratio"] - 1).abs() > out["threshold"]
    out["before"], out["after"] = before, after
    return out[columns]


def placeholder_ratio_change(change: pd.DataFrame) -> pd.DataFrame:
    """From :func:`placeholder_change`: per mode, draft and pattern, the placeholder-heavy
    (phi=1) to no-placeholder (phi=0) latency ratio before and after:
    ``phi1_over_phi0_before``, ``phi1_over_phi0_after`` (the change at each density is
    :func:`placeholder_change`'s ``ratio``)."""
    columns = [
        "mode",
        "draft",
        "placeholder_pattern",
        "before",
        "after",
        "phi1_over_phi0_before",
        "phi1_over_phi0_after",
    ]
    if change.empty:
        return pd.DataFrame(columns=columns)
    key = ["mode", "draft", "placeholder_pattern"]
    ends = change[change["placeholder_density"].isin([0.0, PLACEHOLDER_HEAVY])]
    wide = ends.pivot_table(
        index=key, columns="placeholder_density", values=["latency_before", "latency_after"], aggfunc="first"
    )
    if (0.0 not in wide["latency_before"]) or (PLACEHOLDER_HEAVY not in wide["latency_before"]):
        return pd.DataFrame(columns=columns)
    out = pd.DataFrame(
        {
            "phi1_over_phi0_before": wide["latency_before"][PLACEHOLDER_HEAVY] / wide["latency_before"][0.0],
            "phi1_over_phi0_after": wide["latency_after"][PLACEHOLDER_HEAVY] / wide["latency_after"][0.0],
        }
    ).reset_index()
    out["before"], out["after"] = change["before"].iloc[0], change["after"].iloc[0]
    order = {m: i for i, m in enumerate(dict(CATEGORY_ORDER)["mode"])}
    out = out.assign(_m=out["mode"].map(order)).sort_values(["_m", "draft", "placeholder_pattern"])
    return out[columns].reset_index(drop=True)


def replica_fidelity(df: pd.DataFrame, release: str, subjects=FIDELITY_SUBJECTS) -> pd.DataFrame:
    """Each of ``subjects`` against ``release`` (the release whose draws it reproduces) at every
    point both were measured at, at each tier's newest commit that measured the release: per
    tier, sweep and subject, ``commit``, ``metric``, ``points``, the geomean, min and max of
    ours / release latency, ``within`` (points within :data:`FIDELITY_TOLERANCE`) and ``worst``
    (the point furthest from 1, as a label)."""
    columns = ["tier", "sweep", "subject", "commit", "metric", "points", "geomean", "min", "max", "within", "worst"]
    timed = df[(df["status"] == "ok") & df["metric"].isin(FIDELITY_METRICS)] if not df.empty else df
    measured = timed[timed["subject"] == release] if not timed.empty else timed
    if measured.empty:
        return pd.DataFrame(columns=columns)
    key = [a for a in PARAM_COLUMNS if a in timed and a != "subject"]
    out = []
    for tier, part in measured.groupby("tier", sort=False):
        order = commit_order(part)
        commit = str(order["commit"].iloc[-1])
        run = timed[(timed["tier"] == tier) & (timed["commit"] == commit)]
        for sweep, rows in run.groupby("sweep", sort=False):
            metric = next((m for m in FIDELITY_METRICS if m in set(rows["metric"])), None)
            rows = rows[rows["metric"] == metric]
            for subject in subjects:
                ratio = point_ratio(rows, subject, release, key)
                if ratio.empty:
                    continue
                furthest = int(np.argmax(np.abs(ratio.to_numpy() - 1)))  # positional: the key holds NaN (stage)
                out.append(
                    {
                        "tier": tier,
                        "sweep": sweep,
                        "subject": subject,
                        "commit": commit,
                        "metric": metric,
                        "points": len(ratio),
                        "geomean": aggregate(ratio, "geomean"),
                        "min": ratio.min(),
                        "max": ratio.max(),
                        "within": int(((ratio - 1).abs() <= FIDELITY_TOLERANCE).sum()),
                        "worst": f"{point_label(dict(zip(key, ratio.index[furthest])))}: {ratio.iloc[furthest]:.3f}",
                    }
                )
    return pd.DataFrame(out, columns=columns)


def newest_release_vs_ours(rows: pd.DataFrame, subjects=(BASELINE_SUBJECT, FASTEST)) -> pd.DataFrame:
    """The newest measured release against each of ``subjects``, measured beside it, per sweep,
    mode and draft: ``release``, ``sweep``, ``mode``, ``draft``, ``points``, and per subject
    ``S`` the geomean, min and max of release / S latency (``ratio_S``, ``min_S``, ``max_S``;
    above 1: the release is slower)."""
    metric = release_metric(rows)
    releases = changepoints.release_order(rows.loc[rows["status"] == "ok", "release"].dropna()) if metric else []
    if not releases:
        return pd.DataFrame()
    newest = releases[-1]
    timed = rows[(rows["metric"] == metric) & (rows["status"] == "ok")]
    key = ["sweep", *(a for a in PARAM_COLUMNS if a in timed and a != "subject")]
    frames = []
    for subject in subjects:
        ratio = point_ratio(timed, f"vllm=={newest}", subject, key)
        if not ratio.empty:
            frames.append((subject, ratio.rename(subject)))
    if not frames:
        return pd.DataFrame()
    ratios = pd.concat([r for _, r in frames], axis=1).reset_index()
    out = []
    for (sweep, mode, draft), part in ratios.groupby(["sweep", "mode", "draft"], sort=False):
        row = {"release": newest, "sweep": sweep, "mode": mode, "draft": draft, "points": len(part)}
        for subject, _ in frames:
            values = part[subject].dropna()
            row.update(
                {
                    f"ratio_{subject}": aggregate(values, "geomean"),
                    f"min_{subject}": values.min(),
                    f"max_{subject}": values.max(),
                }
            )
        out.append(row)
    order = {m: i for i, m in enumerate(dict(CATEGORY_ORDER)["mode"])}
    out = pd.DataFrame(out)
    return (
        out.assign(_m=out["mode"].map(order))
        .sort_values(["sweep", "_m", "draft"], kind="stable")
        .drop(columns="_m")
        .reset_index(drop=True)
    )
