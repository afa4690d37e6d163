"""Input validation of every sampler entry point (``specsample.validation.check_inputs``).

Each bad input must raise ``ValueError`` whose message starts with the offending argument's
name, before any kernel is launched: ``mrv2.launch`` is replaced by a tripwire in every
rejection test. Inputs start from a valid ``make_inputs`` batch (R=4, K=3, V=64) and break
exactly one thing. Both the public ``rejection_sample`` and the PRE replica
``rejection_sample_pre50939`` are exercised. Inputs live on the ``device`` fixture's device
(mutations that create tensors put them there too), so the value checks are reached on a CUDA
box as well. No kernel runs except in ``test_valid_input_runs``; the file takes a few seconds.
"""

from __future__ import annotations

from typing import Callable

import pytest
import torch
from conftest import LaunchTripwire

from specsample import rejection_sample
from specsample.kernels import fast, mrv2
from specsample import rejection_sample_fast
from specsample.sampler import rejection_sample_pre50939
from specsample.validation import check_inputs
from specsample.workloads import Workload, make_inputs

R, K, V = 4, 3, 64
N = R * (K + 1)  # no ragged requests in the base workload

ENTRY_POINTS = [
    pytest.param(rejection_sample, id="post"),
    pytest.param(rejection_sample_fast, id="fast"),
    pytest.param(rejection_sample_pre50939, id="pre50939"),
]


def _inputs(device: str = "cpu", **workload) -> dict:
    """A fresh valid batch (fresh tensors every call, so tests may mutate them)."""
    w = Workload(num_reqs=R, num_speculative_steps=K, vocab_size=V, seed=1, **workload)
    return make_inputs(w, device=device)


def _dev(inp: dict) -> torch.device:
    return inp["target_logits"].device


@pytest.fixture
def launch(monkeypatch) -> LaunchTripwire:
    tripwire = LaunchTripwire()
    monkeypatch.setattr(mrv2, "launch", tripwire)
    monkeypatch.setattr(fast, "launch", tripwire)
    return tripwire


def _strided_last_dim(x: torch.Tensor) -> torch.Tensor:
    """The same values with last-dimension stride 2."""
    wide = torch.zeros(*x.shape, 2, dtype=x.dtype, device=x.device)
    wide[..., 0] = x
    out = wide[..., 0]
    assert out.shape == x.shape and out.stride(-1) == 2
    return out


def _set(name: str, fn: Callable[[dict], object]) -> Callable[[dict], None]:
    def mutate(inp: dict) -> None:
        inp[name] = fn(inp)

    return mutate


def _put(name: str, index, value) -> Callable[[dict], None]:
    def mutate(inp: dict) -> None:
        inp[name][index] = value

    return mutate


def _narrow_draft_vocab(inp: dict) -> None:
    """V_d = V - 8 < V_target: a token in [V_d, V) is valid for the target, not for the draft."""
    inp["draft_logits"] = inp["draft_logits"][..., : V - 8].contiguous()
    inp["draft_sampled"].clamp_(max=V - 9)
    inp["draft_sampled"][5] = V - 4


def _out_of_range_slot(inp: dict) -> None:
    """Slot == max_num_reqs for request 1, with expanded_idx_mapping kept consistent."""
    inp["idx_mapping"][1] = R
    inp["expanded_idx_mapping"][K + 1 : 2 * (K + 1)] = R


def _too_many_drafts(inp: dict) -> None:
    """Request 0 gets K + 1 drafts, request 1 gets K - 1 (total rows unchanged)."""
    inp["cu_num_logits"][1] += 1


def _swap_slots(inp: dict) -> None:
    """Row 1 claims request 1's slot while its request is 0."""
    inp["expanded_idx_mapping"][1] = inp["idx_mapping"][1]


def _synthetic(rates) -> Callable[[dict], None]:
    def mutate(inp: dict) -> None:
        inp["synthetic_conditional_rates"] = torch.tensor(rates, dtype=torch.float32, device=_dev(inp))

    return mutate


def _synthetic_block(inp: dict) -> None:
    inp["synthetic_conditional_rates"] = torch.tensor([0.9, 0.5, 0.2], device=_dev(inp))
    inp["use_block_verification"] = True


# (id, mutation, argument the message must start with)
BAD_INPUTS = [
    # target_logits
    ("target_logits-not-a-tensor", _set("target_logits", lambda i: i["target_logits"].tolist()), "target_logits"),
    ("target_logits-1d", _set("target_logits", lambda i: i["target_logits"].flatten()), "target_logits"),
    ("target_logits-3d", _set("target_logits", lambda i: i["target_logits"][None]), "target_logits"),
    ("target_logits-int64", _set("target_logits", lambda i: i["target_logits"].long()), "target_logits"),
    ("target_logits-fp64", _set("target_logits", lambda i: i["target_logits"].double()), "target_logits"),
    (
        "target_logits-last-stride-2",
        _set("target_logits", lambda i: _strided_last_dim(i["target_logits"])),
        "target_logits",
    ),
    # draft_logits
    ("draft_logits-2d", _set("draft_logits", lambda i: i["draft_logits"][:, 0]), "draft_logits"),
    ("draft_logits-int32", _set("draft_logits", lambda i: i["draft_logits"].int()), "draft_logits"),
    ("draft_logits-fp64", _set("draft_logits", lambda i: i["draft_logits"].double()), "draft_logits"),
    (
        "draft_logits-slots+1",
        _set("draft_logits", lambda i: torch.cat([i["draft_logits"], i["draft_logits"][:1]])),
        "draft_logits",
    ),
    ("draft_logits-slots-1", _set("draft_logits", lambda i: i["draft_logits"][1:]), "draft_logits"),
    ("draft_logits-K-1", _set("draft_logits", lambda i: i["draft_logits"][:, 1:]), "draft_logits"),
    (
        "draft_logits-K+1",
        _set("draft_logits", lambda i: torch.cat([i["draft_logits"], i["draft_logits"][:, :1]], 1)),
        "draft_logits",
    ),
    (
        "draft_logits-last-stride-2",
        _set("draft_logits", lambda i: _strided_last_dim(i["draft_logits"])),
        "draft_logits",
    ),
    # draft_sampled
    ("draft_sampled-2d", _set("draft_sampled", lambda i: i["draft_sampled"][:, None]), "draft_sampled"),
    ("draft_sampled-float", _set("draft_sampled", lambda i: i["draft_sampled"].float()), "draft_sampled"),
    ("draft_sampled-int16", _set("draft_sampled", lambda i: i["draft_sampled"].short()), "draft_sampled"),
    ("draft_sampled-short", _set("draft_sampled", lambda i: i["draft_sampled"][:-1]), "draft_sampled"),
    ("draft_sampled-token=V", _put("draft_sampled", 2, V), "draft_sampled"),
    ("draft_sampled-token=-2", _put("draft_sampled", 2, -2), "draft_sampled"),
    ("draft_sampled-anchor=V", _put("draft_sampled", 0, V), "draft_sampled"),
    ("draft_sampled-token>=V_draft", _narrow_draft_vocab, "draft_sampled"),
    # cu_num_logits
    ("cu_num_logits-float", _set("cu_num_logits", lambda i: i["cu_num_logits"].float()), "cu_num_logits"),
    ("cu_num_logits-2d", _set("cu_num_logits", lambda i: i["cu_num_logits"][None]), "cu_num_logits"),
    ("cu_num_logits-empty", _set("cu_num_logits", lambda i: i["cu_num_logits"][:0]), "cu_num_logits"),
    ("cu_num_logits-starts-at-1", _put("cu_num_logits", 0, 1), "cu_num_logits"),
    ("cu_num_logits-decreasing", _put("cu_num_logits", 2, K), "cu_num_logits"),
    ("cu_num_logits-repeated", _put("cu_num_logits", 2, K + 1), "cu_num_logits"),
    ("cu_num_logits-ends-before-N", _put("cu_num_logits", -1, N - 1), "cu_num_logits"),
    ("cu_num_logits-ends-after-N", _put("cu_num_logits", -1, N + 1), "cu_num_logits"),
    ("cu_num_logits-K+1-drafts", _too_many_drafts, "cu_num_logits"),
    # pos
    ("pos-float", _set("pos", lambda i: i["pos"].float()), "pos"),
    ("pos-short", _set("pos", lambda i: i["pos"][:-1]), "pos"),
    ("pos-2d", _set("pos", lambda i: i["pos"][None]), "pos"),
    # idx_mapping / expanded_idx_mapping / expanded_local_pos
    ("idx_mapping-short", _set("idx_mapping", lambda i: i["idx_mapping"][:-1]), "idx_mapping"),
    ("idx_mapping-float", _set("idx_mapping", lambda i: i["idx_mapping"].float()), "idx_mapping"),
    ("idx_mapping-slot=max_num_reqs", _out_of_range_slot, "idx_mapping"),
    (
        "expanded_idx_mapping-short",
        _set("expanded_idx_mapping", lambda i: i["expanded_idx_mapping"][:-1]),
        "expanded_idx_mapping",
    ),
    ("expanded_idx_mapping-inconsistent", _swap_slots, "expanded_idx_mapping"),
    (
        "expanded_local_pos-short",
        _set("expanded_local_pos", lambda i: i["expanded_local_pos"][:-1]),
        "expanded_local_pos",
    ),
    (
        "expanded_local_pos-float",
        _set("expanded_local_pos", lambda i: i["expanded_local_pos"].float()),
        "expanded_local_pos",
    ),
    ("expanded_local_pos-inconsistent", _put("expanded_local_pos", K + 2, 0), "expanded_local_pos"),
    (
        "expanded_local_pos-not-restarting",
        _set("expanded_local_pos", lambda i: torch.arange(N, dtype=torch.int32, device=_dev(i))),
        "expanded_local_pos",
    ),
    # temperature / seed / K
    ("temperature-negative", _put("temperature", 1, -0.5), "temperature"),
    ("temperature-nan", _put("temperature", 2, float("nan")), "temperature"),
    ("temperature-inf", _put("temperature", 0, float("inf")), "temperature"),
    ("temperature-fp64", _set("temperature", lambda i: i["temperature"].double()), "temperature"),
    ("temperature-2d", _set("temperature", lambda i: i["temperature"][None]), "temperature"),
    ("seed-int32", _set("seed", lambda i: i["seed"].int()), "seed"),
    ("seed-short", _set("seed", lambda i: i["seed"][:-1]), "seed"),
    ("num_speculative_steps-0", _set("num_speculative_steps", lambda i: 0), "num_speculative_steps"),
    ("num_speculative_steps-float", _set("num_speculative_steps", lambda i: 3.0), "num_speculative_steps"),
    # synthetic mode
    ("synthetic-nan", _synthetic([0.9, float("nan"), 0.2]), "synthetic_conditional_rates"),
    ("synthetic-above-1", _synthetic([0.9, 1.5, 0.2]), "synthetic_conditional_rates"),
    ("synthetic-negative", _synthetic([0.9, 0.5, -0.1]), "synthetic_conditional_rates"),
    ("synthetic-length-K-1", _synthetic([0.9, 0.5]), "synthetic_conditional_rates"),
    (
        "synthetic-fp64",
        _set(
            "synthetic_conditional_rates", lambda i: torch.tensor([0.9, 0.5, 0.2], dtype=torch.float64, device=_dev(i))
        ),
        "synthetic_conditional_rates",
    ),
    ("synthetic-with-block", _synthetic_block, "synthetic_conditional_rates"),
]


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("mutate,argname", [pytest.param(m, a, id=i) for i, m, a in BAD_INPUTS])
def test_bad_input_rejected(device, entry, mutate, argname, launch):
    inp = _inputs(device)
    mutate(inp)
    with pytest.raises(ValueError, match=f"^{argname}:"):
        entry(**inp)
    assert launch.calls == 0


def _on_meta(name: str) -> Callable[[dict], None]:
    def mutate(inp: dict) -> None:
        if name == "synthetic_conditional_rates":
            inp[name] = torch.tensor([0.9, 0.5, 0.2], device=_dev(inp))
        inp[name] = inp[name].to("meta")

    return mutate


ON_OTHER_DEVICE = [
    "draft_logits",
    "draft_sampled",
    "cu_num_logits",
    "pos",
    "idx_mapping",
    "expanded_idx_mapping",
    "expanded_local_pos",
    "temperature",
    "seed",
    "synthetic_conditional_rates",
]


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("name", ON_OTHER_DEVICE)
def test_tensor_on_other_device_rejected(device, entry, name, launch):
    """One tensor on the "meta" device stands in for "not on target_logits' device"."""
    inp = _inputs(device)
    _on_meta(name)(inp)
    with pytest.raises(ValueError, match=f"^{name}:.*meta"):
        entry(**inp)
    assert launch.calls == 0


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("interpret", ["0", None], ids=["interpret=0", "interpret-unset"])
def test_cpu_tensors_need_interpreter(entry, interpret, monkeypatch, launch):
    """CPU tensors (on any machine) without TRITON_INTERPRET=1: the kernels could not run."""
    if interpret is None:
        monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    else:
        monkeypatch.setenv("TRITON_INTERPRET", interpret)
    with pytest.raises(ValueError, match="^target_logits:.*CUDA"):
        entry(**_inputs())
    assert launch.calls == 0


def test_check_inputs_without_device_requirement_accepts_cpu(monkeypatch):
    """``require_triton_device=False`` (e.g. for the PyTorch reference) skips only that check."""
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    inp = _inputs()
    args = [
        inp[k]
        for k in (
            "target_logits",
            "draft_logits",
            "draft_sampled",
            "cu_num_logits",
            "pos",
            "idx_mapping",
            "expanded_idx_mapping",
            "expanded_local_pos",
            "temperature",
            "seed",
            "num_speculative_steps",
        )
    ]
    check_inputs(*args, require_triton_device=False)
    with pytest.raises(ValueError, match="^target_logits:.*CUDA"):
        check_inputs(*args)


# ---- valid inputs pass ---------------------------------------------------------------------------


def _wider_draft_vocab(inp: dict) -> None:
    """V_d > V_target: V = V_target, so every target token stays valid."""
    extra = torch.zeros(*inp["draft_logits"].shape[:2], 8, dtype=inp["draft_logits"].dtype, device=_dev(inp))
    inp["draft_logits"] = torch.cat([inp["draft_logits"], extra], dim=-1)
    inp["draft_sampled"][1] = V - 1


def _narrow_draft_vocab_in_range(inp: dict) -> None:
    inp["draft_logits"] = inp["draft_logits"][..., : V - 8].contiguous()
    inp["draft_sampled"].clamp_(max=V - 9)


def _strided_rows(inp: dict) -> None:
    """Rows padded to V + 3 (row stride != V): allowed, only the last stride must be 1."""
    padded = torch.zeros(N, V + 3, device=_dev(inp))
    padded[:, :V] = inp["target_logits"]
    inp["target_logits"] = padded[:, :V]


def _int32_ids(inp: dict) -> None:
    for name in ("draft_sampled", "pos"):
        inp[name] = inp[name].int()
    inp["cu_num_logits"] = inp["cu_num_logits"].long()


def _all_placeholders(inp: dict) -> None:
    inp["draft_sampled"][inp["expanded_local_pos"] > 0] = -1


VALID = [
    ("standard-logits", {}, None),
    ("one-hot", {"draft": "one-hot"}, None),
    ("block", {"mode": "block"}, None),
    ("greedy", {"mode": "greedy"}, None),
    ("synthetic", {"mode": "synthetic"}, None),
    ("ragged-mixed-slots", {"ragged": True, "greedy_fraction": 0.5, "max_num_reqs": 9}, None),
    ("fp16-target-fp32-draft", {"target_dtype": torch.float16, "draft_dtype": torch.float32}, None),
    ("placeholders", {"placeholder_density": 0.5, "placeholder_pattern": "random"}, None),
    ("all-placeholders", {}, _all_placeholders),
    ("draft-vocab-wider", {}, _wider_draft_vocab),
    ("draft-vocab-narrower", {}, _narrow_draft_vocab_in_range),
    ("strided-rows", {}, _strided_rows),
    ("int32-ids-int64-cu", {}, _int32_ids),
    ("synthetic-rates-0-and-1", {}, _synthetic([0.0, 1.0, 0.5])),
]


@pytest.mark.parametrize("entry", ENTRY_POINTS)
@pytest.mark.parametrize("workload,mutate", [pytest.param(w, m, id=i) for i, w, m in VALID])
def test_valid_input_passes(device, entry, workload, mutate, launch):
    inp = _inputs(device, **workload)
    if mutate is not None:
        mutate(inp)
    entry(**inp)
    assert launch.calls == 1


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_valid_input_runs(device, entry):
    """End to end through the real kernels (one small batch)."""
    inp = _inputs(device, placeholder_density=0.25, placeholder_pattern="random")
    sampled, num_sampled = entry(**inp)
    assert sampled.shape == (R, K + 1) and num_sampled.shape == (R,)
    assert ((1 <= num_sampled) & (num_sampled <= K + 1)).all()


def test_validate_false_skips_checks(device, launch):
    """``validate=False`` is for pre-checked inputs in timed loops: nothing is checked."""
    inp = _inputs(device)
    inp["temperature"][0] = -1.0
    rejection_sample(**inp, validate=False)
    rejection_sample_fast(**inp, validate=False)
    rejection_sample_pre50939(**inp, validate=False)
    assert launch.calls == 3
