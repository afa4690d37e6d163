"""specsample.measure.stage_calls: each kernel as a call that can be timed alone, repeatedly."""

from __future__ import annotations

import functools

import pytest
import torch

from specsample.schema import STAGES
from specsample.kernels import fast, mrv2
from specsample.measure import stage_calls
from specsample.workloads import Workload, make_inputs


PIPELINES = {
    "mrv2": mrv2.Pipeline,
    "fast": fast.Pipeline,  # its small-batch default here: insert fused into resample
    "fast-large": functools.partial(fast.Pipeline, config=fast.LARGE_BATCH_CONFIG),
}


@pytest.mark.parametrize("pipeline", PIPELINES.values(), ids=PIPELINES.keys())
def test_stage_calls_repeat_without_drift(device, pipeline):
    w = Workload(num_reqs=4, num_speculative_steps=3, vocab_size=300, mode="block", placeholder_density=0.25, seed=5)
    inputs = make_inputs(w, device=device)
    sampled, num_sampled = pipeline(**inputs).run()  # one whole call: what every stage must reproduce
    pipes = [pipeline(**inputs), pipeline(**inputs)]
    calls = stage_calls(pipes)
    # fast's resample kernel inserts too when fused: then it is the last stage
    assert list(calls) == [s for s in STAGES if s in calls]
    fused = pipes[0].config.fused_insert if isinstance(pipes[0], fast.Pipeline) else False
    assert list(calls)[-1] == ("resample" if fused else "insert")
    assert all(len(c) == len(pipes) for c in calls.values())
    tau = num_sampled - 1
    for p in pipes:
        assert torch.equal(p.num_sampled, tau)  # left before the last stage
    for _ in range(3):  # every stage, again and again: the last one restores tau each time
        for per_pipe in calls.values():
            for call in per_pipe:
                call()
    for p in pipes:
        assert torch.equal(p.num_sampled, num_sampled)
        for r, n in enumerate(num_sampled.tolist()):
            assert torch.equal(p.sampled[r, :n], sampled[r, :n])
