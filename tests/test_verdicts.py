"""The four-way verdict (specsample.track.signoff.verdict.four_way) against known distributions:
how often each verdict comes out when the truth is known."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from specsample.track.signoff import stats
from specsample.track.signoff.stats import compare_samples
from specsample.track.signoff.verdict import EQUIVALENCE_ALPHA, equivalence_p

TRIALS = 200


def _draw(rng, shift, sigma, n=30, median=50e-6):
    return median * (1 + shift) * np.exp(rng.normal(0.0, sigma, n))


def _rates(shift, sigma, n=30, **kwargs):
    rng = np.random.default_rng(abs(hash((shift, sigma, n))) % 2**32)
    verdicts = [
        compare_samples(_draw(rng, 0.0, sigma, n), _draw(rng, shift, sigma, n), min_abs=0.0, **kwargs)["verdict"]
        for _ in range(TRIALS)
    ]
    return pd.Series(verdicts).value_counts(normalize=True).to_dict()


def test_identical_quiet_distributions_are_shown_the_same():
    rates = _rates(0.0, 0.003)
    assert rates.get("same", 0) >= 0.97 and rates.get("slower", 0) <= 0.01


def test_a_5_percent_slowdown_is_slower_and_a_speedup_faster():
    assert _rates(0.05, 0.003).get("slower", 0) >= 0.99
    assert _rates(-0.05, 0.003).get("faster", 0) >= 0.99


def test_a_change_inside_the_margin_is_the_same_not_slower():
    rates = _rates(0.008, 0.003)  # significant, but under min_effect = 2% and within delta
    assert rates.get("slower", 0) == 0 and rates.get("same", 0) >= 0.95


def test_noise_too_large_to_tell_is_inconclusive_not_the_same():
    rates = _rates(0.0, 0.15)
    assert rates.get("inconclusive", 0) >= 0.9 and rates.get("same", 0) <= 0.05


def test_equivalence_test_holds_its_level_at_the_margin():
    # True shift exactly at the margin: "same" must be shown at most ~5% of the time.
    rng = np.random.default_rng(11)
    margin, shown = 0.02 * 50e-6, 0
    for _ in range(400):
        a = 50e-6 + rng.normal(0, 1e-6, 30)
        b = 50e-6 + margin + rng.normal(0, 1e-6, 30)
        shown += equivalence_p(a, b, margin) < EQUIVALENCE_ALPHA
    assert shown / 400 <= 0.08


def test_a_capped_point_is_never_the_same():
    rng = np.random.default_rng(2)
    a, b = _draw(rng, 0.0, 0.003), _draw(rng, 0.0, 0.003)
    assert compare_samples(a, b, min_abs=0.0)["verdict"] == "same"
    assert compare_samples(a, b, min_abs=0.0, capped=True)["verdict"] == "inconclusive"
    assert compare_samples(a, _draw(rng, 0.05, 0.003), min_abs=0.0, capped=True)["verdict"] == "slower"


def test_summary_counts_each_verdict_and_inconclusive_fails_only_on_request():
    frame = pd.DataFrame({"verdict": ["same", "faster", "inconclusive", "same"]})
    n = stats.counts(frame)
    assert (n["same"], n["faster"], n["inconclusive"], n["slower"]) == (2, 1, 1, 0)
    assert stats.exit_code(frame) == 0 and stats.exit_code(frame, fail_on_inconclusive=True) == 2
    slower = pd.DataFrame({"verdict": ["slower", "inconclusive"]})
    assert stats.exit_code(slower) == 1 and stats.exit_code(slower, fail_on_inconclusive=True) == 1


@pytest.mark.parametrize("capped, verdict", [(False, "same"), (True, "inconclusive")])
def test_compare_reads_the_capped_column(capped, verdict):
    rng = np.random.default_rng(4)

    def side(samples, env):
        return pd.DataFrame(
            [
                {
                    "machine": "m",
                    "benchmark": "b",
                    "metric": "time_sample",
                    "unit": "seconds",
                    "status": "ok",
                    "value": float(np.median(samples)),
                    "samples": list(samples),
                    "capped": capped,
                    "env": env,
                }
            ]
        )

    out = stats.compare(
        side(_draw(rng, 0, 0.003), "b"), side(_draw(rng, 0, 0.003), "h"), key_columns=["machine", "benchmark"]
    )
    assert out.verdict.tolist() == [verdict] and bool(out.capped.iloc[0]) == capped
