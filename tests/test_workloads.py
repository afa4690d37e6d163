"""Tests for specsample.workloads: determinism, layout invariants, placeholders, realism, bytes."""

import dataclasses
import math

import pytest
import torch

from specsample.workloads import (
    DRAFTS,
    MODES,
    PATTERNS,
    PLACEHOLDER_TOKEN_ID,
    Workload,
    bytes_required,
    make_inputs,
)

V = 1000  # small vocab keeps every test fast on CPU

TENSOR_KEYS = (
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
# Everything that does not depend on the device (see the module docstring).
LAYOUT_KEYS = (
    "cu_num_logits",
    "pos",
    "idx_mapping",
    "expanded_idx_mapping",
    "expanded_local_pos",
    "temperature",
    "seed",
)


def small(**kw) -> Workload:
    return Workload(**{"num_reqs": 16, "vocab_size": V, **kw})


def assert_same_inputs(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        x, y = a[key], b[key]
        if isinstance(x, torch.Tensor):
            assert isinstance(y, torch.Tensor) and x.dtype == y.dtype and torch.equal(x, y), key
        else:
            assert x == y, key


def per_request(inputs: dict):
    """Yield (r, slot, n_r, drafts[n_r]) from a make_inputs dict."""
    cu = inputs["cu_num_logits"].tolist()
    for r in range(len(cu) - 1):
        slot = int(inputs["idx_mapping"][r])
        yield r, slot, cu[r + 1] - cu[r] - 1, inputs["draft_sampled"][cu[r] + 1 : cu[r + 1]]


def num_valid(drafts: torch.Tensor) -> int:
    """m_r: valid drafts before the first placeholder."""
    hits = torch.nonzero(drafts == PLACEHOLDER_TOKEN_ID).flatten()
    return int(hits[0]) if hits.numel() else drafts.numel()


# %%
# Determinism
# -----------


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("draft", DRAFTS)
def test_same_spec_gives_identical_tensors(mode, draft):
    w = small(
        mode=mode,
        draft=draft,
        placeholder_density=0.5,
        placeholder_pattern="random",
        ragged=True,
        max_num_reqs=40,
        greedy_fraction=0.25,
    )
    assert_same_inputs(make_inputs(w), make_inputs(w))


def test_different_seeds_differ():
    a, b = make_inputs(small(seed=0, ragged=True)), make_inputs(small(seed=1, ragged=True))
    for key in ("target_logits", "draft_logits", "draft_sampled", "pos", "seed"):
        assert not torch.equal(a[key], b[key]), key


def test_returns_fresh_tensors():
    w = small()
    first = make_inputs(w)
    first["target_logits"].zero_()
    first["draft_sampled"].fill_(PLACEHOLDER_TOKEN_ID)
    assert_same_inputs(make_inputs(w), make_inputs(w))
    assert not torch.equal(make_inputs(w)["target_logits"], first["target_logits"])


def test_other_knobs_leave_logits_and_valid_tokens_alone():
    # Sweeping phi, pattern, mode or draft kind must compare like with like.
    base = make_inputs(small())
    for change in (
        dict(placeholder_density=0.5),
        dict(placeholder_pattern="random", placeholder_density=0.5),
        dict(mode="block"),
        dict(mode="synthetic"),
        dict(draft="one-hot"),
    ):
        other = make_inputs(small(**change))
        assert torch.equal(base["target_logits"], other["target_logits"]), change
        valid = other["draft_sampled"] != PLACEHOLDER_TOKEN_ID
        assert torch.equal(base["draft_sampled"][valid], other["draft_sampled"][valid]), change
        for key in LAYOUT_KEYS:
            assert torch.equal(base[key], other[key]), (change, key)


def test_one_hot_drops_draft_logits_only():
    logits, one_hot = make_inputs(small(draft="logits")), make_inputs(small(draft="one-hot"))
    assert one_hot["draft_logits"] is None
    assert logits["draft_logits"] is not None
    logits["draft_logits"] = None
    assert_same_inputs(logits, one_hot)


# %%
# Layout invariants
# -----------------

LAYOUT_CASES = [
    small(),
    small(num_reqs=1, num_speculative_steps=1),
    small(num_speculative_steps=7, ragged=True, max_num_reqs=53, placeholder_density=0.4, placeholder_pattern="random"),
    small(num_reqs=5, ragged=True, placeholder_pattern="all", mode="greedy"),
    small(vocab_size=2, placeholder_density=0.25),
    small(vocab_size=3, mode="synthetic", draft="one-hot", greedy_fraction=0.5),
    small(target_dtype=torch.bfloat16, draft_dtype=torch.float16, mode="block"),
]


@pytest.mark.parametrize("w", LAYOUT_CASES, ids=lambda w: w.name)
def test_layout_invariants(w):
    x = make_inputs(w)
    R, K, Vw = w.num_reqs, w.num_speculative_steps, w.vocab_size
    M = w.max_num_reqs or R
    cu = x["cu_num_logits"]
    N = int(cu[-1])

    # Shapes and dtypes (spec 1.2).
    assert x["target_logits"].shape == (N, Vw) and x["target_logits"].dtype == w.target_dtype
    assert x["target_logits"].is_contiguous() and torch.isfinite(x["target_logits"].float()).all()
    if w.draft == "logits":
        assert x["draft_logits"].shape == (M, K, Vw) and x["draft_logits"].dtype == w.draft_dtype
        assert torch.isfinite(x["draft_logits"].float()).all()
    else:
        assert x["draft_logits"] is None
    expected = {
        "draft_sampled": (N, torch.int64),
        "cu_num_logits": (R + 1, torch.int32),
        "pos": (N, torch.int32),
        "idx_mapping": (R, torch.int32),
        "expanded_idx_mapping": (N, torch.int32),
        "expanded_local_pos": (N, torch.int32),
        "temperature": (M, torch.float32),
        "seed": (M, torch.int64),
    }
    for key, (numel, dtype) in expected.items():
        assert x[key].shape == (numel,) and x[key].dtype == dtype, key
    assert x["num_speculative_steps"] == K and x["use_fp64"] is False

    # cu_num_logits: starts at 0, steps of n_r + 1 with 0 <= n_r <= K.
    n = (cu[1:] - cu[:-1] - 1).long()
    assert int(cu[0]) == 0 and bool(((n >= 0) & (n <= K)).all())
    if not w.ragged:
        assert bool((n == K).all())

    # Slots: distinct, in range; unused slots are never referenced.
    idx = x["idx_mapping"].long()
    assert idx.unique().numel() == R and bool(((idx >= 0) & (idx < M)).all())
    assert x["seed"].unique().numel() == M

    for r, slot, n_r, drafts in per_request(x):
        rows = slice(int(cu[r]), int(cu[r + 1]))
        assert bool((x["expanded_idx_mapping"][rows] == slot).all())
        assert x["expanded_local_pos"][rows].tolist() == list(range(n_r + 1))
        pos = x["pos"][rows].long()
        assert (pos - pos[0]).tolist() == list(range(n_r + 1)) and int(pos[0]) >= 0
        anchor = int(x["draft_sampled"][cu[r]])
        assert 0 <= anchor < Vw, "anchors are never placeholders"
        assert bool(((drafts == PLACEHOLDER_TOKEN_ID) | ((drafts >= 0) & (drafts < Vw))).all())


@pytest.mark.parametrize("mode", MODES)
def test_mode_flags(mode):
    x = make_inputs(small(mode=mode))
    assert x["use_block_verification"] is (mode == "block")
    rates = x["synthetic_conditional_rates"]
    if mode == "synthetic":
        assert rates.shape == (4,) and rates.dtype == torch.float32
        assert bool((rates[1:] < rates[:-1]).all()) and bool(((rates > 0) & (rates <= 1)).all())
    else:
        assert rates is None


def test_ragged_has_short_requests():
    for w in (
        small(ragged=True),
        small(num_reqs=1, ragged=True),
        small(num_reqs=2, num_speculative_steps=1, ragged=True),
    ):
        n = [n_r for _, _, n_r, _ in per_request(make_inputs(w))]
        assert min(n) < w.num_speculative_steps, w.name
    n = [n_r for _, _, n_r, _ in per_request(make_inputs(small(num_reqs=128, ragged=True)))]
    assert set(n) == set(range(5)), "ragged draws n_r across 0..K"


def test_slots_are_a_permutation_subset_when_larger():
    x = make_inputs(small(max_num_reqs=64))
    assert x["idx_mapping"].tolist() != list(range(16))
    unused = torch.ones(64, dtype=torch.bool)
    unused[x["idx_mapping"].long()] = False
    assert bool((x["draft_logits"][unused] == 0).all())


# %%
# Placeholders
# ------------


@pytest.mark.parametrize("pattern", PATTERNS)
@pytest.mark.parametrize("phi", [0.0, 0.25, 0.3, 0.5, 0.75, 1.0])
@pytest.mark.parametrize("ragged", [False, True])
def test_placeholder_density(pattern, phi, ragged):
    w = small(num_reqs=32, placeholder_density=phi, placeholder_pattern=pattern, ragged=ragged)
    x = make_inputs(w)
    per_req = list(per_request(x))
    S = sum(n_r for _, _, n_r, _ in per_req)
    holes = [int((d == PLACEHOLDER_TOKEN_ID).sum()) for _, _, _, d in per_req]
    if pattern == "all":
        assert sum(holes) == S
        return
    assert sum(holes) == math.floor(phi * S + 0.5), "exact count up to rounding"
    if pattern == "trailing":
        for (_, _, n_r, drafts), c in zip(per_req, holes):
            assert num_valid(drafts) == n_r - c, "placeholders are a suffix"
            assert abs(c - phi * n_r) < 1, "spread evenly: floor or ceil of phi * n_r"


def test_random_pattern_puts_placeholders_mid_block():
    x = make_inputs(small(num_reqs=64, placeholder_density=0.5, placeholder_pattern="random"))
    mid = [
        num_valid(d) < n_r and bool((d[num_valid(d) :] != PLACEHOLDER_TOKEN_ID).any())
        for _, _, n_r, d in per_request(x)
    ]
    assert any(mid), "some valid draft follows a placeholder"


def test_trailing_even_split_for_equal_lengths():
    # phi K = 1.2 with K = 4: every request has 1 or 2 trailing placeholders, 20% of them 2.
    x = make_inputs(small(num_reqs=20, placeholder_density=0.3))
    holes = sorted(int((d == PLACEHOLDER_TOKEN_ID).sum()) for _, _, _, d in per_request(x))
    assert holes == [1] * 16 + [2] * 4


# %%
# Temperatures and realism
# ------------------------


def test_greedy_requests_have_zero_temperature():
    x = make_inputs(small(mode="greedy"))
    assert bool((x["temperature"] == 0).all())
    w = small(num_reqs=40, greedy_fraction=0.25, temperature=0.6, max_num_reqs=50)
    x = make_inputs(w)
    temps = x["temperature"][x["idx_mapping"].long()]
    assert int((temps == 0).sum()) == 10
    assert bool(((temps == 0) | (temps == torch.tensor(0.6))).all())

    # The target is post-temperature: non-greedy rows are the T = 1 rows divided by T, greedy
    # rows stay raw.
    hot = make_inputs(dataclasses.replace(w, temperature=1.0))
    row_temp = x["temperature"][x["expanded_idx_mapping"].long()]
    scale = torch.where(row_temp == 0, 1.0, row_temp)[:, None]
    torch.testing.assert_close(x["target_logits"] * scale, hot["target_logits"])

    # mode="greedy" is greedy_fraction=1 of standard mode, flags and all.
    assert_same_inputs(make_inputs(small(greedy_fraction=1.0)), make_inputs(small(mode="greedy")))


def test_target_looks_like_llm_logits():
    x = make_inputs(small(num_reqs=64))
    top1 = x["target_logits"].float().softmax(dim=1).max(dim=1).values
    assert 0.2 <= float(top1.median()) <= 0.9
    assert float(top1.min()) > 0.1


def acceptance_proxy(x: dict) -> float:
    """Mean of min(1, p(d)/q(d)) over valid non-greedy drafts: the standard per-step rate."""
    rates = []
    for r, slot, _, drafts in per_request(x):
        T = float(x["temperature"][slot])
        row0 = int(x["cu_num_logits"][r])
        for i in range(num_valid(drafts)):
            d = int(drafts[i])
            p = x["target_logits"][row0 + i].float().softmax(dim=0)[d]
            q = (x["draft_logits"][slot, i].float() / T).softmax(dim=0)[d]
            rates.append(min(1.0, float(p / q)))
    return sum(rates) / len(rates)


@pytest.mark.parametrize("temperature", [1.0, 0.6])
def test_standard_acceptance_is_realistic(temperature):
    rate = acceptance_proxy(make_inputs(small(num_reqs=64, temperature=temperature)))
    assert 0.3 <= rate <= 0.95


def test_agreement_knob_orders_acceptance():
    rates = [acceptance_proxy(make_inputs(small(num_reqs=32, agreement=a))) for a in (0.0, 0.4, 0.7, 1.0)]
    assert rates == sorted(rates)
    assert rates[-1] > 0.97, "agreement 1 makes q == p (up to bf16 rounding)"


def test_greedy_drafts_match_argmax_at_agreement_rate():
    x = make_inputs(small(num_reqs=128, mode="greedy"))
    hits = []
    for r, _, _, drafts in per_request(x):
        row0 = int(x["cu_num_logits"][r])
        argmax = x["target_logits"][row0 : row0 + drafts.numel()].argmax(dim=1)
        hits += (drafts == argmax).tolist()
    assert abs(sum(hits) / len(hits) - 0.7) < 0.06  # 512 drafts: ~3 sigma


def test_drafts_follow_draft_distribution():
    # Drafts are draws from q = softmax(draft / T), so they land on high-q tokens: the mean
    # q(d) estimates sum(q^2), far above the 1/V of a draw that ignored q.
    x = make_inputs(small(num_reqs=128))
    q_of_draft, q_squared = [], []
    for _, slot, _, drafts in per_request(x):
        q = x["draft_logits"][slot, 0].float().softmax(dim=0)
        q_of_draft.append(float(q[int(drafts[0])]))
        q_squared.append(float((q * q).sum()))
    mean_q, expected = sum(q_of_draft) / 128, sum(q_squared) / 128
    assert abs(mean_q - expected) < 0.25 * expected and expected > 50 / V


# %%
# Bytes
# -----


def test_bytes_required_hand_computed():
    # R = 2, K = 2, V = 10, phi = 0.5 trailing: each request d_1 valid, d_2 = -1, so m_r = 1.
    w = Workload(num_reqs=2, num_speculative_steps=2, vocab_size=10, placeholder_density=0.5)
    x = make_inputs(w)
    assert x["draft_sampled"].view(2, 3)[:, 2].tolist() == [-1, -1]
    target = 2 * (1 + 1) * 10 * 4  # rows 0..m_r, fp32
    draft = 2 * 1 * 10 * 2  # draft rows 0..m_r-1, bf16
    scanned = 2 * 2 * 8  # d_1 and the -1 that stops the scan, int64
    pos = 2 * 2 * 4  # RNG counters at rows 0..m_r
    sampled = 2 * 2 * 8  # at most m_r + 1 tokens written
    meta = 3 * 4 + 2 * 4 + 2 * (4 + 8)  # cu_num_logits, idx_mapping, temperature + seed
    num_sampled = 2 * 4
    assert bytes_required(w) == target + draft + scanned + pos + sampled + meta + num_sampled == 332

    # One-hot drops the draft rows; greedy drops them and the RNG counters too.
    assert bytes_required(dataclasses.replace(w, draft="one-hot")) == 332 - draft
    assert bytes_required(dataclasses.replace(w, mode="greedy")) == 332 - draft - pos
    # Synthetic adds the K rates.
    assert bytes_required(dataclasses.replace(w, mode="synthetic")) == 332 + 2 * 4


def test_bytes_required_follows_placeholders():
    # All placeholders: only row 0 of each request and no draft rows are needed.
    w = Workload(num_reqs=8, num_speculative_steps=4, vocab_size=V, placeholder_pattern="all")
    R = 8
    expected = R * V * 4 + R * 8 + R * 4 + R * 8 + (R + 1) * 4 + R * 4 + R * 12 + R * 4
    assert bytes_required(w) == expected
    dense = bytes_required(dataclasses.replace(w, placeholder_pattern="trailing"))
    half = bytes_required(dataclasses.replace(w, placeholder_pattern="trailing", placeholder_density=0.5))
    assert expected < half < dense


# %%
# Validation and names
# --------------------

BAD_FIELDS = [
    ("num_reqs", 0),
    ("num_reqs", 2.0),
    ("num_reqs", True),
    ("num_speculative_steps", 0),
    ("vocab_size", 1),
    ("placeholder_density", -0.1),
    ("placeholder_density", 1.5),
    ("placeholder_density", float("nan")),
    ("placeholder_pattern", "middle"),
    ("mode", "fast"),
    ("draft", "none"),
    ("target_dtype", torch.int32),
    ("draft_dtype", torch.float64),
    ("temperature", 0.0),
    ("temperature", float("inf")),
    ("greedy_fraction", 2.0),
    ("agreement", -1.0),
    ("ragged", 1),
    ("max_num_reqs", 3),
    ("seed", -1),
    ("seed", 2**32),
]


@pytest.mark.parametrize("field,value", BAD_FIELDS, ids=[f"{f}={v!r}" for f, v in BAD_FIELDS])
def test_bad_fields_raise_value_error_naming_the_field(field, value):
    with pytest.raises(ValueError, match=field):
        Workload(**{"num_reqs": 4, field: value})


def test_name():
    name = Workload(placeholder_density=0.5, mode="block").name
    assert name == "R128-K4-V151936-phi0.5-trailing-block-logits"
    assert Workload(placeholder_pattern="all").name == "R128-K4-V151936-phi1-all-standard-logits"
    name = Workload(
        num_reqs=8,
        vocab_size=V,
        draft="one-hot",
        temperature=0.6,
        greedy_fraction=0.5,
        ragged=True,
        max_num_reqs=16,
        seed=3,
        draft_dtype=torch.float32,
    ).name
    assert name == "R8-K4-V1000-phi0-trailing-standard-one-hot-dft_fp32-T0.6-g0.5-ragged-M16-s3"
    assert Workload(mode="greedy", temperature=0.6).name == "R128-K4-V151936-phi0-trailing-greedy-logits"


def test_workload_is_hashable_and_frozen():
    w = small()
    assert hash(w) == hash(small()) and w == small()
    with pytest.raises(dataclasses.FrozenInstanceError):
        w.num_reqs = 3


# %%
# Devices
# -------


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_matches_cpu_layout_and_is_deterministic():
    w = small(
        num_reqs=64,
        ragged=True,
        placeholder_density=0.5,
        placeholder_pattern="random",
        max_num_reqs=80,
        greedy_fraction=0.25,
        mode="synthetic",
    )
    cpu, gpu = make_inputs(w), make_inputs(w, device="cuda")
    assert_same_inputs(gpu, make_inputs(w, device="cuda"))
    for key in LAYOUT_KEYS + ("synthetic_conditional_rates",):
        assert torch.equal(cpu[key], gpu[key].cpu()), key
    holes = PLACEHOLDER_TOKEN_ID
    assert torch.equal(cpu["draft_sampled"] == holes, gpu["draft_sampled"].cpu() == holes)
    on_host = {k: v.cpu() if isinstance(v, torch.Tensor) else v for k, v in gpu.items()}
    assert 0.3 <= acceptance_proxy(on_host) <= 0.95
