"""What is particular to the ``fast`` sampler (its shared behaviour is in test_sampler.py,
which runs every test on ``mrv2`` and on ``fast`` in both layouts): which stats and residual
rows it reads, its block-size configurations and the choice of one by batch size."""

from __future__ import annotations

import pytest
import torch
from batches import emitted, first_placeholder

from specsample import reference
from specsample.kernels import fast, mrv2
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


def _residual_rows_by_rule(inputs: dict) -> set[int]:
    """Rows whose residual mass the rejection kernel reads (block verification with draft
    logits): row j of a non-greedy request for 1 <= j while d_1..d_{j+1} are real."""
    cu = inputs["cu_num_logits"].tolist()
    temperature = inputs["temperature"][inputs["idx_mapping"].long()].tolist()
    return {cu[r] + j for r, m in enumerate(first_placeholder(inputs)) if temperature[r] != 0.0 for j in range(1, m)}


# Both layouts of the stats / residual-mass grid: (N, nb), one row per program (small batches),
# and (R, nb), one request per program looping over its rows (large batches).
LAYOUTS = {
    "row-grid": fast.Config(stats_block=128, stats_warps=2, resample_block=128, request_grid=False),
    "request-grid": fast.Config(stats_block=128, stats_warps=2, resample_block=128, request_grid=True),
    "request-grid-prefetch": fast.Config(stats_block=128, stats_warps=2, resample_block=128, prefetch=True),
}


@pytest.mark.parametrize("layout", list(LAYOUTS))
@pytest.mark.parametrize("mode", ["greedy", "standard", "block"])
def test_stats_skip_rows_after_the_first_placeholder(device, mode, layout):
    w = Workload(num_reqs=16, num_speculative_steps=4, vocab_size=300, mode=mode, placeholder_pattern="random",
                 placeholder_density=0.5, greedy_fraction=0.25 if mode != "greedy" else 1.0, seed=4)  # fmt: skip
    inputs = make_inputs(w, device=device)
    pipe = fast.Pipeline(**inputs, config=LAYOUTS[layout])  # make_inputs sets use_block_verification from the mode
    pipe.target_local_max.fill_(float("nan"))  # sentinel: a row the kernel skips stays NaN
    pipe._stats()
    written = {i for i, row in enumerate(pipe.target_local_max.isnan().all(dim=1).tolist()) if not row}
    expected = _rows_read_by_rule(inputs)
    assert written == expected
    assert 0 < len(expected) < inputs["target_logits"].shape[0] - 16  # the case skips real rows
    assert (~pipe.target_local_max[sorted(written)].isnan()).all()  # every block of a read row


@pytest.mark.parametrize("layout", ["request-grid", "request-grid-prefetch"])
def test_request_grid_residual_mass_only_for_rows_the_rejection_reads(device, layout):
    w = Workload(num_reqs=16, num_speculative_steps=4, vocab_size=300, mode="block", placeholder_pattern="random",
                 placeholder_density=0.3, greedy_fraction=0.25, seed=11)  # fmt: skip
    inputs = make_inputs(w, device=device)
    pipe = fast.Pipeline(**inputs, config=LAYOUTS[layout])
    pipe._stats()
    pipe._cumulative_log_p()
    pipe.local_residual_mass.fill_(float("nan"))
    pipe._residual_mass()
    written = {i for i, row in enumerate(pipe.local_residual_mass.isnan().all(dim=1).tolist()) if not row}
    expected = _residual_rows_by_rule(inputs)
    assert written == expected
    assert len(expected) >= 4
    # and the values are mrv2's for those rows (same partial layout)
    ref = mrv2.Pipeline(**inputs, vocab_block_size=128, block_warps=2)
    ref._stats()
    ref._cumulative_log_p()
    ref._residual_mass()
    rows = sorted(expected)
    torch.testing.assert_close(pipe.local_residual_mass[rows], ref.local_residual_mass[rows], rtol=1e-6, atol=0)


def test_default_config_follows_the_batch_size(device):
    assert fast.default_config(1) == fast.default_config(fast.SMALL_BATCH_BELOW - 1) == fast.SMALL_BATCH_CONFIG
    assert fast.default_config(fast.SMALL_BATCH_BELOW) == fast.default_config(4096) == fast.LARGE_BATCH_CONFIG
    assert not fast.SMALL_BATCH_CONFIG.request_grid and fast.LARGE_BATCH_CONFIG.request_grid
    for num_reqs, config in ((3, fast.SMALL_BATCH_CONFIG), (fast.SMALL_BATCH_BELOW, fast.LARGE_BATCH_CONFIG)):
        inputs = make_inputs(Workload(num_reqs=num_reqs, num_speculative_steps=2, vocab_size=200), device=device)
        pipe = fast.Pipeline(**inputs)
        assert pipe.config == config and pipe.vocab_block_size == config.stats_block
        assert fast.Pipeline(*inputs.values()).config == config  # positional arguments too


@pytest.mark.parametrize(
    "config",
    [
        fast.Config(stats_block=256, stats_warps=2, resample_block=128, resample_warps=1),
        fast.Config(stats_block=128, resample_block=512, fast_log=False),
        fast.Config(stats_block=128, stats_warps=2, resample_block=256, request_grid=False),
        fast.Config(stats_block=256, stats_warps=2, resample_block=128, prefetch=True),
    ],
    ids=["small-blocks", "narrow-stats", "row-grid", "prefetch"],
)
@pytest.mark.parametrize("mode,draft", [("greedy", "logits"), ("standard", "logits"), ("block", "logits"),
                                        ("block", "one-hot")])  # fmt: skip
def test_block_size_configs_match_reference(device, config, mode, draft):
    """Non-default block sizes change the partials' layout (nb per row), not the result."""
    w = Workload(num_reqs=8, num_speculative_steps=3, vocab_size=700, mode=mode, draft=draft,
                 placeholder_pattern="random", placeholder_density=0.3, seed=7)  # fmt: skip
    inputs = make_inputs(w, device=device)
    got = emitted(*fast.rejection_sample_fast(**inputs, config=config))
    assert got == emitted(*reference.rejection_sample(**inputs))  # 8 requests: 0.1% of them is 0


@pytest.mark.parametrize(
    "field,value", [("stats_block", 1000), ("resample_block", 64), ("stats_warps", 3), ("resample_warps", 64)]
)
def test_config_rejects_bad_values(field, value):
    with pytest.raises(ValueError, match=field):
        fast.Config(**{field: value})
