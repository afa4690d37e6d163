"""Sign-off: is head slower than base? Pure functions on the results frame.

Every function takes frames shaped like :func:`specsample.results.load_results` output (select
the base and head commits first) and returns a frame or a value; nothing here reads files or
parses arguments (``cli.py`` does). Thresholds are keyword arguments.

The test mirrors ``asv continuous`` (asv 0.6.6, ``asv/_stats.py: is_different``): a two-sided
Mann-Whitney U on the recorded samples when the sample sizes can reach ``p < alpha`` at all,
otherwise non-overlapping 99% confidence intervals; ``track_*`` points have neither and are
judged on the ratio alone, as ``asv compare`` does. A point is a regression only if the change
is significant *and* larger than ``min_effect``: statistically real shifts smaller than the
measurement's drift are not worth blocking a PR over.

Two defaults for ``min_effect``, because the drift depends on how the two sides were measured:

* :data:`PAIRED_MIN_EFFECT` = 2% for ``specsample signoff BASE HEAD``
  (:mod:`specsample.track.signoff.paired`): base and head timed in one process on the same inputs, samples
  alternated ABBA, so clock drift cancels and an A/A run is expected to differ by well under
  1%. 2% sits above that noise floor with margin and well below the 5% slowdown the sign-off
  must catch (a 5% regression clears it by 3 points; significance comes from 30 samples a
  side). Validated by ``specsample signoff validate`` (A/A runs and planted 3/5/10%
  slowdowns, the residual-mass kernel's test-only ``ballast_iters``).
* :data:`ASV_MIN_EFFECT` = 5% (asv's own) for results measured in separate processes (committed
  asv results, ``--variants``): there the same kernel differs by up to ~6% between processes on
  the H200, so a smaller threshold would flag noise.

Time points must also move by more than ``min_abs_seconds`` (:data:`PAIRED_MIN_ABS_SECONDS` =
0.5 us for the paired sign-off). Base and head run on separate buffers and graph instances,
and that placement alone offsets a point by a roughly constant few hundred nanoseconds: in
the H200 validation of the whole quick tier (5 A/A runs, 90 points) the same code differed by
up to 0.39 us, 3.2% of an 11.9 us point, at p < 1e-8, while no point of 30 us or more moved
by 1.4%. A relative threshold alone therefore cries wolf on the smallest points only.
"""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping

import numpy as np
import pandas as pd
from scipy import stats

from ...schema import SYMBOLS
from ..results import COLUMNS, PARAM_COLUMNS

# ---------------------------------------------------------------------------------------------
# Contract
# ---------------------------------------------------------------------------------------------

# Every verdict compare() can return. Beyond regression / improvement / unchanged / failed:
# "skipped" when head skipped the point (NotImplementedError in setup), "new" when head has a
# value but base has none to compare with, "missing" when the point disappeared from head.
VERDICTS: tuple[str, ...] = (
    "regression", "improvement", "unchanged", "failed", "skipped", "new", "missing",
)

# How significance was decided for a point.
TESTS: tuple[str, ...] = ("mann-whitney", "ci-overlap", "ratio-only", "none")

# min_effect defaults (module docstring): paired in-process sign-off, separate-process results.
PAIRED_MIN_EFFECT = 0.02
ASV_MIN_EFFECT = 0.05
# Absolute floor for time points of the paired sign-off (module docstring); 0 disables it.
PAIRED_MIN_ABS_SECONDS = 0.5e-6
# Time units a point's change can be measured in, as seconds per unit.
TIME_UNITS: dict[str, float] = {"seconds": 1.0, "s": 1.0, "ms": 1e-3, "us": 1e-6, "µs": 1e-6, "ns": 1e-9}

# Metrics where a larger value is better. asv itself assumes lower is better for everything,
# which would flag a rise in achieved bandwidth as a regression.
HIGHER_IS_BETTER: tuple[str, ...] = ("track_bandwidth_fraction",)

# Columns compare() adds after the key columns.
VERDICT_COLUMNS: tuple[str, ...] = (
    "metric", "unit", "base_commit", "head_commit", "base_value", "head_value", "ratio",
    "p_value", "test", "significant", "base_rel_iqr", "head_rel_iqr", "verdict",
)

# Payload carried from each side into the comparison, renamed base_* / head_*.
_SIDE_COLUMNS = ("commit", "value", "status", "samples", "ci_lo", "ci_hi", "q25", "q75")

# Short labels for the markdown tables; the frame keeps the full names.
_PARAM_LABELS = {k: v for k, v in SYMBOLS.items() if k != "placeholder_pattern"}


# ---------------------------------------------------------------------------------------------
# Comparison
# ---------------------------------------------------------------------------------------------


def compare(
    base: pd.DataFrame,
    head: pd.DataFrame,
    *,
    alpha: float = 0.002,
    min_effect: float = ASV_MIN_EFFECT,
    min_abs_seconds: float = 0.0,
    key_columns: Collection[str] | None = None,
    higher_is_better: Collection[str] = HIGHER_IS_BETTER,
) -> pd.DataFrame:
    """Compare each point of ``head`` with the same point of ``base``.

    Parameters
    ----------
    base, head : DataFrame
        Results frames, each holding one commit (one row per key).
    alpha : float
        Significance level of the Mann-Whitney U test (asv's default 0.002).
    min_effect : float
        Smallest relative change that counts: regression iff significant and
        ``ratio > 1 + min_effect``; improvement iff significant and
        ``ratio < 1 / (1 + min_effect)`` (mirrored for ``higher_is_better`` metrics).
    min_abs_seconds : float
        For points in a time unit (:data:`TIME_UNITS`): a change of at most this many seconds
        is ``unchanged`` whatever its ratio and significance. 0 (default) disables it.
    key_columns : collection of str, optional
        Columns that identify a point. Default: machine, benchmark, every parameter column
        (the known ones and any extra axis present in both frames).
    higher_is_better : collection of str
        Metric names (method names) where a larger value is better.

    Returns
    -------
    DataFrame
        The key columns, then :data:`VERDICT_COLUMNS`. ``ratio`` is always head / base.
        Thresholds are kept in ``.attrs["thresholds"]`` for :func:`report_markdown`.

    Raises
    ------
    ValueError
        If ``base`` or ``head`` has more than one row for a key (e.g. two commits).
    """
    key = list(key_columns) if key_columns is not None else default_key(base, head)
    pairs = _pair(base, head, key)
    verdicts = _judge(pairs, key, alpha, min_effect, min_abs_seconds, higher_is_better)
    verdicts.attrs["thresholds"] = {"alpha": alpha, "min_effect": min_effect, "min_abs_seconds": min_abs_seconds}
    return verdicts


def compare_variants(
    df: pd.DataFrame,
    base_variant: str,
    head_variant: str,
    *,
    alpha: float = 0.002,
    min_effect: float = ASV_MIN_EFFECT,
    min_abs_seconds: float = 0.0,
    key_columns: Collection[str] | None = None,
    higher_is_better: Collection[str] = HIGHER_IS_BETTER,
) -> pd.DataFrame:
    """Compare two variants within one frame (e.g. ``"mrv2-pre50939"`` vs ``"mrv2"``).

    Rows are paired on every key column except ``variant``, plus ``commit``, so each pair was
    measured in the same run. ``ratio`` is head_variant / base_variant; ``base_variant`` and
    ``head_variant`` columns are added. Other arguments as in :func:`compare`.
    """
    if key_columns is None:
        key = [c for c in default_key(df, df) if c != "subject"] + ["commit"]
    else:
        key = [c for c in key_columns if c != "subject"]
    base = df[df["subject"] == base_variant]
    head = df[df["subject"] == head_variant]
    verdicts = compare(base, head, alpha=alpha, min_effect=min_effect, min_abs_seconds=min_abs_seconds,
                       key_columns=key, higher_is_better=higher_is_better)  # fmt: skip
    verdicts.insert(len(key), "base_variant", base_variant)
    verdicts.insert(len(key) + 1, "head_variant", head_variant)
    return verdicts


def default_key(base: pd.DataFrame, head: pd.DataFrame) -> list[str]:
    """machine, benchmark, the known parameter columns, then extra parameter axes in both."""
    extras = [c for c in base.columns if c not in COLUMNS and c in head.columns]
    return ["machine", "benchmark", *PARAM_COLUMNS, *extras]


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
        renamed = side[key + labels + payload].rename(columns={c: f"{name}_{c}" for c in
                                                               labels + payload})
        sides.append(renamed)
    pairs = sides[0].merge(sides[1], on=key, how="outer", indicator=True, sort=False)
    # metric and unit describe the point, not a side: head's, or base's for a missing point.
    for label in ("metric", "unit"):
        if f"head_{label}" in pairs:
            pairs[label] = pairs[f"head_{label}"].fillna(pairs[f"base_{label}"])
    return pairs


def _judge(
    pairs: pd.DataFrame,
    key: list[str],
    alpha: float,
    min_effect: float,
    min_abs_seconds: float,
    higher_is_better: Collection[str],
) -> pd.DataFrame:
    out = pairs[key].copy()
    out["metric"] = pairs.get("metric")
    out["unit"] = pairs.get("unit")
    # compare_variants keys on commit, so both sides share the key column instead.
    out["base_commit"] = pairs["base_commit"] if "base_commit" in pairs else pairs.get("commit")
    out["head_commit"] = pairs["head_commit"] if "head_commit" in pairs else pairs.get("commit")
    out["base_value"] = pairs["base_value"].astype("float64")
    out["head_value"] = pairs["head_value"].astype("float64")
    out["ratio"] = out["head_value"] / out["base_value"]
    tests = [_significance(row, alpha) for row in pairs.itertuples(index=False)]
    out["p_value"] = np.array([t[0] for t in tests], dtype="float64")
    out["test"] = pd.array([t[1] for t in tests], dtype="str")
    out["significant"] = np.array([t[2] for t in tests], dtype=bool)
    out["base_rel_iqr"] = relative_iqr(_side(pairs, "base"))
    out["head_rel_iqr"] = relative_iqr(_side(pairs, "head"))
    # Below the absolute floor: a time point whose change is at most min_abs_seconds.
    per_unit = pd.to_numeric(out["unit"].map(TIME_UNITS), errors="coerce") if "unit" in out else np.nan
    change_seconds = (out["head_value"] - out["base_value"]).abs() * per_unit
    tiny = (change_seconds <= min_abs_seconds).fillna(False).to_numpy(dtype=bool) & (min_abs_seconds > 0)
    out["verdict"] = pd.array(
        [
            _verdict(merge, bs, hs, ratio, significant and not small, metric in higher_is_better, min_effect)
            for merge, bs, hs, ratio, significant, small, metric in zip(
                pairs["_merge"], pairs["base_status"], pairs["head_status"], out["ratio"],
                out["significant"], tiny, out["metric"],
            )
        ],
        dtype="str",
    )
    return out.reset_index(drop=True)


def _side(pairs: pd.DataFrame, name: str) -> pd.DataFrame:
    """One side's payload under the results-frame names, for relative_iqr."""
    columns = {f"{name}_{c}": c for c in ("value", "q25", "q75", "samples")}
    return pairs[[c for c in columns if c in pairs]].rename(columns=columns)


def _verdict(
    merge: str,
    base_status: object,
    head_status: object,
    ratio: float,
    significant: bool,
    higher_better: bool,
    min_effect: float,
) -> str:
    if merge == "left_only":
        return "missing"
    if head_status == "failed":
        return "failed"
    if head_status == "skipped":
        return "skipped"
    if merge == "right_only" or base_status != "ok" or not np.isfinite(ratio):
        return "new"
    slower = 1.0 / ratio if higher_better else ratio
    if significant and slower > 1.0 + min_effect:
        return "regression"
    if significant and slower < 1.0 / (1.0 + min_effect):
        return "improvement"
    return "unchanged"


# ---------------------------------------------------------------------------------------------
# Significance
# ---------------------------------------------------------------------------------------------


def _significance(row, alpha: float) -> tuple[float, str, bool]:
    """(p_value, test, significant) for one paired row."""
    if row.base_status != "ok" or row.head_status != "ok":
        return math.nan, "none", False
    a, b = _clean(getattr(row, "base_samples", None)), _clean(getattr(row, "head_samples", None))
    if a is not None and b is not None and min_p_value(len(a), len(b)) < alpha:
        p = float(stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)
        return p, "mann-whitney", p < alpha
    ci = [getattr(row, f"{s}_{c}", math.nan) for s in ("base", "head") for c in ("ci_lo", "ci_hi")]
    if all(_finite(x) for x in ci):
        base_lo, base_hi, head_lo, head_hi = ci
        overlap = base_hi >= head_lo and base_lo <= head_hi
        return math.nan, "ci-overlap", not overlap
    # track_* points: one number, no spread; asv compare judges them on the ratio alone.
    return math.nan, "ratio-only", True


def min_p_value(n_a: int, n_b: int) -> float:
    """Smallest two-sided exact Mann-Whitney p-value reachable with these sample sizes.

    With 5 samples a side it is 2 / C(10, 5) = 0.0079, so p < 0.002 is impossible and asv falls
    back to confidence intervals; we do the same rather than call everything unchanged.
    """
    if n_a == 0 or n_b == 0:
        return 1.0
    return min(1.0, 2.0 / math.comb(n_a + n_b, n_a))


def _clean(samples: object) -> np.ndarray | None:
    if not isinstance(samples, (list, tuple, np.ndarray)):
        return None
    arr = np.asarray(samples, dtype="float64")
    arr = arr[np.isfinite(arr)]
    return arr if arr.size else None


def _finite(x: object) -> bool:
    return x is not None and x is not pd.NA and np.isfinite(float(x))


# ---------------------------------------------------------------------------------------------
# Noise and exit code
# ---------------------------------------------------------------------------------------------


def relative_iqr(df: pd.DataFrame) -> pd.Series:
    """Per row (q75 - q25) / value; from the samples where asv stored no quartiles."""
    value = df["value"].astype("float64") if "value" in df else pd.Series(np.nan, df.index)
    q25 = df["q25"].astype("float64") if "q25" in df else pd.Series(np.nan, df.index)
    q75 = df["q75"].astype("float64") if "q75" in df else pd.Series(np.nan, df.index)
    if "samples" in df:
        from_samples = df["samples"].map(_sample_quartiles)
        q25 = q25.fillna(from_samples.map(lambda q: q[0]))
        q75 = q75.fillna(from_samples.map(lambda q: q[1]))
    return ((q75 - q25) / value).astype("float64")


def _sample_quartiles(samples: object) -> tuple[float, float]:
    arr = _clean(samples)
    if arr is None:
        return math.nan, math.nan
    q25, q75 = np.percentile(arr, [25, 75])
    return float(q25), float(q75)


def noise_level(df: pd.DataFrame) -> float:
    """Median relative IQR over the points that have a spread (time_* with stats or samples).

    A single number for "how noisy was this run": changes smaller than a few times this are not
    worth reading into. NaN when no point has a spread.
    """
    ok = df["status"] == "ok" if "status" in df else pd.Series(True, df.index)
    rel = relative_iqr(df[ok])
    rel = rel[np.isfinite(rel)]
    return float(rel.median()) if len(rel) else math.nan


def exit_code(verdicts: pd.DataFrame) -> int:
    """0 pass, 1 a regression, 2 a failed benchmark point (takes precedence: unverified).

    An empty comparison is 2 as well: nothing was verified (usually a wrong commit selected),
    and a gate must not pass on no data.
    """
    if verdicts.empty:
        return 2
    found = set(verdicts["verdict"])
    if "failed" in found:
        return 2
    if "regression" in found:
        return 1
    return 0


# ---------------------------------------------------------------------------------------------
# Markdown report
# ---------------------------------------------------------------------------------------------


def report_markdown(
    verdicts: pd.DataFrame,
    machine_info: Mapping[str, object] | None = None,
    *,
    max_rows: int = 40,
    title: str = "specsample sign-off",
) -> str:
    """A markdown report of :func:`compare` output, fit to paste into a PR.

    Parameters
    ----------
    verdicts : DataFrame
        Output of :func:`compare` or :func:`compare_variants`.
    machine_info : mapping, optional
        Keys among machine, gpu, driver, cuda, torch, triton (see
        :func:`specsample.results.machine_environment`); missing keys are left out.
    max_rows : int
        Rows shown per table; the rest are counted.
    title : str
        Heading.
    """
    counts = verdicts["verdict"].value_counts()
    sections = [
        f"## {title}",
        _summary_line(verdicts, counts),
        _thresholds_line(verdicts),
        _table_section("Regressions", verdicts, "regression", max_rows, ascending=False),
        _table_section("Improvements", verdicts, "improvement", max_rows, ascending=True),
        _failed_section(verdicts, max_rows),
        _counts_line(counts),
        _noise_line(verdicts),
        _machine_line(machine_info),
    ]
    return "\n\n".join(s for s in sections if s) + "\n"


def _summary_line(verdicts: pd.DataFrame, counts: pd.Series) -> str:
    n_reg, n_fail = int(counts.get("regression", 0)), int(counts.get("failed", 0))
    code = exit_code(verdicts)
    status = {0: "PASS", 1: "FAIL", 2: "FAIL"}[code]
    what = []
    if n_reg:
        what.append(f"{n_reg} regression{'s' * (n_reg != 1)}")
    if n_fail:
        what.append(f"{n_fail} failed point{'s' * (n_fail != 1)}")
    if verdicts.empty:
        return "**FAIL**: no points to compare (check the selected commits)."
    if not what:
        what.append("no significant regression")
    commits = _commit_range(verdicts)
    return f"**{status}**: {', '.join(what)} out of {len(verdicts)} points{commits}."


def _commit_range(verdicts: pd.DataFrame) -> str:
    base = verdicts["base_commit"].dropna().unique()
    head = verdicts["head_commit"].dropna().unique()
    if len(base) == 1 and len(head) == 1 and base[0] != head[0]:
        return f" (base `{str(base[0])[:8]}` → head `{str(head[0])[:8]}`)"
    if "base_variant" in verdicts and len(verdicts):
        return (f" (`{verdicts['base_variant'].iloc[0]}` → "
                f"`{verdicts['head_variant'].iloc[0]}`)")
    return ""


def _thresholds_line(verdicts: pd.DataFrame) -> str:
    t = verdicts.attrs.get("thresholds")
    if not t:
        return ""
    floor = t.get("min_abs_seconds") or 0.0
    also = f" and by more than {floor * 1e6:g} µs for times" if floor > 0 else ""
    return (f"A regression is a change significant at p < {t['alpha']:g} (Mann-Whitney U, or "
            f"non-overlapping 99% CIs) and worse by more than {100 * t['min_effect']:g}%{also}.")


def _table_section(
    heading: str, verdicts: pd.DataFrame, verdict: str, max_rows: int, ascending: bool
) -> str:
    rows = verdicts[verdicts["verdict"] == verdict].sort_values("ratio", ascending=ascending)
    if rows.empty:
        return ""
    lines = [
        f"### {heading} ({len(rows)})",
        "",
        "| benchmark | point | base | head | change | p |",
        "|---|---|---:|---:|---:|---:|",
    ]
    for row in rows.head(max_rows).itertuples(index=False):
        lines.append(
            f"| `{row.benchmark}` | {_point_label(row)} | {format_value(row.base_value, row.unit)}"
            f" | {format_value(row.head_value, row.unit)} | {100 * (row.ratio - 1):+.1f}%"
            f" | {_format_p(row.p_value, row.test)} |"
        )
    if len(rows) > max_rows:
        lines.append(f"\n… and {len(rows) - max_rows} more.")
    return "\n".join(lines)


def _failed_section(verdicts: pd.DataFrame, max_rows: int) -> str:
    rows = verdicts[verdicts["verdict"] == "failed"]
    if rows.empty:
        return ""
    lines = [f"### Failed ({len(rows)})", ""]
    lines += [f"- `{r.benchmark}` {_point_label(r)}" for r in rows.head(max_rows).itertuples()]
    if len(rows) > max_rows:
        lines.append(f"- … and {len(rows) - max_rows} more.")
    return "\n".join(lines)


def _counts_line(counts: pd.Series) -> str:
    rest = [f"{v}: {int(counts.get(v, 0))}" for v in ("unchanged", "skipped", "new", "missing")]
    return "Unchanged and other points — " + ", ".join(rest) + "."


def _noise_line(verdicts: pd.DataFrame) -> str:
    rel = verdicts["head_rel_iqr"]
    rel = rel[np.isfinite(rel)]
    if rel.empty:
        return "Noise: no point recorded a spread (track_* only)."
    return (f"Noise: median relative IQR of head {100 * rel.median():.1f}% "
            f"over {len(rel)} points with samples or quartiles.")


def _machine_line(machine_info: Mapping[str, object] | None) -> str:
    if not machine_info:
        return ""
    labels = {"machine": "machine", "gpu": "GPU", "driver": "driver", "cuda": "CUDA",
              "torch": "torch", "triton": "triton"}
    parts = [f"{label} `{machine_info[k]}`" for k, label in labels.items()
             if _present(machine_info.get(k))]
    return "Machine: " + " · ".join(parts) if parts else ""


def _present(value: object) -> bool:
    return value is not None and value is not pd.NA and not (
        isinstance(value, float) and math.isnan(value))


def _point_label(row) -> str:
    parts = []
    for column in PARAM_COLUMNS:
        value = getattr(row, column, None)
        if _present(value):
            parts.append(f"{_PARAM_LABELS.get(column, '')}={value}" if column in _PARAM_LABELS
                         else str(value))
    return " ".join(parts)


def format_value(value: float, unit: object) -> str:
    """A value with its unit for humans: seconds scaled to ns/µs/ms, others as-is."""
    if not np.isfinite(value):
        return "n/a"
    if unit == "seconds":
        for scale, suffix in ((1e-6, "ns"), (1e-3, "µs"), (1.0, "ms")):
            if abs(value) < scale:
                return f"{value / scale * 1e3:.3g} {suffix}"
        return f"{value:.3g} s"
    return f"{value:.4g} {unit}" if _present(unit) else f"{value:.4g}"


def _format_p(p: float, test: str) -> str:
    if test == "mann-whitney":
        return f"{p:.1e}"
    return {"ci-overlap": "CI", "ratio-only": "—"}.get(test, "")
