"""Samples by noise target: keep sampling until the median is known well enough, or a time cap.

As nvbench does, a measurement does not take a fixed count of samples: it samples until the
relative half-width of the median's confidence interval (:func:`relative_halfwidth`) is under
a target (:data:`DEFAULT_NOISE_TARGET`, 0.5%), or until a time cap. A point that stops on the
cap is marked ``capped``; sign-off then calls it ``inconclusive`` unless it is clearly slower or
faster (:func:`specsample.track.signoff.verdict.four_way`), never ``same``.

No torch here; :func:`specsample.timing.interleave` calls :func:`reached`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy import stats as scipy_stats

DEFAULT_NOISE_TARGET = 0.005
DEFAULT_TIME_CAP_S = 20.0
CONFIDENCE = 0.99


def median_ci(samples, confidence: float = CONFIDENCE) -> tuple[float, float]:
    """Distribution-free confidence interval of the median: order statistics x_(j), x_(n+1-j)
    with j from the binomial(n, 1/2) quantile (the whole range when n is too small for it)."""
    x = np.sort(np.asarray(samples, dtype="float64"))
    n = len(x)
    if n == 0:
        return math.nan, math.nan
    j = max(int(scipy_stats.binom.ppf((1 - confidence) / 2, n, 0.5)), 1)
    return float(x[j - 1]), float(x[n - j])


def relative_halfwidth(samples: Sequence[float], confidence: float = CONFIDENCE) -> float:
    """Half the width of the median's confidence interval over the median (inf when empty)."""
    if len(samples) == 0:
        return math.inf
    lo, hi = median_ci(samples, confidence)
    median = float(np.median(np.asarray(samples, dtype="float64")))
    return (hi - lo) / 2.0 / abs(median) if median else math.inf


@dataclass(frozen=True)
class NoiseTarget:
    """When sampling stops: every subject's median known to ``target`` (relative half-width),
    after at least ``min_samples`` and at most ``max_samples`` each, or ``time_cap_s`` seconds."""

    target: float = DEFAULT_NOISE_TARGET
    time_cap_s: float = DEFAULT_TIME_CAP_S
    min_samples: int = 10
    max_samples: int = 2000

    def __post_init__(self) -> None:
        if not self.target > 0:
            raise ValueError(f"noise target: expected > 0, got {self.target}")
        if not self.time_cap_s > 0:
            raise ValueError(f"time cap: expected > 0 s, got {self.time_cap_s}")
        if self.min_samples < 1 or self.max_samples < self.min_samples:
            raise ValueError("min_samples, max_samples: expected 1 <= min_samples <= max_samples")

    def reached(self, samples: Sequence[float]) -> bool:
        """Whether one subject's kept ``samples`` meet the target."""
        return len(samples) >= self.min_samples and relative_halfwidth(samples) < self.target
