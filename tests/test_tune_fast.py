"""scripts/tune_fast.py: extra candidates from the command line (``--candidate``)."""

from __future__ import annotations

import argparse

import pytest
from script_loader import script_module

from specsample.kernels import fast


@pytest.fixture(scope="module")
def script():
    with script_module("tune_fast") as module:
        yield module


def test_candidate_replaces_fields_of_its_base(script):
    name, config = script.parse_candidate("w8=small:stats_warps=16,fast_log=false,resample_block=512")
    assert name == "w8"
    assert config.stats_warps == 16 and config.fast_log is False and config.resample_block == 512
    # the fields not named keep the base's values
    assert config.stats_block == fast.SMALL_BATCH_CONFIG.stats_block
    assert config.speculative_load == fast.SMALL_BATCH_CONFIG.speculative_load
    assert script.parse_candidate("same=large")[1] == fast.LARGE_BATCH_CONFIG


@pytest.mark.parametrize(
    "text, message",
    [
        ("w8", "expected NAME=BASE"),
        ("w8=huge:stats_warps=8", "base must be one of"),
        ("w8=large:stat_warps=8", "unknown Config fields ['stat_warps']"),
        ("w8=large:stats_warps=3", "power of two"),
        ("w8=large:stats_warps=eight", "invalid literal"),
    ],
)
def test_bad_candidates_say_why(script, text, message):
    with pytest.raises(argparse.ArgumentTypeError) as e:
        script.parse_candidate(text)
    assert message in str(e.value)
