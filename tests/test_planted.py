"""The planted slowdown of the sign-off's validation: the wrapper subject ``BASE+extra=N``
(specsample.subjects.planted). Outputs unchanged, the delay kernel really runs where it is
planted (block verification with draft logits) and only there, any subject can be wrapped, and
no product kernel carries a test-only argument."""

from __future__ import annotations

import inspect

import pytest
import torch

from specsample import subjects
from specsample.kernels import mrv2, pre50939
from specsample.schema import parse_subject
from specsample.subjects import planted
from specsample.runs import plants
from specsample.workloads import Workload, make_inputs

BLOCK_LOGITS = Workload(
    num_reqs=3,
    num_speculative_steps=3,
    vocab_size=300,
    mode="block",
    draft="logits",
    placeholder_density=0.25,
    placeholder_pattern="random",
)
STANDARD = Workload(num_reqs=3, num_speculative_steps=3, vocab_size=300, mode="standard", draft="logits")
BLOCK_ONE_HOT = Workload(num_reqs=3, num_speculative_steps=3, vocab_size=300, mode="block", draft="one-hot")


def test_names_parse_around_any_subject():
    for base in ("mrv2", "mrv2@abcdef1", "vllm@main", "vllm==0.33.0"):
        parsed = parse_subject(f"{base}+extra=16")
        assert (parsed.kind, parsed.base, parsed.version) == ("planted", base, "16")
    with pytest.raises(ValueError, match="subject: expected"):
        parse_subject("nosuch+extra=16")


def test_no_product_kernel_carries_a_planted_knob():
    for module in (mrv2, pre50939):
        assert "ballast" not in inspect.getsource(module).lower()
        assert "ballast_iters" not in inspect.signature(module.Pipeline).parameters


def _run(name: str, w: Workload, device) -> tuple[list, list, planted.PlantedSubject | None]:
    inputs = make_inputs(w, device=device)
    prepared = subjects.get(name).prepare(w, device, inputs)
    sampled, num_sampled = prepared.finish(prepared.call())
    emitted = [sampled[r, : int(num_sampled[r])].tolist() for r in range(sampled.shape[0])]
    return emitted, num_sampled.tolist(), inputs


def test_the_wrapper_leaves_outputs_identical(device):
    for w in (BLOCK_LOGITS, STANDARD, BLOCK_ONE_HOT):
        base = _run("mrv2", w, device)[:2]
        assert _run("mrv2+extra=8", w, device)[:2] == base, w.mode


def test_the_delay_kernel_runs_at_block_logits_points_only(device):
    subject = subjects.get("mrv2-pre50939+extra=8")
    assert isinstance(subject, planted.PlantedSubject) and subject.extra == 8
    assert subject.provenance["kind"] == "planted" and subject.provenance["delay_iterations"] == 8
    seen = []
    real = planted.extra_stage

    def spy(target_logits, iters):
        call = real(target_logits, iters)
        call.scratch.fill_(float("nan"))
        seen.append(call)
        return call

    try:
        planted.extra_stage = spy
        for w in (STANDARD, BLOCK_ONE_HOT):
            inputs = make_inputs(w, device=device)
            subject.prepare(w, device, inputs).call()
        assert seen == []  # a plain call at every other point
        inputs = make_inputs(BLOCK_LOGITS, device=device)
        subject.prepare(BLOCK_LOGITS, device, inputs).call()
    finally:
        planted.extra_stage = real
    assert len(seen) == 1
    # What the kernel stores per row: the sum over its first block of acc = acc * 0.5 + 1, 8 times.
    logits = inputs["target_logits"].float()
    acc = torch.zeros(logits.shape[0], planted.BLOCK, dtype=torch.float32, device=logits.device)
    width = min(planted.BLOCK, logits.shape[1])
    acc[:, :width] = logits[:, :width]
    for _ in range(8):
        acc = acc * 0.5 + 1.0
    torch.testing.assert_close(seen[0].scratch, acc.sum(1), rtol=1e-5, atol=1e-4)


def test_validation_plants_the_planted_subjects_only():
    assert plants.planted_name("mrv2", "abc1234", 12) == "mrv2@abc1234+extra=12"
    assert plants.planted_name("fast", "abc1234", 12) == "fast@abc1234"
    assert plants.planted_name("mrv2", "abc1234", 0) == "mrv2@abc1234"
    assert set(plants.PLANTED_SUBJECTS) == {"mrv2", "mrv2-pre50939"}
