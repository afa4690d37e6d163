"""specsample.measure.stage_calls: each kernel as a call that can be timed alone, repeatedly."""

from __future__ import annotations

import pytest
import torch

from specsample.grid import STAGES
from specsample.kernels import fast, mrv2
from specsample.measure import stage_calls
from specsample.workloads import Workload, make_inputs


@pytest.mark.parametrize("pipeline", [mrv2.Pipeline, fast.Pipeline], ids=["mrv2", "fast"])
def test_stage_calls_repeat_without_drift(device, pipeline):
    w = Workload(num_reqs=4, num_speculative_steps=3, vocab_size=300, mode="block", placeholder_density=0.25, seed=5)
    inputs = make_inputs(w, device=device)
    sampled, num_sampled = pipeline(**inputs).run()  # one whole call: what every stage must reproduce
    pipes = [pipeline(**inputs), pipeline(**inputs)]
    calls = stage_calls(pipes)
    assert list(calls) == [s for s in STAGES if s in calls] and list(calls)[-1] == "insert"
    assert all(len(c) == len(pipes) for c in calls.values())
    tau = num_sampled - 1
    for p in pipes:
        assert torch.equal(p.num_sampled, tau)  # left before insert
    for _ in range(3):  # every stage, again and again: insert restores tau each time
        for per_pipe in calls.values():
            for call in per_pipe:
                call()
    for p in pipes:
        assert torch.equal(p.num_sampled, num_sampled)
        for r, n in enumerate(num_sampled.tolist()):
            assert torch.equal(p.sampled[r, :n], sampled[r, :n])
