"""scripts/issue7_goals.py: issue 7's ratios from the results DataFrame, on a hand-made frame
whose answers are known."""

from __future__ import annotations

import pandas as pd
import pytest
from script_loader import script_module

BASE = dict(num_reqs=128, K=4, vocab_size=151936, pattern="trailing", draft="logits")


@pytest.fixture(scope="module")
def script():
    with script_module("issue7_goals") as module:
        yield module


def _frame() -> pd.DataFrame:
    rows = []

    def add(metric, sweep, variant, value, **point):
        rows.append(dict(dict(BASE, mode="standard", phi=0.0), metric=metric, sweep=sweep, variant=variant,
                         value=value, **point))  # fmt: skip

    # goal 1: fast block 90 / 300 = 0.300, mrv2 270 / 300 = 0.900; a random-pattern row is ignored
    for variant, phi0, phi1 in (("fast", 300.0, 90.0), ("mrv2", 300.0, 270.0)):
        add("track_latency_us", "Density", variant, phi0, mode="block")
        add("track_latency_us", "Density", variant, phi1, mode="block", phi=1.0)
    rows.append(dict(rows[-1], pattern="random", value=1.0))
    # goal 2: bandwidth fraction at phi=0.5
    add("track_bandwidth_fraction", "Density", "fast", 0.5, phi=0.5)
    add("track_bandwidth_fraction", "Density", "mrv2", 0.25, phi=0.5)
    # goal 3: fast/mrv2 latency ratios 0.5 and 0.8 -> speedups 2.0 and 1.25
    add("track_ratio_to_mrv2", "Batch", "fast", 0.5, num_reqs=1)
    add("track_ratio_to_mrv2", "Steps", "fast", 0.8, K=8)
    # goal 4: FlashInfer from logits 3x fast, its kernel alone half of fast
    for variant, value in (("fast", 100.0), ("flashinfer", 300.0), ("flashinfer-kernel", 50.0)):
        add("track_latency_us", "Peers", variant, value, num_reqs=32, vocab_size=32000)
    return pd.DataFrame(rows)


def test_goals_computes_each_ratio(script):
    text = script.goals(_frame())
    assert "block    logits : fast 0.300, mrv2 0.900   (fast 90.0 / 300.0 us)" in text
    assert "standard: fast 0.500, mrv2 0.250" in text
    assert "2 points: geomean 1.581x (goal >= 1.3), slowest 1.250x (goal >= 0.98)" in text
    assert "Batch        geomean 2.000x" in text and "Steps        geomean 1.250x" in text
    assert "R=32   V=32000  : from logits 3.00, kernel alone 0.50   (fast 100.0 us)" in text
