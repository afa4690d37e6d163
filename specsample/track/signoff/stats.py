"""Sign-off: is head slower than base? Pure functions on the results frame.

Every function takes frames shaped like :func:`specsample.track.results.load_results` output
(one commit, or one side, selected first) and returns a frame or a value; nothing here reads
files, measures or parses arguments (:mod:`specsample.cli`, :mod:`specsample.commands` and
:mod:`specsample.runs.paired` do). Thresholds are keyword arguments.

Each point both sides measured is judged by :mod:`.verdict`: significance as ``asv continuous``
judges it, then ``slower``, ``faster``, ``same`` or ``inconclusive`` (:func:`.verdict.four_way`).

Two defaults for ``min_effect``, because the drift depends on how the two sides were measured:

* :data:`PAIRED_MIN_EFFECT` = 2% for ``specsample signoff BASE HEAD`` (:mod:`.paired`): base
  and head timed in one process on the same inputs, samples alternated ABBA, so clock drift
  cancels and an A/A run is expected to differ by well under 1%. 2% sits above that noise
  floor with margin and well below the 5% slowdown the sign-off must catch (a 5% regression
  clears it by 3 points; significance comes from 30 samples a side). Validated by
  ``specsample signoff-validate`` (:mod:`.validate`: A/A runs and planted 3/5/10% slowdowns,
  a delay kernel wrapped around the subject, :mod:`specsample.subjects.planted`).
* :data:`ASV_MIN_EFFECT` = 5% (asv's own) for results measured in separate processes (committed
  asv results, ``--results``): there the same kernel differs by up to ~6% between processes on
  the H200, so a smaller threshold would flag noise. ``specsample signoff-validate`` measures
  this comparison's false alarms too (its separate-process rows).

Time points must also move by more than ``min_abs_seconds`` (:data:`PAIRED_MIN_ABS_SECONDS` =
0.5 us for the paired sign-off). Base and head run on separate buffers and graph instances,
and that placement alone offsets a point by a roughly constant few hundred nanoseconds: in
the H200 validation of the whole quick tier (5 A/A runs, 90 points) the same code differed by
up to 0.39 us, 3.2% of an 11.9 us point, at p < 1e-8, while no point of 30 us or more moved
by 1.4%. A relative threshold alone therefore cries wolf on the smallest points only.

Strictness (issue 19): a sign-off passes only on what it verified.

* A point that **crashed** or **failed** on either side is a failed sign-off (exit 2), whatever
  the other points say: it was not verified, and a crash is a bug.
* Head **violating placeholder semantics** at a point where base does not
  (:data:`specsample.schema.SEMANTICS`) is a failed sign-off too (exit 2): a faster wrong
  kernel is not an improvement.
* A point measured on **one side only** (absent from the other side, or skipped there) is
  ``missing`` (base has it, head not) or ``new`` (head has it, base not): exit 2 unless the
  caller allows them (``--allow-missing``), and then the report lists them.
* No point compared at all is exit 2: a gate must not pass on no data.
"""

from __future__ import annotations

import math
from collections.abc import Collection

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

from ...noise import median_ci
from ...schema import BANDWIDTH_METRIC, SEMANTICS
from ...schema import PATH_AXES
from ..results import COLUMNS, PARAM_COLUMNS
from .verdict import EQUIVALENCE_ALPHA, finite_samples, four_way, is_finite, min_p_value, relative_iqr, significance

# ---------------------------------------------------------------------------------------------
# Contract
# ---------------------------------------------------------------------------------------------

# Every verdict compare() can return, by what it means for the exit code (exit_code()):
# compared points (both sides ok), failures (exit 2), one-sided points (exit 2 unless allowed),
# and points both sides skipped (not applicable; no effect).
# The four-way verdict of a compared point (:func:`.verdict.four_way`): slower, faster, same
# (shown equivalent within the margin by two one-sided tests), inconclusive (neither shown).
COMPARED_VERDICTS: tuple[str, ...] = ("slower", "faster", "same", "inconclusive")
FAILED_VERDICTS: tuple[str, ...] = ("crashed", "failed", "violation")
ONE_SIDED_VERDICTS: tuple[str, ...] = ("missing", "new")
VERDICTS: tuple[str, ...] = (*COMPARED_VERDICTS, *FAILED_VERDICTS, *ONE_SIDED_VERDICTS, "skipped")

# asv's default significance level (asv continuous / compare).
ALPHA = 0.002
# min_effect defaults (module docstring): paired in-process sign-off, separate-process results.
PAIRED_MIN_EFFECT = 0.02
ASV_MIN_EFFECT = 0.05
# Absolute floor for time points of the paired sign-off (module docstring); 0 disables it.
PAIRED_MIN_ABS_SECONDS = 0.5e-6
# Time units a point's change can be measured in, as seconds per unit.
TIME_UNITS: dict[str, float] = {"seconds": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}

# Metrics where a larger value is better. asv itself assumes lower is better for everything,
# which would flag a rise in achieved bandwidth as a regression.
HIGHER_IS_BETTER: tuple[str, ...] = (BANDWIDTH_METRIC,)

# The semantics that fails a sign-off when head has it and base does not.
VIOLATES = SEMANTICS[2]
assert VIOLATES == "violates placeholder semantics"

# Columns compare() adds after the key columns.
VERDICT_COLUMNS: tuple[str, ...] = (
    "metric",
    "unit",
    "base_commit",
    "head_commit",
    "base_status",
    "head_status",
    "base_value",
    "head_value",
    "ratio",
    "p_value",
    "test",
    "significant",
    "equivalence_p",
    "capped",
    "base_rel_iqr",
    "head_rel_iqr",
    "base_semantics",
    "head_semantics",
    "base_reason",
    "head_reason",
    "verdict",
)

# Payload carried from each side into the comparison, renamed base_* / head_*.
_SIDE_COLUMNS = (
    "commit",
    "value",
    "status",
    "samples",
    "ci_lo",
    "ci_hi",
    "q25",
    "q75",
    "semantics",
    "reason",
    "capped",
)


# ---------------------------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------------------------


def compare(
    base: pd.DataFrame,
    head: pd.DataFrame,
    *,
    alpha: float = ALPHA,
    min_effect: float = ASV_MIN_EFFECT,
    min_abs_seconds: float = 0.0,
    key_columns: Collection[str] | None = None,
    higher_is_better: Collection[str] = HIGHER_IS_BETTER,
    delta: float | None = None,
    equivalence_alpha: float = EQUIVALENCE_ALPHA,
) -> pd.DataFrame:
    """Compare each point of ``head`` with the same point of ``base``.

    Parameters
    ----------
    base, head : DataFrame
        Results frames, each holding one side (one row per key).
    alpha : float
        Significance level of the Mann-Whitney U test (:data:`ALPHA`, asv's 0.002).
    min_effect : float
        Smallest relative change that counts: slower iff significant and
        ``ratio > 1 + min_effect``; faster iff significant and
        ``ratio < 1 / (1 + min_effect)`` (mirrored for ``higher_is_better`` metrics).
        Default :data:`ASV_MIN_EFFECT`; the paired sign-off passes :data:`PAIRED_MIN_EFFECT`.
    min_abs_seconds : float
        For points in a time unit (:data:`TIME_UNITS`): a change of at most this many seconds
        is never slower or faster, whatever its ratio and significance. 0 (default) disables it; the
        paired sign-off passes :data:`PAIRED_MIN_ABS_SECONDS`.
    key_columns : collection of str, optional
        Columns that identify a point. Default: machine, benchmark, every parameter column
        (the known ones and any extra axis present in both frames).
    higher_is_better : collection of str
        Metric names (method names) where a larger value is better.
    delta : float, optional
        Equivalence margin of ``same`` (relative; default ``min_effect``), widened to
        ``min_abs_seconds`` for time points (:func:`.verdict.four_way`).
    equivalence_alpha : float
        Level of each one-sided test of the equivalence (:data:`EQUIVALENCE_ALPHA`).

    Returns
    -------
    DataFrame
        The key columns, then :data:`VERDICT_COLUMNS`; ``verdict`` is one of :data:`VERDICTS`
        (see the module docstring for the strict ones): a compared point is ``slower``,
        ``faster``, ``same`` or ``inconclusive`` (:func:`.verdict.four_way`). ``ratio`` is always
        head / base.
        Thresholds are kept in ``.attrs["thresholds"]`` for the report.

    Raises
    ------
    ValueError
        If ``base`` or ``head`` has more than one row for a key (e.g. two commits).
    """
    key = list(key_columns) if key_columns is not None else default_key(base, head)
    delta = min_effect if delta is None else delta
    pairs = _pair(base, head, key)
    verdicts = _judge(pairs, key, alpha, min_effect, min_abs_seconds, higher_is_better, delta, equivalence_alpha)
    verdicts.attrs["thresholds"] = {
        "alpha": alpha,
        "min_effect": min_effect,
        "min_abs_seconds": min_abs_seconds,
        "delta": delta,
        "equivalence_alpha": equivalence_alpha,
    }
    return verdicts


def compare_variants(
    df: pd.DataFrame,
    base_subject: str,
    head_subject: str,
    *,
    alpha: float = ALPHA,
    min_effect: float = ASV_MIN_EFFECT,
    min_abs_seconds: float = 0.0,
    key_columns: Collection[str] | None = None,
    higher_is_better: Collection[str] = HIGHER_IS_BETTER,
) -> pd.DataFrame:
    """Compare two subjects within one frame (``specsample signoff --results mrv2-pre50939 mrv2``).

    Rows are paired on every key column except ``subject``, plus ``commit``, so each pair was
    measured in the same run; the output keeps ``commit`` as a key column. ``ratio`` is
    head_subject / base_subject; ``base_subject`` and ``head_subject`` columns are added after
    the key. Other arguments as in :func:`compare` (the defaults are the separate-process ones).
    """
    if key_columns is None:
        key = [c for c in default_key(df, df) if c != "subject"] + ["commit"]
    else:
        key = [c for c in key_columns if c != "subject"]
    base = df[df["subject"] == base_subject]
    head = df[df["subject"] == head_subject]
    verdicts = compare(
        base,
        head,
        alpha=alpha,
        min_effect=min_effect,
        min_abs_seconds=min_abs_seconds,
        key_columns=key,
        higher_is_better=higher_is_better,
    )
    verdicts.insert(len(key), "base_subject", base_subject)
    verdicts.insert(len(key) + 1, "head_subject", head_subject)
    return verdicts


def default_key(base: pd.DataFrame, head: pd.DataFrame) -> list[str]:
    """machine, benchmark, the known parameter columns, then extra parameter axes in both."""
    extras = [c for c in base.columns if c not in COLUMNS and c in head.columns]
    # the path axes where both frames have them (a frame built before them has none)
    params = [c for c in PARAM_COLUMNS if c not in PATH_AXES or (c in base.columns and c in head.columns)]
    return ["machine", "benchmark", *params, *extras]


def newest_commit_with(df: pd.DataFrame, subjects: Collection[str]) -> str | None:
    """The newest commit (by date) of ``df`` that has rows for every one of ``subjects``, or
    ``None``: what ``--results`` compares by default."""
    if df.empty:
        return None
    wanted = set(subjects)
    has_all = df.groupby("commit")["subject"].agg(lambda s: wanted <= set(s))
    candidates = df[df["commit"].isin(set(has_all[has_all].index))]
    if candidates.empty:
        return None
    return str(candidates.sort_values(["date", "commit"], kind="stable")["commit"].iloc[-1])


def _pair(base: pd.DataFrame, head: pd.DataFrame, key: list[str]) -> pd.DataFrame:
    """Outer join of the two sides on key; payload columns prefixed base_ / head_."""
    sides = []
    for name, side in (("base", base), ("head", head)):
        duplicated = side.duplicated(key)
        if duplicated.any():
            raise ValueError(
                f"{name} has {int(duplicated.sum())} rows sharing a key on {key}; "
                f"select one commit (and env) per machine before comparing"
            )
        payload = [c for c in _SIDE_COLUMNS if c in side.columns and c not in key]
        labels = [c for c in ("metric", "unit") if c in side.columns and c not in key]
        renamed = side[key + labels + payload].rename(columns={c: f"{name}_{c}" for c in labels + payload})
        sides.append(renamed)
    pairs = sides[0].merge(sides[1], on=key, how="outer", indicator=True, sort=False)
    # metric and unit describe the point, not a side: head's, or base's for a missing point.
    for label in ("metric", "unit"):
        if f"head_{label}" in pairs:
            pairs[label] = pairs[f"head_{label}"].fillna(pairs[f"base_{label}"])
    return pairs


def _column(pairs: pd.DataFrame, name: str, dtype: str = "str") -> pd.Series:
    """A payload column of the pairs, all-missing where neither side had it."""
    if name in pairs:
        return pairs[name].astype(dtype) if dtype != "object" else pairs[name]
    return pd.Series(pd.array([None] * len(pairs), dtype=dtype), index=pairs.index)


def _flag(pairs: pd.DataFrame, name: str) -> pd.Series:
    """A boolean payload column, False where missing."""
    if name not in pairs:
        return pd.Series(False, index=pairs.index)
    return pairs[name].map(lambda v: bool(v) if v is not None and v is not pd.NA and v == v else False).astype(bool)


def _judge(
    pairs: pd.DataFrame,
    key: list[str],
    alpha: float,
    min_effect: float,
    min_abs_seconds: float,
    higher_is_better: Collection[str],
    delta: float,
    equivalence_alpha: float,
) -> pd.DataFrame:
    out = pairs[key].copy()
    out["metric"] = pairs.get("metric")
    out["unit"] = pairs.get("unit")
    # compare_variants keys on commit, so both sides share the key column instead.
    out["base_commit"] = pairs["base_commit"] if "base_commit" in pairs else pairs.get("commit")
    out["head_commit"] = pairs["head_commit"] if "head_commit" in pairs else pairs.get("commit")
    out["base_status"] = _column(pairs, "base_status")
    out["head_status"] = _column(pairs, "head_status")
    out["base_value"] = pairs["base_value"].astype("float64")
    out["head_value"] = pairs["head_value"].astype("float64")
    out["ratio"] = out["head_value"] / out["base_value"]
    tests = [significance(row, alpha) for row in pairs.itertuples(index=False)]
    out["p_value"] = np.array([t[0] for t in tests], dtype="float64")
    out["test"] = pd.array([t[1] for t in tests], dtype="str")
    out["significant"] = np.array([t[2] for t in tests], dtype=bool)
    out["base_rel_iqr"] = relative_iqr(_side(pairs, "base"))
    out["head_rel_iqr"] = relative_iqr(_side(pairs, "head"))
    for column in ("semantics", "reason"):
        for side in ("base", "head"):
            out[f"{side}_{column}"] = _column(pairs, f"{side}_{column}")
    per_unit = pd.to_numeric(out["unit"].map(TIME_UNITS), errors="coerce") if "unit" in out else np.nan
    per_unit = pd.Series(per_unit, index=out.index) if np.isscalar(per_unit) else per_unit
    capped = _flag(pairs, "base_capped") | _flag(pairs, "head_capped")
    verdicts, equivalence_p = [], []
    for i, row in enumerate(pairs.itertuples(index=False)):
        status = _status_verdict(
            pairs["_merge"].iat[i],
            out["base_status"].iat[i],
            out["head_status"].iat[i],
            out["base_semantics"].iat[i],
            out["head_semantics"].iat[i],
            out["ratio"].iat[i],
        )
        if status is not None:
            verdicts.append(status)
            equivalence_p.append(math.nan)
            continue
        unit_seconds = per_unit.iat[i]
        verdict, p_eq = four_way(
            finite_samples(getattr(row, "base_samples", None)),
            finite_samples(getattr(row, "head_samples", None)),
            base_value=out["base_value"].iat[i],
            head_value=out["head_value"].iat[i],
            significant=bool(out["significant"].iat[i]),
            min_effect=min_effect,
            delta=delta,
            min_abs=min_abs_seconds / unit_seconds if is_finite(unit_seconds) else 0.0,
            higher_is_better=out["metric"].iat[i] in higher_is_better,
            equivalence_alpha=equivalence_alpha,
            ci=tuple(getattr(row, f"{s}_{c}", math.nan) for s in ("base", "head") for c in ("ci_lo", "ci_hi")),
            capped=bool(capped.iat[i]),
        )
        verdicts.append(verdict)
        equivalence_p.append(p_eq)
    out["equivalence_p"] = np.array(equivalence_p, dtype="float64")
    out["capped"] = capped.to_numpy(dtype=bool)
    out["verdict"] = pd.array(verdicts, dtype="str")
    out = out[[*key, *VERDICT_COLUMNS]]
    return out.reset_index(drop=True)


def _side(pairs: pd.DataFrame, name: str) -> pd.DataFrame:
    """One side's payload under the results-frame names, for relative_iqr."""
    columns = {f"{name}_{c}": c for c in ("value", "q25", "q75", "samples")}
    return pairs[[c for c in columns if c in pairs]].rename(columns=columns)


def _status_verdict(
    merge: str,
    base_status: object,
    head_status: object,
    base_semantics: object,
    head_semantics: object,
    ratio: float,
) -> str | None:
    """A point's verdict when it was not compared (the order of the checks is the precedence,
    module docstring), or ``None`` when both sides measured it and :func:`.verdict.four_way`
    judges it."""
    if merge == "left_only":
        return "missing"
    if merge == "right_only":
        return "new"
    statuses = (base_status, head_status)
    if "crashed" in statuses:
        return "crashed"
    if "failed" in statuses:
        return "failed"
    if base_status == "skipped" and head_status == "skipped":
        return "skipped"
    if head_status == "skipped":
        return "missing"  # head stopped running a point base measured
    if base_status == "skipped":
        return "new"
    if base_status != "ok" or head_status != "ok" or not np.isfinite(ratio):
        return "failed"  # a status outside the contract, or an ok point without a value
    if head_semantics == VIOLATES and base_semantics != VIOLATES:
        return "violation"
    return None


def compare_samples(
    base_samples,
    head_samples,
    *,
    alpha: float = ALPHA,
    min_effect: float = PAIRED_MIN_EFFECT,
    min_abs: float = PAIRED_MIN_ABS_SECONDS,
    delta: float | None = None,
    equivalence_alpha: float = EQUIVALENCE_ALPHA,
    capped: bool = False,
) -> dict:
    """One pair of sample lists (seconds, lower is better) judged as :func:`compare` judges a
    point: ``{"verdict", "ratio", "p_value", "equivalence_p", "test"}``. For callers that hold
    samples, not frames (``specsample bisect``)."""
    a, b = finite_samples(list(base_samples)), finite_samples(list(head_samples))
    if a is None or b is None:
        raise ValueError("compare_samples: both sides need samples")
    base_value, head_value = float(np.median(a)), float(np.median(b))
    if min_p_value(len(a), len(b)) < alpha:
        p, test = float(scipy_stats.mannwhitneyu(a, b, alternative="two-sided").pvalue), "mann-whitney"
        significant = p < alpha
    else:
        (base_lo, base_hi), (head_lo, head_hi) = median_ci(a), median_ci(b)
        p, test = math.nan, "ci-overlap"
        significant = not (base_hi >= head_lo and base_lo <= head_hi)
    verdict, p_eq = four_way(
        a,
        b,
        base_value=base_value,
        head_value=head_value,
        significant=significant,
        min_effect=min_effect,
        delta=min_effect if delta is None else delta,
        min_abs=min_abs,
        equivalence_alpha=equivalence_alpha,
        capped=capped,
    )
    return {"verdict": verdict, "ratio": head_value / base_value, "p_value": p, "equivalence_p": p_eq, "test": test}


# ---------------------------------------------------------------------------------------------
# Counts and exit code
# ---------------------------------------------------------------------------------------------


def counts(verdicts: pd.DataFrame) -> dict[str, int]:
    """Points per verdict, every one of :data:`VERDICTS` present (0 where none)."""
    found = verdicts["verdict"].value_counts() if "verdict" in verdicts else pd.Series(dtype=int)
    return {v: int(found.get(v, 0)) for v in VERDICTS}


def exit_code(verdicts: pd.DataFrame, *, allow_missing: bool = False, fail_on_inconclusive: bool = False) -> int:
    """0 pass, 1 a point slower (a regression), 2 not verified (takes precedence over slower).

    2 when: a point crashed, failed or violates placeholder semantics at head only
    (:data:`FAILED_VERDICTS`); a point is one-sided (:data:`ONE_SIDED_VERDICTS`) and
    ``allow_missing`` is false; or no point was compared at all (an empty comparison, usually
    a wrong commit or subject, or every point skipped or one-sided); with
    ``fail_on_inconclusive``, a point ``inconclusive`` and none slower.
    """
    n = counts(verdicts)
    if any(n[v] for v in FAILED_VERDICTS):
        return 2
    if not allow_missing and any(n[v] for v in ONE_SIDED_VERDICTS):
        return 2
    if not any(n[v] for v in COMPARED_VERDICTS):
        return 2
    if n["slower"]:
        return 1
    if fail_on_inconclusive and n["inconclusive"]:
        return 2
    return 0
