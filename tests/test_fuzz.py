"""Property-based tests (hypothesis): random valid batches match the reference, random invalid
batches are rejected.

1. ``test_kernel_matches_reference_on_random_batches``: a :class:`Workload` drawn over every
   field (awkward ``R``/``K``/``V`` including ``V = 2``, placeholder pattern and density, mode,
   draft kind, dtypes, temperatures and greedy fraction, ragged requests, spare slots) plus
   extras hypothesis draws on top of ``make_inputs`` (``use_fp64``, int32/int64 index tensors,
   any int64 seeds, shifted positions, padded target rows and a wider or narrower draft vocab
   with junk beyond ``V``, junk in unmapped slots, arbitrary synthetic rates). Properties:
   the kernel's emitted tokens equal the reference's (greedy requests exactly; others in all
   but 0.1% of requests, which at ``R <= 6`` means exactly), every emitted token is in
   ``[0, V)``, ``1 <= num_sampled[r] <= m_r + 1`` (``m_r`` valid drafts before the first -1)
   and the emitted prefix before the last token is the request's own drafts.
2. ``test_invalid_*``: a valid batch with one thing broken by hypothesis (token id, prefix
   sums, temperature, slot, expanded metadata, rates, dtype, shape, device "meta", strides,
   empty vocab, non-tensor, flags, K) raises ``ValueError`` whose message starts with the
   argument to blame, before any kernel launch (``mrv2.launch`` is a tripwire): never another
   exception type, never a silent result. ``test_fuzz_findings_rejected`` pins the inputs
   a lax validation lets through (non-contiguous 1-D tensors, an empty vocabulary, ``K=True``).

Under TRITON_INTERPRET=1 every kernel program costs tens of milliseconds, so batches stay small
(``R <= 6``, ``K <= 4``, ``V <= 300``). Settings are derandomized and database-free, so CI
explores the same examples on every run.
"""

from __future__ import annotations

import functools

import math
from unittest import mock

import numpy as np
import pytest
import torch
from batches import emitted, first_placeholder, request_rows
from conftest import LaunchTripwire
from hypothesis import HealthCheck, assume, event, given, note, settings
from hypothesis import strategies as st

from specsample import reference, rejection_sample
from specsample.kernels import fast, mrv2
from specsample import rejection_sample_fast
from specsample.sampler import rejection_sample_pre50939
from specsample.workloads import DRAFTS, MODES, PATTERNS, Workload, make_inputs

# Per mode. The fuzzing campaign is CI's interpreter run; on a GPU every new shape compiles the
# kernels (seconds each), so a GPU run draws fewer examples, enough to cover compiled code.
MATCH_EXAMPLES = 50 if not torch.cuda.is_available() else 10
INVALID_EXAMPLES = 300

_COMMON = dict(deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow])

FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
INDEX_ARGS = ("draft_sampled", "cu_num_logits", "pos", "idx_mapping", "expanded_idx_mapping", "expanded_local_pos")
TENSOR_ARGS = (
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
    "synthetic_conditional_rates",
)


# ---- strategies ----------------------------------------------------------------------------------


def _unit() -> st.SearchStrategy[float]:
    """[0, 1] with the boundaries and a few round values likely."""
    return st.one_of(st.sampled_from([0.0, 0.25, 0.5, 1.0]), st.floats(0.0, 1.0))


@st.composite
def workloads(draw, mode: str | None = None, max_reqs: int = 6, max_steps: int = 4, max_vocab: int = 300) -> Workload:
    num_reqs = draw(st.integers(1, max_reqs))
    spare_slots = draw(st.one_of(st.none(), st.integers(0, 5)))
    return Workload(
        num_reqs=num_reqs,
        num_speculative_steps=draw(st.integers(1, max_steps)),
        vocab_size=draw(st.one_of(st.sampled_from([2, 3, 7, 129, 257, max_vocab]), st.integers(2, max_vocab))),
        placeholder_density=draw(_unit()),
        placeholder_pattern=draw(st.sampled_from(PATTERNS)),
        mode=mode or draw(st.sampled_from(MODES)),
        draft=draw(st.sampled_from(DRAFTS)),
        target_dtype=draw(st.sampled_from(FLOAT_DTYPES)),
        draft_dtype=draw(st.sampled_from(FLOAT_DTYPES)),
        temperature=draw(st.one_of(st.sampled_from([1.0, 0.6]), st.floats(0.05, 4.0))),
        greedy_fraction=draw(_unit()),
        agreement=draw(_unit()),
        ragged=draw(st.booleans()),
        max_num_reqs=None if spare_slots is None else num_reqs + spare_slots,
        seed=draw(st.integers(0, 2**32 - 1)),
    )


_JUNK = st.sampled_from([1e4, -1e4, math.inf, math.nan])


@st.composite
def extras(draw, w: Workload) -> dict:
    """Valid changes to ``make_inputs(w)`` that it never makes itself (see :func:`_apply`)."""
    slots = w.max_num_reqs or w.num_reqs
    x: dict = {"use_fp64": draw(st.booleans())}
    x["index_dtypes"] = {n: draw(st.sampled_from([torch.int32, torch.int64])) for n in INDEX_ARGS}
    if draw(st.booleans()):
        x["seeds"] = draw(st.lists(st.integers(-(2**63), 2**63 - 1), min_size=slots, max_size=slots))
    x["pos_shift"] = draw(st.sampled_from([0, 0, 2**31 - 3, -(2**31), 2**32 + 7]))
    x["row_pad"] = draw(st.sampled_from([0, 0, 1, 3]))
    x["pad_value"] = draw(_JUNK)
    if w.draft == "logits":
        x["draft_vocab_delta"] = draw(st.sampled_from([0, 0, 1, 2]) | st.integers(-min(3, w.vocab_size - 1), -1))
        x["unmapped_junk"] = draw(st.booleans())
    if w.mode == "synthetic" and draw(st.booleans()):
        rate = st.sampled_from([0.0, 1.0]) | st.floats(0.0, 1.0, width=32)
        k = w.num_speculative_steps
        x["rates"] = draw(st.lists(rate, min_size=k, max_size=k))
    return x


@st.composite
def cases(draw, mode: str | None = None) -> tuple[Workload, dict]:
    w = draw(workloads(mode))
    return w, draw(extras(w))


def _apply(inputs: dict, w: Workload, x: dict) -> dict:
    """Apply ``extras`` to a fresh ``make_inputs`` batch; the result is still a valid input."""
    dev = inputs["target_logits"].device
    inputs["use_fp64"] = x["use_fp64"]
    if "seeds" in x:
        inputs["seed"] = torch.tensor(x["seeds"], dtype=torch.int64, device=dev)
    # Positions near and past 2**31: both sides use them as int32 Philox counters.
    pos = inputs["pos"].to(torch.int64) + x["pos_shift"]
    inputs["pos"] = pos if x["index_dtypes"]["pos"] == torch.int64 else pos.to(torch.int32)

    v = w.vocab_size
    delta = x.get("draft_vocab_delta", 0)
    if delta > 0:  # draft vocab wider: V stays V_target; junk beyond it must never be read
        d = inputs["draft_logits"]
        junk = torch.full((*d.shape[:2], delta), x["pad_value"], dtype=d.dtype, device=dev)
        inputs["draft_logits"] = torch.cat([d, junk], dim=-1)
    elif delta < 0:  # draft vocab narrower: V = V_d; target columns past it must never be read
        v += delta
        inputs["draft_logits"] = inputs["draft_logits"][..., :v].contiguous()
        tokens = inputs["draft_sampled"]
        inputs["draft_sampled"] = torch.where(tokens >= 0, tokens % v, tokens)
        inputs["target_logits"][:, v:] = x["pad_value"]
    if x.get("unmapped_junk") and inputs["draft_logits"] is not None:
        unmapped = torch.ones(inputs["temperature"].shape[0], dtype=torch.bool, device=dev)
        unmapped[inputs["idx_mapping"].long()] = False
        inputs["draft_logits"][unmapped] = math.nan
    if x["row_pad"]:  # row stride V + pad, last stride 1 (allowed); pad holds junk
        t = inputs["target_logits"]
        padded = torch.full((t.shape[0], t.shape[1] + x["row_pad"]), x["pad_value"], dtype=t.dtype, device=dev)
        padded[:, : t.shape[1]] = t
        inputs["target_logits"] = padded[:, : t.shape[1]]
    if "rates" in x:
        inputs["synthetic_conditional_rates"] = torch.tensor(x["rates"], dtype=torch.float32, device=dev)
    for name in INDEX_ARGS:
        if name != "pos":
            inputs[name] = inputs[name].to(x["index_dtypes"][name])
    return inputs


# ---- 1. valid batches: kernel == reference, and the output invariants -----------------------------


@pytest.mark.parametrize("mode", MODES)
@settings(max_examples=MATCH_EXAMPLES, **_COMMON)
@given(data=st.data())
def test_kernel_matches_reference_on_random_batches(device, mode, data):
    """One test per mode, so that each gets its share of examples; everything else is drawn."""
    w, x = data.draw(cases(mode), label="case")
    sampler = data.draw(st.sampled_from(sorted(SAMPLERS)), label="sampler")  # each example runs one
    note(w.name)
    event(f"draft={w.draft}, pattern={w.placeholder_pattern}, ragged={w.ragged}")
    check_against_reference(_apply(make_inputs(w, device=device), w, x), SAMPLERS[sampler])


# fast in both configurations: its small-batch default at these sizes, and the large-batch one
SAMPLERS = {
    "mrv2": rejection_sample,
    "fast": rejection_sample_fast,
    "fast-large-config": functools.partial(rejection_sample_fast, config=fast.LARGE_BATCH_CONFIG),
}


def check_against_reference(inputs: dict, sample=rejection_sample) -> None:
    """Run a Triton sampler (``sample``) and the reference on a valid batch; check property 1."""
    v = inputs["target_logits"].shape[1]
    if inputs["draft_logits"] is not None:
        v = min(v, inputs["draft_logits"].shape[2])
    num_reqs, k = inputs["idx_mapping"].shape[0], inputs["num_speculative_steps"]

    sampled, num_sampled = sample(**inputs)
    assert sampled.shape == (num_reqs, k + 1) and sampled.dtype == torch.int64
    assert num_sampled.shape == (num_reqs,) and num_sampled.dtype == torch.int32
    got = emitted(sampled, num_sampled)
    want = emitted(*reference.rejection_sample(**inputs))

    tokens = inputs["draft_sampled"].tolist()
    greedy = (inputs["temperature"][inputs["idx_mapping"].long()] == 0).tolist()
    for r, ((start, _), m, out) in enumerate(zip(request_rows(inputs), first_placeholder(inputs), got)):
        assert 1 <= len(out) <= m + 1, (r, m, out)  # nothing at or after the first -1 is accepted
        assert all(0 <= t < v for t in out), (r, out)
        assert out[:-1] == tokens[start + 1 : start + len(out)], (r, out)  # accepted = own drafts

    exact = [r for r in range(num_reqs) if greedy[r] and got[r] != want[r]]
    assert not exact, (
        f"greedy requests {exact}: kernel {[got[r] for r in exact]} != reference {[want[r] for r in exact]}"
    )
    random = [r for r in range(num_reqs) if not greedy[r] and got[r] != want[r]]
    assert len(random) <= 0.001 * num_reqs, (
        f"random requests {random}: kernel {[got[r] for r in random]} != reference {[want[r] for r in random]}"
    )


# ---- 2. invalid batches: ValueError naming the argument, before any launch -------------------------

ENTRY_POINTS = {"post": rejection_sample, "fast": rejection_sample_fast, "pre50939": rejection_sample_pre50939}
_ENTRIES = st.sampled_from(sorted(ENTRY_POINTS))


def _small_workloads() -> st.SearchStrategy[Workload]:
    # No kernel runs here, but keep the batches small: make_inputs runs once per example.
    return workloads(max_reqs=5, max_steps=4, max_vocab=64)


def _assert_rejected(entry: str, inputs: dict, blame: set[str], contains: str | None = None) -> None:
    tripwire = LaunchTripwire()
    with mock.patch.object(mrv2, "launch", tripwire), mock.patch.object(fast, "launch", tripwire):
        with pytest.raises(ValueError) as info:
            ENTRY_POINTS[entry](**inputs)
    message = str(info.value)
    name = message.split(":", 1)[0]
    assert name in blame and message.startswith(f"{name}: "), (
        f"blamed {name!r}, expected one of {sorted(blame)}: {message}"
    )
    if contains is not None:
        assert contains in message, message
    assert tripwire.calls == 0


def _present(inputs: dict, names=TENSOR_ARGS) -> list[str]:
    return [n for n in names if inputs.get(n) is not None]


def _with_rates(inputs: dict, w: Workload, data) -> None:
    """Synthetic mode (rates present) for workloads that are not already synthetic."""
    if inputs["synthetic_conditional_rates"] is None and data.draw(st.booleans(), label="add rates"):
        k = w.num_speculative_steps
        inputs["synthetic_conditional_rates"] = torch.full((k,), 0.5, device=inputs["target_logits"].device)
        inputs["use_block_verification"] = False


def _cu_problem(cu: list[int], num_logits: int, k: int) -> bool:
    """Whether prefix sums break a rule of their own (the oracle for the cu_num_logits case)."""
    rows = [b - a for a, b in zip(cu, cu[1:])]
    return cu[0] != 0 or any(n < 1 or n > k + 1 for n in rows) or cu[-1] != num_logits


# Mutations that break a value. Each takes (inputs, workload, data) and returns the arguments
# that may be blamed (and optionally a substring of the message).


def _bad_token(inp, w, data):
    v = inp["target_logits"].shape[1]
    i = data.draw(st.integers(0, inp["draft_sampled"].shape[0] - 1), label="row")
    dtype = data.draw(st.sampled_from([torch.int32, torch.int64]), label="dtype")
    top = 2**31 - 1 if dtype == torch.int32 else 2**63 - 1
    value = data.draw(st.integers(v, top) | st.integers(-top - 1, -2) | st.sampled_from([v, -2]), label="token")
    inp["draft_sampled"] = inp["draft_sampled"].to(dtype)
    inp["draft_sampled"][i] = value
    return {"draft_sampled"}


def _bad_cu_value(inp, w, data):
    cu = inp["cu_num_logits"].tolist()
    j = data.draw(st.integers(0, len(cu) - 1), label="index")
    value = data.draw(st.integers(-3, cu[-1] + 3), label="value")
    assume(value != cu[j])
    cu[j] = value
    inp["cu_num_logits"][j] = value
    if _cu_problem(cu, inp["target_logits"].shape[0], w.num_speculative_steps):
        return {"cu_num_logits"}
    return {"expanded_local_pos"}  # valid prefix sums, but not the ones the rows were laid out by


def _bad_temperature(inp, w, data):
    slot = data.draw(st.integers(0, inp["temperature"].shape[0] - 1), label="slot")
    negative = st.floats(max_value=-(2.0**-100), width=32)
    value = data.draw(st.sampled_from([math.nan, math.inf, -math.inf, -1.0]) | negative, label="temperature")
    inp["temperature"][slot] = value
    return {"temperature"}


def _bad_slot(inp, w, data):
    slots = inp["temperature"].shape[0]
    r = data.draw(st.integers(0, w.num_reqs - 1), label="request")
    value = data.draw(st.integers(slots, 2**31 - 1) | st.integers(-(2**31), -1) | st.just(slots), label="slot")
    inp["idx_mapping"][r] = value
    start, end = request_rows(inp)[r]
    inp["expanded_idx_mapping"][start:end] = value  # kept consistent: the slot itself is to blame
    return {"idx_mapping"}


def _bad_expanded(inp, w, data):
    name = data.draw(st.sampled_from(["expanded_idx_mapping", "expanded_local_pos"]), label="arg")
    i = data.draw(st.integers(0, inp[name].shape[0] - 1), label="row")
    value = data.draw(st.integers(-(2**31), 2**31 - 1), label="value")
    assume(value != int(inp[name][i]))
    inp[name][i] = value
    return {name}


def _bad_rates(inp, w, data):
    k = w.num_speculative_steps
    dev = inp["target_logits"].device
    kind = data.draw(st.sampled_from(["value", "length", "dtype", "with-block"]), label="kind")
    rates = torch.full((k,), 0.5, device=dev)
    if kind == "value":
        i = data.draw(st.integers(0, k - 1), label="step")
        bad = st.sampled_from([math.nan, math.inf, -math.inf]) | st.floats(max_value=-(2.0**-100), width=32)
        rates[i] = data.draw(bad | st.floats(min_value=1.0, exclude_min=True, width=32), label="rate")
    elif kind == "length":
        n = data.draw(st.integers(0, k + 3).filter(lambda n: n != k), label="length")
        rates = torch.full((n,), 0.5, device=dev)
    elif kind == "dtype":
        dtype = data.draw(st.sampled_from([torch.float64, torch.float16, torch.bfloat16, torch.int64]), label="dtype")
        rates = rates.to(dtype)
    else:
        inp["use_block_verification"] = True
    inp["synthetic_conditional_rates"] = rates
    return {"synthetic_conditional_rates"}


VALUE_MUTATIONS = [_bad_token, _bad_cu_value, _bad_temperature, _bad_slot, _bad_expanded, _bad_rates]


@settings(max_examples=INVALID_EXAMPLES, **_COMMON)
@given(w=_small_workloads(), entry=_ENTRIES, mutate=st.sampled_from(VALUE_MUTATIONS), data=st.data())
def test_invalid_values_rejected(device, w, entry, mutate, data):
    """Out-of-range tokens and slots, bad prefix sums, temperatures, expanded metadata, rates."""
    event(mutate.__name__)
    inputs = make_inputs(w, device=device)
    blame = mutate(inputs, w, data)
    _assert_rejected(entry, inputs, blame)


# ---- types, shapes, layouts, devices

_BAD_DTYPES = {
    "logits": [torch.float64, torch.int32, torch.int64, torch.int8, torch.uint8, torch.bool, torch.complex64],
    "index": [torch.float32, torch.float16, torch.float64, torch.int16, torch.int8, torch.uint8, torch.bool],
    "temperature": [torch.float64, torch.float16, torch.bfloat16, torch.int32, torch.int64],
    "seed": [torch.int32, torch.int16, torch.uint8, torch.float64, torch.float32],
    "synthetic_conditional_rates": [torch.float64, torch.float16, torch.bfloat16, torch.int32],
}


def _dtype_kind(name: str) -> str:
    if name in ("target_logits", "draft_logits"):
        return "logits"
    if name in INDEX_ARGS:
        return "index"
    return name


def _wrong_dtype(inp, w, data):
    _with_rates(inp, w, data)
    name = data.draw(st.sampled_from(_present(inp)), label="arg")
    dtype = data.draw(st.sampled_from(_BAD_DTYPES[_dtype_kind(name)]), label="dtype")
    inp[name] = inp[name].to(dtype)
    return {name}


def _wrong_ndim(inp, w, data):
    _with_rates(inp, w, data)
    name = data.draw(st.sampled_from(_present(inp)), label="arg")
    x = inp[name]
    ops = ["unsqueeze-front", "unsqueeze-back"] + (["flatten"] if x.ndim > 1 else ["scalar"] if x.numel() else [])
    op = data.draw(st.sampled_from(ops), label="op")
    inp[name] = {
        "unsqueeze-front": lambda: x[None],
        "unsqueeze-back": lambda: x[..., None],
        "flatten": lambda: x.flatten(),
        "scalar": lambda: x[0],
    }[op]()
    return {name}


def _wrong_length(inp, w, data):
    """Dim 0 (and K for draft_logits) changed; blame the argument or the one it must match."""
    _with_rates(inp, w, data)
    name = data.draw(st.sampled_from(_present(inp)), label="arg")
    x = inp[name]
    dim = data.draw(st.sampled_from([0, 1]), label="dim") if name in ("target_logits", "draft_logits") else 0
    if name == "target_logits" and dim == 1:
        dim = 0  # the target vocab has no length to match (see _empty_vocab for 0)
    new = data.draw(st.integers(0, x.shape[dim] + 3).filter(lambda n: n != x.shape[dim]), label="length")
    if new < x.shape[dim]:
        inp[name] = x.narrow(dim, 0, new).contiguous()
    else:
        extra = x.narrow(dim, 0, 1).expand(*x.shape[:dim], new - x.shape[dim], *x.shape[dim + 1 :])
        inp[name] = torch.cat([x, extra], dim=dim)
    # The argument whose length defines N, R or max_num_reqs blames the first one measured against it.
    follows = {"target_logits": {"draft_sampled"}, "temperature": {"seed"}, "cu_num_logits": {"idx_mapping"}}
    blame = {name} | follows.get(name, set())
    if name == "cu_num_logits" and new == 0:
        blame = {"cu_num_logits"}
    return blame


def _not_contiguous(inp, w, data):
    """A 1-D argument as a strided (stride 2) or broadcast (stride 0) view: the kernels index
    every 1-D tensor as contiguous, so a view would be read at the wrong addresses."""
    _with_rates(inp, w, data)
    names = [n for n in _present(inp) if inp[n].ndim == 1 and inp[n].shape[0] >= 2]
    name = data.draw(st.sampled_from(names), label="arg")
    x = inp[name]
    if data.draw(st.booleans(), label="stride 0"):
        inp[name] = x[:1].expand(x.shape[0])
    else:
        inp[name] = torch.stack([x, x], dim=-1)[:, 0]
    assert not inp[name].is_contiguous()
    return {name}


def _last_stride(inp, w, data):
    name = data.draw(st.sampled_from(_present(inp, ("target_logits", "draft_logits"))), label="arg")
    step = data.draw(st.integers(2, 3), label="stride")
    x = inp[name]
    wide = torch.zeros(*x.shape, step, dtype=x.dtype, device=x.device)
    wide[..., 0] = x
    inp[name] = wide[..., 0]
    return {name}


def _empty_vocab(inp, w, data):
    """V = 0 (target or draft) with every token a placeholder, so no token id is out of range."""
    names = _present(inp, ("target_logits", "draft_logits"))
    name = data.draw(st.sampled_from(names), label="arg")
    inp[name] = inp[name][..., :0]
    inp["draft_sampled"][:] = -1
    return {name}


def _other_device(inp, w, data):
    _with_rates(inp, w, data)
    name = data.draw(st.sampled_from(_present(inp)), label="arg")
    inp[name] = inp[name].to("meta")
    if name == "target_logits":  # everything else is now on the "other" device
        return set(_present(inp)) - {"target_logits"}
    return {name}


def _not_a_tensor(inp, w, data):
    _with_rates(inp, w, data)
    name = data.draw(st.sampled_from(_present(inp)), label="arg")
    x = inp[name]
    options = {"list": lambda: x.tolist(), "numpy": lambda: x.cpu().float().numpy(), "tuple": lambda: tuple(x.shape)}
    if name not in ("draft_logits", "synthetic_conditional_rates"):
        options["None"] = lambda: None  # None means "absent" for the two optional tensors
    if x.ndim == 1 and x.numel():
        options["python scalar"] = lambda: x[0].item()
    inp[name] = options[data.draw(st.sampled_from(sorted(options)), label="as")]()
    return {name}


def _bad_flag(inp, w, data):
    name = data.draw(st.sampled_from(["use_fp64", "use_block_verification"]), label="arg")
    value = data.draw(st.sampled_from([0, 1, None, "True", np.bool_(True), np.bool_(False), 1.0]), label="value")
    if data.draw(st.booleans(), label="tensor"):
        value = torch.tensor(bool(value))
    inp[name] = value
    return {name}


def _bad_num_steps(inp, w, data):
    k = w.num_speculative_steps
    value = data.draw(
        st.sampled_from([0, float(k), True, False, str(k), np.int64(k), None]) | st.integers(-(2**40), 0), label="K"
    )
    inp["num_speculative_steps"] = value
    return {"num_speculative_steps"}


def _other_num_steps(inp, w, data):
    """K off by some amount: blamed on the first argument whose shape carries K, or on the
    prefix sums when a request now has more than K drafts."""
    k = w.num_speculative_steps
    new = data.draw(st.integers(1, k + 3).filter(lambda n: n != k), label="K")
    inp["num_speculative_steps"] = new
    most_drafts = max(b - a - 1 for a, b in request_rows(inp))
    if inp["draft_logits"] is not None:
        blame = {"draft_logits"}
    elif inp["synthetic_conditional_rates"] is not None:
        blame = {"synthetic_conditional_rates"}
    elif most_drafts > new:
        blame = {"cu_num_logits"}
    else:
        assume(False)  # still a valid batch
    return blame | {"num_speculative_steps"}


LAYOUT_MUTATIONS = [
    _wrong_dtype,
    _wrong_ndim,
    _wrong_length,
    _not_contiguous,
    _last_stride,
    _empty_vocab,
    _other_device,
    _not_a_tensor,
    _bad_flag,
    _bad_num_steps,
    _other_num_steps,
]


@settings(max_examples=INVALID_EXAMPLES, **_COMMON)
@given(w=_small_workloads(), entry=_ENTRIES, mutate=st.sampled_from(LAYOUT_MUTATIONS), data=st.data())
def test_invalid_layout_rejected(device, w, entry, mutate, data):
    """Wrong dtype, rank, length, strides, empty vocab, device, type, flags and K."""
    event(mutate.__name__)
    inputs = make_inputs(w, device=device)
    blame = mutate(inputs, w, data)
    _assert_rejected(entry, inputs, blame, contains="meta" if mutate is _other_device else None)


# ---- the gaps the fuzzing found, pinned (a lax validation accepts these) ------------------------


def _strided_draft_sampled(inp: dict) -> None:
    """Stride-2 view: the kernel read draft_sampled[i // 2] for row i, the reference row i."""
    inp["draft_sampled"] = torch.stack([inp["draft_sampled"]] * 2, dim=-1)[:, 0]


def _broadcast_temperature(inp: dict) -> None:
    """Stride 0 over a 1-element storage: the kernel read temperature[slot] past its end."""
    one = torch.full((1,), 0.7, device=inp["temperature"].device)
    inp["temperature"] = one.expand(inp["temperature"].shape[0])


def _no_vocab(inp: dict) -> None:
    """V = 0 with only placeholder tokens: the kernels ran with zero vocab blocks."""
    inp["target_logits"] = inp["target_logits"][:, :0]
    inp["draft_logits"] = None
    inp["draft_sampled"][:] = -1


def _bool_k(inp: dict) -> None:
    """True == 1 passed as K: the launch failed inside Triton (an int1 constexpr)."""
    inp["num_speculative_steps"] = True


@pytest.mark.parametrize(
    "mutate,blame",
    [
        (_strided_draft_sampled, "draft_sampled"),
        (_broadcast_temperature, "temperature"),
        (_no_vocab, "target_logits"),
        (_bool_k, "num_speculative_steps"),
    ],
    ids=["strided-draft_sampled", "broadcast-temperature", "empty-vocab", "bool-K"],
)
@pytest.mark.parametrize("entry", sorted(ENTRY_POINTS))
def test_fuzz_findings_rejected(device, entry, mutate, blame):
    inputs = make_inputs(Workload(num_reqs=3, num_speculative_steps=1, vocab_size=17, seed=1), device=device)
    mutate(inputs)
    _assert_rejected(entry, inputs, {blame})
