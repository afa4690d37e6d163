"""Goodness-of-fit checks shared by the distribution tests (spec section 7's chi-square, with
bins of expected count < 5 merged). The threshold is the spec's ``df + 10 sqrt(2 df)`` (about
10 sigma), raised where needed so that a correct sampler fails a check with probability at most
``FALSE_FAILURE``."""

from __future__ import annotations

import math
from functools import lru_cache

import torch

FALSE_FAILURE = 1e-7  # per check


def _chi2_sf(x: float, df: int) -> float:
    """P(chi2_df > x)."""
    a = torch.tensor(df / 2, dtype=torch.float64)
    return float(torch.special.gammaincc(a, torch.tensor(x / 2, dtype=torch.float64)))


def _chi2_isf(alpha: float, df: int) -> float:
    """The x with P(chi2_df > x) = alpha, by bisection."""
    lo, hi = 0.0, df + 100.0 * math.sqrt(2 * df) + 100.0
    for _ in range(200):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if _chi2_sf(mid, df) > alpha else (lo, mid)
    return hi


@lru_cache(maxsize=None)
def chi2_threshold(df: int) -> float:
    """The spec's ``df + 10 sqrt(2 df)``, raised to the 1 - FALSE_FAILURE quantile if lower."""
    return max(df + 10 * math.sqrt(2 * df), _chi2_isf(FALSE_FAILURE, df))


def assert_follows(samples: torch.Tensor, probs: torch.Tensor, what: str) -> None:
    """Chi-square goodness of fit of integer ``samples`` in ``[0, len(probs))`` to ``probs``."""
    samples = samples.flatten().long().cpu()
    n = samples.numel()
    if n == 0:
        return
    bins = probs.numel()
    assert int(samples.min()) >= 0 and int(samples.max()) < bins, f"{what}: sample out of range"
    observed = torch.bincount(samples, minlength=bins).double()
    expected = probs.double().cpu() * n
    impossible = (expected == 0) & (observed > 0)
    assert not impossible.any(), f"{what}: zero-probability values {impossible.nonzero().flatten().tolist()} drawn"
    small = expected < 5
    obs, exp = observed[~small], expected[~small]
    if small.any() and expected[small].sum() > 0:
        other_obs, other_exp = observed[small].sum(), expected[small].sum()
        if other_exp >= 5 or obs.numel() == 0:
            obs, exp = torch.cat([obs, other_obs[None]]), torch.cat([exp, other_exp[None]])
        else:  # the "other" bin is itself too small: fold it into the smallest kept bin
            j = int(exp.argmin())
            obs[j] += other_obs
            exp[j] += other_exp
    df = obs.numel() - 1
    if df < 1:
        return
    stat = float(((obs - exp) ** 2 / exp).sum())
    threshold = chi2_threshold(df)
    assert stat < threshold, (
        f"{what}: chi2 = {stat:.1f} >= {threshold:.1f} (df = {df}, n = {n}, "
        f"p = {_chi2_sf(stat, df):.1e}); observed {obs.tolist()} expected {[round(e, 1) for e in exp.tolist()]}"
    )
