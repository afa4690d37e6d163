"""What is particular to the ``fast`` sampler (its shared behaviour is in test_sampler.py,
which runs every test on both ``mrv2`` and ``fast``): which stats rows it reads, its block-size
configurations and the choice of one by batch size."""

from __future__ import annotations

import pytest
from batches import emitted, first_placeholder

from specsample import reference, rejection_sample_fast
from specsample.kernels import fast
from specsample.workloads import Workload, make_inputs


def _rows_read_by_rule(inputs: dict) -> set[int]:
    """Rows the fast stats kernel must fill: greedy row j while d_1..d_j are real, other
    modes while d_1..d_{j+1} are; never a bonus row."""
    cu = inputs["cu_num_logits"].tolist()
    temperature = inputs["temperature"][inputs["idx_mapping"].long()].tolist()
    rows = set()
    for r, m in enumerate(first_placeholder(inputs)):  # m = real drafts before the first -1
        start, end = cu[r], cu[r + 1]
        num_drafts = end - start - 1
        for j in range(num_drafts):
            needed = j <= m if temperature[r] == 0.0 else j + 1 <= m
            if needed and j < num_drafts:
                rows.add(start + j)
    return rows


# The two defaults, and tiles of several rows per program, with and without the speculative load
ROW_CONFIGS = {
    "tiny": fast.TINY_BATCH_CONFIG,
    "small": fast.SMALL_BATCH_CONFIG,
    "large": fast.LARGE_BATCH_CONFIG,
    "rows2": fast.Config(stats_block=256, stats_warps=2, stats_rows=2),
    "rows4-speculative": fast.Config(stats_block=128, stats_rows=4, speculative_load=True),
    "rows8": fast.Config(stats_block=512, stats_rows=8),  # more rows than K: one program per request
}


@pytest.mark.parametrize("config", ROW_CONFIGS.values(), ids=ROW_CONFIGS.keys())
@pytest.mark.parametrize("mode", ["greedy", "standard", "block"])
def test_stats_skip_rows_after_the_first_placeholder(device, mode, config):
    w = Workload(
        num_reqs=16,
        num_speculative_steps=4,
        vocab_size=300,
        mode=mode,
        placeholder_pattern="random",
        placeholder_density=0.5,
        greedy_fraction=0.25 if mode != "greedy" else 1.0,
        seed=4,
    )
    inputs = make_inputs(w, device=device)
    pipe = fast.Pipeline(**inputs, config=config)  # make_inputs sets use_block_verification from the mode
    pipe.target_local_max.fill_(float("nan"))  # sentinel: a row the kernel skips stays NaN
    pipe._stats()
    written = {i for i, row in enumerate(pipe.target_local_max.isnan().all(dim=1).tolist()) if not row}
    expected = _rows_read_by_rule(inputs)
    assert written == expected
    assert 0 < len(expected) < inputs["target_logits"].shape[0] - 16  # the case skips real rows


@pytest.mark.parametrize("config", ROW_CONFIGS.values(), ids=ROW_CONFIGS.keys())
def test_residual_mass_only_for_rows_the_rejection_reads(device, config):
    """Block verification reads row j's residual mass only when d_1..d_{j+1} are real and
    j >= 1; no other row is written (greedy requests have none)."""
    w = Workload(
        num_reqs=16,
        num_speculative_steps=4,
        vocab_size=300,
        mode="block",
        placeholder_pattern="random",
        placeholder_density=0.4,
        greedy_fraction=0.25,
        seed=5,
    )
    inputs = make_inputs(w, device=device)
    pipe = fast.Pipeline(**inputs, config=config)
    pipe.local_residual_mass.fill_(float("nan"))
    for name, stage in pipe.stages():
        if name == "rejection":
            break
        stage()
    written = {i for i, row in enumerate(pipe.local_residual_mass.isnan().all(dim=1).tolist()) if not row}
    cu = inputs["cu_num_logits"].tolist()
    temperature = inputs["temperature"][inputs["idx_mapping"].long()].tolist()
    expected = {
        cu[r] + j for r, m in enumerate(first_placeholder(inputs)) if temperature[r] != 0.0 for j in range(1, m)
    }
    assert written == expected
    assert 0 < len(expected) < 16 * 3  # the case skips real rows
    assert not pipe.local_residual_mass[sorted(expected)].isnan().any()  # every block of them


def test_default_config_follows_the_batch_size(device):
    assert fast.default_config(1) == fast.default_config(fast.TINY_BATCH_BELOW - 1) == fast.TINY_BATCH_CONFIG
    assert (
        fast.default_config(fast.TINY_BATCH_BELOW)
        == fast.default_config(fast.SMALL_BATCH_BELOW - 1)
        == fast.SMALL_BATCH_CONFIG
    )
    assert fast.default_config(fast.SMALL_BATCH_BELOW) == fast.default_config(4096) == fast.LARGE_BATCH_CONFIG
    cases = (
        (2, fast.TINY_BATCH_CONFIG),
        (5, fast.SMALL_BATCH_CONFIG),
        (fast.SMALL_BATCH_BELOW, fast.LARGE_BATCH_CONFIG),
    )
    for num_reqs, config in cases:
        inputs = make_inputs(Workload(num_reqs=num_reqs, num_speculative_steps=2, vocab_size=200), device=device)
        pipe = fast.Pipeline(**inputs)
        assert pipe.config == config and pipe.vocab_block_size == config.stats_block
        assert fast.Pipeline(*inputs.values()).config == config  # positional arguments too


@pytest.mark.parametrize(
    "config",
    [
        fast.Config(stats_block=256, stats_warps=2, resample_block=128, resample_warps=1),
        fast.Config(stats_block=128, resample_block=512),
        fast.Config(stats_block=256, stats_rows=2, speculative_load=True),  # K=3: a half-full tile
        fast.Config(stats_block=128, stats_warps=2, stats_rows=4),
        fast.Config(stats_block=256, resample_block=128, resample_loop=3),  # 700 = 1.8 spans of 384
        fast.Config(resample_block=128, resample_loop=2, fused_insert=True),  # 3 spans count to insert
    ],
    ids=[
        "small-blocks",
        "narrow-stats",
        "rows2-speculative",
        "rows4",
        "resample-loop3",
        "fused-insert-loop2",
    ],
)
@pytest.mark.parametrize(
    "mode,draft", [("greedy", "logits"), ("standard", "logits"), ("block", "logits"), ("block", "one-hot")]
)
def test_block_size_configs_match_reference(device, config, mode, draft):
    """Non-default block sizes change the partials' layout (nb per row), not the result."""
    w = Workload(
        num_reqs=8,
        num_speculative_steps=3,
        vocab_size=700,
        mode=mode,
        draft=draft,
        placeholder_pattern="random",
        placeholder_density=0.3,
        seed=7,
    )
    inputs = make_inputs(w, device=device)
    got = emitted(*rejection_sample_fast(**inputs, config=config))
    assert got == emitted(*reference.rejection_sample(**inputs))  # 8 requests: 0.1% of them is 0


@pytest.mark.parametrize(
    "field,value",
    [
        ("stats_block", 1000),
        ("resample_block", 64),
        ("stats_warps", 3),
        ("resample_warps", 64),
        ("stats_rows", 3),
        ("resample_loop", 0),
    ],
)
def test_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        fast.Config(**{field: value})
