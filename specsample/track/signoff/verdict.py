"""The verdict of one point: significance, equivalence and the four-way verdict, and the spread.

The test mirrors ``asv continuous`` (asv 0.6.6, ``asv/_stats.py: is_different``): a two-sided
Mann-Whitney U on the recorded samples when the sample sizes can reach ``p < alpha`` at all,
otherwise non-overlapping 99% confidence intervals; ``track_*`` points have neither and are
judged on the ratio alone, as ``asv compare`` does (:func:`significance`). A point is ``slower``
(a regression) only if the change is significant *and* larger than ``min_effect``: statistically
real shifts smaller than the measurement's drift are not worth blocking a PR over. A point that
is neither slower nor faster is ``same`` only where two one-sided tests show it equivalent within
``±delta`` (:func:`equivalence_p`), and ``inconclusive`` otherwise (:func:`four_way`): "not
significant" and "shown unchanged" are different answers.

Pure functions of samples, stored statistics and thresholds; :mod:`.stats` pairs the two sides'
points and applies them.
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from scipy import stats as scipy_stats

# How significance was decided for a point.
TESTS: tuple[str, ...] = ("mann-whitney", "ci-overlap", "ratio-only", "none")

# Level of each one-sided test of the equivalence (TOST) behind "same": the usual 5%, i.e. a 90%
# interval of the shift inside the margin. "same" must be shown; failing to show it says
# "inconclusive", never "same".
EQUIVALENCE_ALPHA = 0.05


def four_way(
    base_samples: np.ndarray | None,
    head_samples: np.ndarray | None,
    *,
    base_value: float,
    head_value: float,
    significant: bool,
    min_effect: float,
    delta: float,
    min_abs: float = 0.0,
    higher_is_better: bool = False,
    equivalence_alpha: float = EQUIVALENCE_ALPHA,
    ci: tuple[float, float, float, float] = (math.nan,) * 4,
    capped: bool = False,
) -> tuple[str, float]:
    """``(verdict, equivalence p)`` of one point both sides measured: ``slower``, ``faster``,
    ``same`` or ``inconclusive``.

    * ``slower`` / ``faster``: the difference is significant (``significant``, the Mann-Whitney
      or CI test of :func:`significance`) and beyond ``min_effect`` and ``min_abs`` (in the
      point's unit), in the direction the metric counts as worse / better.
    * ``same``: head is shown equivalent to base within the margin ``m = max(delta * base,
      min_abs)`` by two one-sided tests (TOST): Mann-Whitney U of ``head - m`` below base and
      of ``head + m`` above base, each at ``equivalence_alpha``; the larger of the two p-values
      is returned. With too few samples for the tests, the 99% CIs of the two medians must lie
      within ``m`` of each other; with no samples at all (``track_*``), the ratio within
      ``1 ± delta``.
    * ``inconclusive``: neither shown; always when ``capped`` (a side stopped on the time cap
      before reaching its noise target) and the point is not slower or faster.
    """
    slower_ratio = (base_value / head_value) if higher_is_better else (head_value / base_value)
    beyond_abs = abs(head_value - base_value) > min_abs
    if significant and beyond_abs and slower_ratio > 1.0 + min_effect:
        return "slower", math.nan
    if significant and beyond_abs and slower_ratio < 1.0 / (1.0 + min_effect):
        return "faster", math.nan
    margin = max(delta * abs(base_value), min_abs)
    if base_samples is not None and head_samples is not None:
        n_a, n_b = len(base_samples), len(head_samples)
        if 2 * min_p_value(n_a, n_b) < 2 * equivalence_alpha:  # one-sided exact minimum is half
            p = equivalence_p(base_samples, head_samples, margin)
            shown = p < equivalence_alpha
            return ("inconclusive" if capped or not shown else "same"), p
    if all(is_finite(x) for x in ci):
        base_lo, base_hi, head_lo, head_hi = ci
        shown = max(head_hi - base_lo, base_hi - head_lo) <= margin
        return ("inconclusive" if capped or not shown else "same"), math.nan
    if base_samples is None and head_samples is None and not any(is_finite(x) for x in ci):
        # track_* points: one number each, judged on the ratio as asv compare does.
        return ("same" if abs(head_value - base_value) <= margin else "inconclusive"), math.nan
    return "inconclusive", math.nan


def equivalence_p(base_samples, head_samples, margin: float) -> float:
    """p-value of the two one-sided tests (TOST) that head's location is within ``margin`` of
    base's: the larger of Mann-Whitney U p(``head - margin`` < base) and p(``head + margin`` >
    base). Below a level, both shifts are rejected at that level: equivalence shown."""
    a = np.asarray(base_samples, dtype="float64")
    b = np.asarray(head_samples, dtype="float64")
    upper = scipy_stats.mannwhitneyu(b - margin, a, alternative="less").pvalue
    lower = scipy_stats.mannwhitneyu(b + margin, a, alternative="greater").pvalue
    return float(max(upper, lower))


# ---------------------------------------------------------------------------------------------
# Significance
# ---------------------------------------------------------------------------------------------


def significance(row, alpha: float) -> tuple[float, str, bool]:
    """(p_value, test, significant) for one paired row."""
    if getattr(row, "base_status", None) != "ok" or getattr(row, "head_status", None) != "ok":
        return math.nan, "none", False
    a, b = finite_samples(getattr(row, "base_samples", None)), finite_samples(getattr(row, "head_samples", None))
    if a is not None and b is not None and min_p_value(len(a), len(b)) < alpha:
        p = float(scipy_stats.mannwhitneyu(a, b, alternative="two-sided").pvalue)
        return p, "mann-whitney", p < alpha
    ci = [getattr(row, f"{s}_{c}", math.nan) for s in ("base", "head") for c in ("ci_lo", "ci_hi")]
    if all(is_finite(x) for x in ci):
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


def finite_samples(samples: object) -> np.ndarray | None:
    """A point's recorded samples as float64, less the non-finite ones; None when there are none."""
    if not isinstance(samples, (list, tuple, np.ndarray)):
        return None
    arr = np.asarray(samples, dtype="float64")
    arr = arr[np.isfinite(arr)]
    return arr if arr.size else None


def is_finite(x: object) -> bool:
    """A stored statistic that is present and finite (not None, NA or NaN)."""
    return x is not None and x is not pd.NA and np.isfinite(float(x))


# ---------------------------------------------------------------------------------------------
# Spread
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
    arr = finite_samples(samples)
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
