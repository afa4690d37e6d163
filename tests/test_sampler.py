"""The Triton sampler against the PyTorch reference, and PR #50939's placeholder semantics.

On a machine without CUDA the kernels run under TRITON_INTERPRET=1 on CPU tensors, so shapes
stay small (V=257 is deliberately not a power of two). Every input is a fresh seeded random
workload, never zeros. Distribution-level checks of the sampling law live in
``test_distributions.py``; here the kernel must reproduce the reference draw for draw.
"""

from __future__ import annotations

import warnings

import pytest
import torch
from batches import emitted, first_placeholder, split_requests, trial_batch, truncate_at_placeholders
from conftest import HAS_CUDA, compile_for_sm90, gpu

from specsample import reference, rejection_sample
from specsample import rejection_sample_fast
from specsample.reference import express as express_reference
from specsample.sampler import rejection_sample_express
from specsample.workloads import Workload, make_inputs

V = 257  # not a multiple of any block size
R = 12
K = 3


# Every test runs on each Triton sampler: mrv2 (the upstream design) and fast (same algorithm
# and random numbers, less work); both must reproduce the reference.
SAMPLERS = {"mrv2": rejection_sample, "fast": rejection_sample_fast}


@pytest.fixture(params=list(SAMPLERS))
def sampler(request):
    return SAMPLERS[request.param]


def _run_both(sampler, inputs: dict) -> tuple[list[list[int]], list[list[int]]]:
    got = emitted(*sampler(**inputs))
    want = emitted(*reference.rejection_sample(**inputs))
    return got, want


def _assert_matches(got: list[list[int]], want: list[list[int]], exact: bool) -> None:
    """Greedy must be identical. Random modes may differ where fp32 reduction order flips a
    draw sitting on a threshold: count those and bound them at 0.1% of requests."""
    mismatches = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
    if exact:
        assert not mismatches, (
            f"requests {mismatches}: kernel {[got[i] for i in mismatches]} != reference {[want[i] for i in mismatches]}"
        )
    else:
        assert len(mismatches) <= 0.001 * len(got), f"{len(mismatches)} of {len(got)} requests differ: {mismatches}"


CASES = [
    # (mode, draft, pattern, density, extra Workload fields)
    ("greedy", "logits", "trailing", 0.0, {}),
    ("greedy", "one-hot", "random", 0.4, {}),
    ("standard", "logits", "trailing", 0.0, {}),
    ("standard", "logits", "trailing", 0.5, {}),
    ("standard", "one-hot", "random", 0.4, {}),
    ("standard", "logits", "all", 1.0, {}),
    ("block", "logits", "trailing", 0.0, {}),
    ("block", "logits", "random", 0.4, {}),
    ("block", "one-hot", "trailing", 0.5, {}),
    ("block", "one-hot", "all", 1.0, {}),
    ("synthetic", "logits", "random", 0.3, {}),
    ("synthetic", "one-hot", "trailing", 0.0, {"greedy_fraction": 0.5}),
    ("standard", "logits", "trailing", 0.25, {"target_dtype": torch.bfloat16, "draft_dtype": torch.float32}),
    ("block", "logits", "random", 0.25, {"draft_dtype": torch.float16, "temperature": 0.6}),
    ("standard", "logits", "random", 0.2, {"greedy_fraction": 0.5, "ragged": True}),
    ("block", "logits", "trailing", 0.3, {"greedy_fraction": 0.3, "ragged": True, "max_num_reqs": 20}),
]


@pytest.mark.parametrize(
    "mode,draft,pattern,density,extra",
    CASES,
    ids=[f"{m}-{d}-{p}{x}-{'-'.join(sorted(e))}".rstrip("-") for m, d, p, x, e in CASES],
)
def test_kernel_matches_reference(sampler, device, mode, draft, pattern, density, extra):
    w = Workload(
        num_reqs=R,
        num_speculative_steps=K,
        vocab_size=V,
        mode=mode,
        draft=draft,
        placeholder_pattern=pattern,
        placeholder_density=density,
        seed=11,
        **extra,
    )
    inputs = make_inputs(w, device=device)
    got, want = _run_both(sampler, inputs)
    _assert_matches(got, want, exact=(mode == "greedy"))
    for tokens in got:
        assert all(0 <= t < V for t in tokens), tokens


@pytest.mark.parametrize("mode", ["standard", "block"])
def test_fp64_noise_matches_reference(sampler, device, mode):
    w = Workload(num_reqs=R, num_speculative_steps=K, vocab_size=V, mode=mode, placeholder_density=0.3, seed=5)
    inputs = make_inputs(w, device=device) | {"use_fp64": True}
    got, want = _run_both(sampler, inputs)
    _assert_matches(got, want, exact=False)


# ---- placeholder semantics of PR #50939 --------------------------------------------------------


@pytest.mark.parametrize("mode", ["greedy", "standard", "block", "synthetic"])
@pytest.mark.parametrize("draft", ["logits", "one-hot"])
def test_truncation_invariant(sampler, device, mode, draft):
    """m valid drafts then -1s give exactly the output of the request cut to m drafts (5.4)."""
    w = Workload(
        num_reqs=R,
        num_speculative_steps=K,
        vocab_size=V,
        mode=mode,
        draft=draft,
        placeholder_pattern="random",
        placeholder_density=0.4,
        seed=3,
    )
    inputs = make_inputs(w, device=device)
    assert any(m < K for m in first_placeholder(inputs)), "workload has no placeholder"
    full = emitted(*sampler(**inputs))
    cut = emitted(*sampler(**truncate_at_placeholders(inputs)))
    assert full == cut


@pytest.mark.parametrize("mode", ["greedy", "standard", "block", "synthetic"])
def test_placeholder_never_accepted(sampler, device, mode):
    w = Workload(
        num_reqs=R,
        num_speculative_steps=K,
        vocab_size=V,
        mode=mode,
        placeholder_pattern="random",
        placeholder_density=0.5,
        agreement=0.95,
        seed=8,
    )
    inputs = make_inputs(w, device=device)
    sampled, num_sampled = sampler(**inputs)
    for m, n, tokens in zip(first_placeholder(inputs), num_sampled.tolist(), emitted(sampled, num_sampled)):
        assert 1 <= n <= m + 1  # nothing at or after the first -1 is accepted
        assert all(0 <= t < V for t in tokens)


def _equal_target_draft_batch(device: str, trials: int) -> dict:
    """Target == draft distribution (acceptance ~1); d_2 = -1 with a valid d_3 after it."""
    g = torch.Generator().manual_seed(0)
    target = torch.randn(V, generator=g).to(device)
    inputs = trial_batch(target, target.clone(), K, 1.0, trials, generator=g)
    tokens = inputs["draft_sampled"].view(trials, K + 1)
    tokens[:, 2] = -1
    return inputs


@pytest.mark.parametrize("use_block_verification", [False, True], ids=["standard", "block"])
def test_placeholder_blocks_later_draft_tokens(sampler, device, use_block_verification):
    trials = 128 if device == "cpu" else 16384
    inputs = _equal_target_draft_batch(device, trials) | {"use_block_verification": use_block_verification}
    _, num_sampled = sampler(**inputs)
    assert int(num_sampled.max()) <= 2
    assert float((num_sampled == 2).float().mean()) > 0.9  # acceptance really reaches the -1


def test_greedy_placeholder_emits_target_argmax(sampler, device):
    trials = 64 if device == "cpu" else 512
    g = torch.Generator().manual_seed(1)
    target = torch.randn(V, generator=g).to(device)
    best = int(target.argmax())
    drafts = torch.tensor([[best, -1, -1]]).expand(trials, K)
    inputs = trial_batch(target, None, K, 0.0, trials, generator=g, draft_tokens=drafts)
    sampled, num_sampled = sampler(**inputs)
    assert (num_sampled == 2).all()
    assert (sampled[:, :2] == best).all()


@pytest.mark.parametrize("has_draft_logits", [True, False], ids=["draft-logits", "one-hot"])
@pytest.mark.parametrize("num_placeholders", [1, 2])
def test_block_verification_placeholder_truncates_block(sampler, device, has_draft_logits, num_placeholders):
    """Trailing -1s end the block: at most num_real + 1 tokens, and exactly the output of the
    same requests with only the real drafts (the last real draft gets h = p_m; the next row is
    sampled from the plain target). The sampling law itself is checked in test_distributions."""
    trials = 48 if device == "cpu" else 4096
    g = torch.Generator().manual_seed(2)
    target = torch.randn(V, generator=g).to(device)
    draft = (target + 0.5 * torch.randn(V, generator=g).to(device)) if has_draft_logits else None
    inputs = trial_batch(target, draft, K, 1.0, trials, generator=g) | {"use_block_verification": True}
    inputs["draft_sampled"].view(trials, K + 1)[:, K + 1 - num_placeholders :] = -1
    num_real = K - num_placeholders
    sampled, num_sampled = sampler(**inputs)
    assert int(num_sampled.max()) <= num_real + 1
    assert emitted(sampled, num_sampled) == emitted(*sampler(**truncate_at_placeholders(inputs)))


# ---- determinism and batch layout --------------------------------------------------------------


@pytest.mark.parametrize("mode", ["standard", "block"])
def test_seeded_determinism_and_chunking(sampler, device, mode):
    """Same seeds -> same output; running requests in two chunks changes nothing (the RNG is
    keyed by (seed, pos), not by batch position). Rows are non-contiguous (stride V + 3)."""
    w = Workload(
        num_reqs=R,
        num_speculative_steps=K,
        vocab_size=V,
        mode=mode,
        placeholder_density=0.25,
        placeholder_pattern="random",
        ragged=True,
        seed=21,
    )
    inputs = make_inputs(w, device=device)
    padded = torch.zeros(inputs["target_logits"].shape[0], V + 3, device=device)
    padded[:, :V] = inputs["target_logits"]
    inputs["target_logits"] = padded[:, :V]
    first = emitted(*sampler(**inputs))
    assert first == emitted(*sampler(**inputs))
    split = R // 3
    chunks = emitted(*sampler(**split_requests(inputs, 0, split)))
    chunks += emitted(*sampler(**split_requests(inputs, split, R)))
    assert chunks == first


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_all_nan_target_logits_in_range(sampler, device, temperature):
    """V = 20000 is 3 stats blocks padded to 4: NaN maxima must not select a padded block."""
    v, k, trials = 20000, 1, 2
    g = torch.Generator().manual_seed(4)
    target = torch.full((v,), float("nan")).to(device)
    drafts = torch.randint(0, v, (trials, k), generator=g)
    inputs = trial_batch(target, None, k, temperature, trials, generator=g, draft_tokens=drafts)
    sampled, num_sampled = sampler(**inputs)
    assert ((1 <= num_sampled) & (num_sampled <= k + 1)).all()
    for tokens in emitted(sampled, num_sampled):
        assert all(0 <= t < v for t in tokens)


def test_placeholder_draft_token_rejected(sampler, device):
    trials, k = 64, 1
    g = torch.Generator().manual_seed(6)
    target = torch.randn(V, generator=g).to(device)
    drafts = torch.full((trials, k), -1)
    inputs = trial_batch(target, target * 0.6, k, 0.6, trials, generator=g, draft_tokens=drafts)
    sampled, num_sampled = sampler(**inputs)
    assert (num_sampled == 1).all()
    assert ((sampled[:, 0] >= 0) & (sampled[:, 0] < V)).all()


# ---- large indices (GPU) -----------------------------------------------------------------------


@gpu
@pytest.mark.large_memory  # 2**31-element inputs: scripts/gpu-check.sh runs these one at a time
@pytest.mark.parametrize("mode", ["greedy", "standard", "block"])
def test_large_index_matches_reference(sampler, mode):
    """N * V > 2**31: V = 262144 with N = 8200 rows (R = 1640, K = 4). Offsets must be int64.
    The reference runs on the last 40 requests only (their rows sit past 2**31 elements)."""
    w = Workload(
        num_reqs=1640,
        num_speculative_steps=4,
        vocab_size=262144,
        mode=mode,
        placeholder_density=0.25,
        placeholder_pattern="random",
        seed=9,
    )
    inputs = make_inputs(w, device="cuda")
    assert inputs["target_logits"].numel() > 2**31
    sampled, num_sampled = sampler(**inputs)
    tail = split_requests(inputs, 1600, 1640)
    want = emitted(*reference.rejection_sample(**tail))
    got = emitted(sampled[1600:], num_sampled[1600:])
    _assert_matches(got, want, exact=(mode == "greedy"))


@gpu
@pytest.mark.parametrize("mode", ["greedy", "standard", "block"])
@pytest.mark.parametrize("draft", ["logits", "one-hot"])
def test_production_vocab_matches_reference(sampler, mode, draft):
    w = Workload(
        num_reqs=128,
        num_speculative_steps=4,
        vocab_size=151936,
        mode=mode,
        draft=draft,
        placeholder_density=0.5,
        placeholder_pattern="trailing",
        seed=12,
    )
    inputs = make_inputs(w, device="cuda")
    got, want = _run_both(sampler, inputs)
    _assert_matches(got, want, exact=(mode == "greedy"))


@pytest.mark.skipif(HAS_CUDA, reason="the interpreter's fix; kernels are compiled where CUDA is")
@pytest.mark.parametrize("mode", ["greedy", "block"])
def test_interpreter_converts_scalars_as_numpy_2_4_requires(mode):
    """numpy 2.4 refuses ``int()`` of a one-element array, which Triton 3.6's interpreter uses
    for a kernel's ``range(0, num_drafts)`` (triton-lang/triton#9171): on the H200 box (numpy
    2.4+) every interpreted kernel failed. numpy < 2.4 warns where 2.4 raises; with the warning
    an error, the kernels of every in-tree pipeline still run and match the reference."""
    w = Workload(num_reqs=2, num_speculative_steps=2, vocab_size=300, mode=mode, seed=5)
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="Conversion of an array with ndim > 0 to a scalar")
        inputs = make_inputs(w, device="cpu")
        expected = emitted(*reference.rejection_sample(**inputs))
        assert emitted(*rejection_sample(**inputs)) == expected
        assert emitted(*rejection_sample_fast(**inputs)) == expected
        assert emitted(*rejection_sample_express(**inputs)) == emitted(*express_reference.rejection_sample(**inputs))


@pytest.mark.parametrize(
    "sampler,config,mode,draft,kernels",
    [
        ("mrv2", None, "block", "logits", 6),  # stats, cum_log_p, residual_mass, rejection, resample, insert
        ("mrv2-pre50939", None, "block", "logits", 6),
        ("mrv2", None, "greedy", "one-hot", 4),
        ("fast", "large", "block", "logits", 6),
        ("fast", "tiny", "greedy", "one-hot", 3),
    ],
)
def test_kernels_compile_for_sm90(sampler, config, mode, draft, kernels):
    """mrv2's, the pre-#50939 replica's and fast's kernels compile for sm_90 with 16-bit logits,
    as express's do (tests/test_express.py). The interpreter does not run Triton's code
    generator: a call that leaves a str constexpr of a helper to its default passes every CPU
    test and does not compile on a GPU (Triton 3.6: "'str' object has no attribute 'type'").
    Compiled on the CPU with Triton's bundled ptxas (``scripts/express_sass.py --sampler``, no
    GPU needed)."""
    args = ["--sampler", sampler, "--mode", mode, "--draft", draft, "--num-reqs", "4"]
    args += ["--target-dtype", "bfloat16", "--draft-dtype", "float16"] + (["--config", config] if config else [])
    assert len(compile_for_sm90(args)) == kernels
