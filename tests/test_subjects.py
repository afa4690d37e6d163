"""The subjects registry: what it lists, what each subject refuses, and that our own subjects
agree with each other where they must (and disagree where PR #50939 says they do)."""

from __future__ import annotations

import pytest
import torch
from batches import emitted, trial_batch
from conftest import gpu
from stats import assert_follows

from specsample import subjects
from specsample.tiers import sweeps
from specsample.workloads import Workload, make_inputs

V, R, K = 257, 12, 3


def test_registry_lists_every_subject_once():
    names = subjects.names()
    assert names == (
        "mrv2",
        "fast",
        "mrv2-pre50939",
        "torch-eager",
        "flashinfer",
        "flashinfer-kernel",
        "express",
        "mrv2-vllm",
    )
    assert len(set(names)) == len(names)
    assert "REPLICA" in subjects.get("mrv2-pre50939").summary


def test_every_subject_has_a_benchmark():
    benchmarked = {v for s in sweeps() if s.kind == "sampler" for v in s.subjects}
    assert set(subjects.names()) <= benchmarked


@pytest.mark.parametrize("name", ["nope", "mrv3", "vllm=0.33.0", "vllm==latest", "nope@abc1234"])
def test_unknown_subject_is_a_value_error_listing_the_forms(name):
    with pytest.raises(ValueError, match="^subject: expected one of mrv2, fast.*vllm==X.Y.Z"):
        subjects.get(name)


@pytest.mark.parametrize(
    "workload,reason",
    [
        (Workload(mode="block", num_reqs=4, vocab_size=V), "supports modes"),
        (Workload(draft="one-hot", num_reqs=4, vocab_size=V), "supports drafts"),
        (Workload(placeholder_density=0.5, num_reqs=4, vocab_size=V), "placeholder"),
        (Workload(ragged=True, num_reqs=4, vocab_size=V), "K drafts"),
        (Workload(greedy_fraction=0.5, num_reqs=4, vocab_size=V), "mixed temperatures"),
    ],
    ids=["mode", "draft", "placeholders", "ragged", "mixed-temperature"],
)
def test_flashinfer_declares_its_limits(workload, reason, monkeypatch):
    fi = subjects.get("flashinfer")
    monkeypatch.setattr(type(fi), "unavailable", lambda self: None)  # judge support, not installation
    assert reason in fi.unsupported(workload)
    with pytest.raises(subjects.NotSupported, match=reason):
        fi.check(workload)


def test_missing_flashinfer_reports_itself_unavailable():
    fi = subjects.get("flashinfer")
    if fi.unavailable() is None:
        pytest.skip("flashinfer is installed here")
    assert "flashinfer" in fi.unavailable()
    with pytest.raises(subjects.NotSupported):
        fi.prepare(Workload(num_reqs=2, vocab_size=V))


MODES = ("greedy", "standard", "block", "synthetic")
DRAFTS = ("logits", "one-hot")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("draft", DRAFTS)
def test_replica_matches_mrv2_without_placeholders(device, mode, draft):
    """PR #50939 changes nothing when no draft is -1: identical output in every mode."""
    w = Workload(
        num_reqs=R,
        num_speculative_steps=K,
        vocab_size=V,
        mode=mode,
        draft=draft,
        ragged=True,
        greedy_fraction=0.25 if mode != "greedy" else 0.0,
        seed=31,
    )
    inputs = make_inputs(w, device=device)
    post = emitted(*subjects.get("mrv2").run(w, device, inputs))
    pre = emitted(*subjects.get("mrv2-pre50939").run(w, device, inputs))
    assert pre == post


@pytest.mark.parametrize("mode", ["greedy", "standard", "block"])
def test_torch_eager_matches_mrv2(device, mode):
    w = Workload(
        num_reqs=R,
        num_speculative_steps=K,
        vocab_size=V,
        mode=mode,
        placeholder_density=0.3,
        placeholder_pattern="random",
        seed=32,
    )
    inputs = make_inputs(w, device=device)
    eager = emitted(*subjects.get("torch-eager").run(w, device, inputs))
    ours = emitted(*subjects.get("mrv2").run(w, device, inputs))
    mismatches = sum(a != b for a, b in zip(eager, ours))
    assert mismatches <= (0 if mode == "greedy" else 0.001 * R)


def _placeholder_in_the_middle(device: str, trials: int) -> dict:
    """Target == draft (acceptance ~1); d_2 = -1 with a valid d_3 after it."""
    g = torch.Generator().manual_seed(0)
    target = torch.randn(V, generator=g).to(device)
    inputs = trial_batch(target, target.clone(), K, 1.0, trials, generator=g)
    inputs["draft_sampled"].view(trials, K + 1)[:, 2] = -1
    return inputs | {"use_block_verification": True}


def _run_prepared(name: str, inputs: dict):
    prepared = subjects.get(name).prepare_inputs(inputs)
    return prepared.finish(prepared.call())


def test_mrv2_block_verification_stops_at_placeholder(device):
    trials = 128 if device == "cpu" else 16384
    _, num_sampled = _run_prepared("mrv2", _placeholder_in_the_middle(device, trials))
    assert int(num_sampled.max()) <= 2


@pytest.mark.xfail(strict=True, reason="the bug PR #50939 fixed: the pre-fix replica accepts drafts past a -1")
def test_replica_block_verification_stops_at_placeholder(device):
    trials = 128 if device == "cpu" else 16384
    _, num_sampled = _run_prepared("mrv2-pre50939", _placeholder_in_the_middle(device, trials))
    assert int(num_sampled.max()) <= 2


# ---- FlashInfer on the GPU ---------------------------------------------------------------------


@pytest.mark.slow  # 116-120 s on the H200, most of it building FlashInfer's JIT module
@pytest.mark.jit_build  # so scripts/gpu-check.sh starts it at once, in a process of its own
@gpu
def test_flashinfer_first_token_follows_target():
    """FlashInfer's chain speculative sampling from our logits: the first emitted token of each
    trial follows softmax(target), like ours (standard mode, draft logits)."""
    fi = subjects.get("flashinfer")
    if fi.unavailable():
        pytest.skip(fi.unavailable())
    trials, v, k = 40960, 4096, 3
    g = torch.Generator().manual_seed(7)
    target = torch.randn(v, generator=g)
    target[int(torch.randint(0, v, (1,), generator=g))] += 8.0  # one likely token, as in real logits
    draft = target + 0.5 * torch.randn(v, generator=g)
    inputs = trial_batch(target.cuda(), draft.cuda(), k, 1.0, trials, generator=g)
    sampled, num_sampled = _run_prepared("flashinfer", inputs)
    p = torch.softmax(target.double(), -1)
    assert_follows(sampled[:, 0], p, "flashinfer first token")  # also checks the range [0, V)
    ours, _ = _run_prepared("mrv2", inputs)
    assert_follows(ours[:, 0], p, "mrv2 first token")
