"""The vectorized sampler (:mod:`specsample.reference.batched`, the ``torch-eager`` subject)
against the readable reference (:mod:`specsample.reference.mrv2`): draw for draw, and without
host synchronisation.

Both are PyTorch on the same device and draw the same Philox numbers, so they must emit the same
tokens. They are not bit-identical in every intermediate: the batched code reduces over
``[rows, V]`` tensors of other shapes (and on CPU an elementwise ``exp``/``log`` may take the
vectorised or the scalar path depending on where an element falls), so a statistic can differ
by an ulp. That flips a decision only when a comparison sits within an ulp of its threshold or
two Gumbel scores tie within an ulp, probability ~1e-7 per decision; on CPU every case below is
exact. On CUDA the reduction trees also depend on the tensor shape, so there the comparison
allows :data:`CUDA_FLIPS` differing requests per call, as tests/test_subjects.py does for the
subject against mrv2's kernels.
"""

from __future__ import annotations

import pytest
import torch
from batches import emitted, trial_batch
from conftest import gpu

from specsample import subjects
from specsample.reference import batched, mrv2, philox
from specsample.workloads import Workload, make_inputs

CUDA_FLIPS = 1  # per call of R <= 64 requests; 0 on CPU

MODES = ("greedy", "standard", "block", "synthetic")
DRAFTS = ("logits", "one-hot")
PATTERNS = ("trailing", "random", "all")


def _assert_same(inputs: dict, device: str, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """Both samplers on ``inputs``: equal counts and emitted tokens, ``-1`` past them."""
    ref_s, ref_n = mrv2.rejection_sample(**inputs, **kwargs)
    s, n = batched.rejection_sample(**inputs, **kwargs)
    assert s.shape == ref_s.shape and s.dtype == torch.int64 and n.dtype == torch.int32
    ref, ours = emitted(ref_s, ref_n), emitted(s, n)
    differing = sum(a != b for a, b in zip(ref, ours))
    assert differing <= (0 if device == "cpu" else CUDA_FLIPS), [
        (r, a, b) for r, (a, b) in enumerate(zip(ref, ours)) if a != b
    ]
    cols = torch.arange(s.shape[1], device=s.device)
    assert bool((s[cols >= n[:, None].long()] == -1).all())
    return s, n


def _workload(mode: str, draft: str, seed: int, **kw) -> Workload:
    pattern = PATTERNS[seed % len(PATTERNS)]
    base = dict(
        num_reqs=24,
        num_speculative_steps=4,
        vocab_size=257,
        mode=mode,
        draft=draft,
        placeholder_density=0.3,
        placeholder_pattern=pattern,
        ragged=seed % 2 == 1,
        greedy_fraction=0.0 if mode == "greedy" else 0.3,
        temperature=0.7 if seed % 2 else 1.0,
        agreement=0.9,
        max_num_reqs=29,
        seed=100 + seed,
    )
    return Workload(**{**base, **kw})


# ---- draw for draw ------------------------------------------------------------------------------


@pytest.mark.parametrize("draft", DRAFTS)
@pytest.mark.parametrize("mode", MODES)
def test_matches_reference(device, mode, draft):
    """Fresh inputs per seed: placeholders trailing / random / all, ragged or not, mixed
    temperatures, sparse slots, fp32 and fp64 noise."""
    for seed in range(3):
        inputs = make_inputs(_workload(mode, draft, seed), device=device)
        for use_fp64 in (False, True):
            _assert_same(inputs | {"use_fp64": use_fp64}, device)


@pytest.mark.parametrize(
    "target_dtype,draft_dtype",
    [(torch.float16, torch.float16), (torch.bfloat16, torch.bfloat16), (torch.bfloat16, torch.float32)],
    ids=["fp16", "bf16", "bf16-fp32"],
)
@pytest.mark.parametrize("mode", ["greedy", "standard", "block"])
def test_matches_reference_low_precision(device, mode, target_dtype, draft_dtype):
    for draft in DRAFTS:
        w = _workload(mode, draft, 1, target_dtype=target_dtype, draft_dtype=draft_dtype, num_reqs=16)
        _assert_same(make_inputs(w, device=device), device)


@pytest.mark.parametrize(
    "num_reqs,k,vocab",
    [(1, 4, 257), (1, 1, 2), (7, 1, 3), (9, 2, 1001), (5, 7, 31)],
    ids=["R1", "R1-K1-V2", "K1-V3", "V1001", "K7"],
)
def test_matches_reference_odd_shapes(device, num_reqs, k, vocab):
    for mode in MODES:
        for draft in DRAFTS:
            w = _workload(
                mode,
                draft,
                num_reqs,
                num_reqs=num_reqs,
                num_speculative_steps=k,
                vocab_size=vocab,
                max_num_reqs=None,
                ragged=False,
            )
            _assert_same(make_inputs(w, device=device), device)


def test_unequal_vocab_and_strided_rows(device):
    """``V = min(V_target, V_draft)``, either side wider; target rows with a padded stride."""
    w = _workload("block", "logits", 2, vocab_size=200)
    inputs = make_inputs(w, device=device)
    target, draft = inputs["target_logits"], inputs["draft_logits"]
    padded = torch.randn(target.shape[0], 211, device=device)
    padded[:, :200] = target
    wide_draft = torch.cat([draft, torch.randn(*draft.shape[:2], 9, device=device).to(draft.dtype)], dim=2)
    for mode_kw in ({}, {"use_block_verification": False}):
        _assert_same(inputs | {"target_logits": padded[:, :205]} | mode_kw, device)  # target wider
        _assert_same(inputs | {"draft_logits": wide_draft} | mode_kw, device)  # draft wider
        _assert_same(inputs | {"target_logits": padded[:, :200]} | mode_kw, device)  # strided rows


@pytest.mark.parametrize("mode", ["standard", "block"])
def test_int64_positions_and_int32_drafts(device, mode):
    """Positions past 2**31 (cast to int32 for the Philox counter, wrapping) and int32 drafts."""
    inputs = make_inputs(_workload(mode, "logits", 1, num_reqs=12), device=device)
    inputs["pos"] = inputs["pos"].to(torch.int64) + 3 * 2**31 + 12345
    inputs["draft_sampled"] = inputs["draft_sampled"].to(torch.int32)
    _assert_same(inputs, device)


@pytest.mark.parametrize("mode", MODES)
def test_nan_and_inf_logits(device, mode):
    """NaN is -inf to every argmax; +-inf logits are kept (spec: the NaN guards of #50910)."""
    for draft in DRAFTS:
        inputs = make_inputs(_workload(mode, draft, 0, num_reqs=12, placeholder_density=0.0), device=device)
        target = inputs["target_logits"]
        target[0:3] = float("nan")  # the first request's rows, all NaN
        target[5, ::7] = float("nan")
        target[8, 3] = float("inf")
        target[11, 10:] = float("-inf")
        if inputs["draft_logits"] is not None:
            inputs["draft_logits"][inputs["idx_mapping"][4].long(), 1, 5] = float("-inf")
        s, n = _assert_same(inputs, device)
        assert all(0 <= t < target.shape[1] for toks in emitted(s, n) for t in toks)


def test_placeholder_in_the_middle_stops_block_verification(device):
    """target == draft, d_2 = -1 with a valid d_3 after it (spec 5.3, the bug of #50939)."""
    g = torch.Generator().manual_seed(0)
    target = torch.randn(64, generator=g).to(device)
    inputs = trial_batch(target, target.clone(), 3, 1.0, 96, generator=g)
    inputs["draft_sampled"].view(96, 4)[:, 2] = -1
    _, n = _assert_same(inputs, device, use_block_verification=True)
    assert int(n.max()) == 2


def test_block_residual_after_a_partial_prefix(device):
    """Block verification that accepts d_1..d_tau with p_tau < 1 and then rejects: the residual
    is ``max(p_tau * p - q, 0)``. Rare in LLM-like workloads, so built here: one target and
    one draft row, far apart, repeated over trials."""
    g = torch.Generator().manual_seed(0)
    vocab, k, trials = 12, 3, 512
    target, draft = 1.5 * torch.randn(vocab, generator=g), 1.5 * torch.randn(vocab, generator=g)
    inputs = trial_batch(target.to(device), draft.to(device), k, 1.0, trials, generator=g)
    _, n = _assert_same(inputs, device, use_block_verification=True)
    # The case is exercised: trials resampled after 0 < tau < K accepted drafts with L_tau < 0.
    log_ratio = (torch.log_softmax(target.double(), -1) - torch.log_softmax(draft.double(), -1)).tolist()
    drafts = inputs["draft_sampled"].view(trials, k + 1)[:, 1:].tolist()
    hits = 0
    for tau, d in zip((n.cpu() - 1).tolist(), drafts):
        cum = 0.0
        for i in range(tau):
            cum = min(cum + log_ratio[d[i]], 0.0)
        hits += 0 < tau < k and cum < 0
    assert hits >= 30


@pytest.mark.parametrize("mode", ["standard", "block"])
@pytest.mark.parametrize("draft", DRAFTS)
def test_chunked_passes_match(device, mode, draft, monkeypatch):
    """Production vocabularies split every pass into row chunks and the noise into vocabulary
    chunks; tiny chunk sizes take those paths here (uneven last chunks included)."""
    w = _workload(mode, draft, 1, vocab_size=293, greedy_fraction=0.25)
    inputs = make_inputs(w, device=device)
    expected = batched.rejection_sample(**inputs)
    monkeypatch.setattr(batched, "_ROW_CHUNK_ELEMS", 5 * 293 + 17)  # 5 rows, or 1 request of K rows
    monkeypatch.setattr(batched, "_NOISE_CHUNK_ELEMS", 5 * 41)  # 41 tokens per noise chunk
    for use_fp64 in (False, True):
        s, n = _assert_same(inputs | {"use_fp64": use_fp64}, device)
        if not use_fp64 and device == "cpu":  # CUDA reductions may round per chunk shape
            assert torch.equal(s, expected[0]) and torch.equal(n, expected[1])


# ---- the random numbers ---------------------------------------------------------------------


def test_philox_words_match_readable_module():
    """The int64 fast path (wrapping products, lazy masking) against philox.randint4x."""
    g = torch.Generator().manual_seed(1)
    seeds = torch.randint(-(2**63), 2**63 - 1, (40, 1), generator=g, dtype=torch.int64)
    seeds[:9, 0] = torch.tensor([0, 1, -1, 2**31, 2**32 - 1, 2**32, 2**63 - 1, -(2**63), 7])
    offsets = torch.randint(-(2**31), 2**31 - 1, (1, 500), generator=g, dtype=torch.int64).to(torch.int32)
    offsets[0, :4] = torch.tensor([0, -1, 2**31 - 1, -(2**31)], dtype=torch.int32)
    w0, w1, _, _ = philox.randint4x(seeds, offsets)
    ours = batched._philox(seeds, offsets.to(torch.int64) & 0xFFFFFFFF, 2)
    assert torch.equal(ours[0], w0) and torch.equal(ours[1], w1)
    assert torch.equal(batched._uniform(ours[0]), philox.rand_clamped(seeds, offsets))
    # Gumbel keys: uint32 words held in int64 (high key word 0).
    gseed = w0[:, :1]
    tokens = torch.arange(300, dtype=torch.int32)
    assert torch.equal(batched._philox(gseed, tokens.to(torch.int64))[0], philox.randint(gseed, tokens))


@pytest.mark.parametrize("use_fp64", [False, True])
def test_gumbel_argmax_matches_reference_noise(use_fp64, monkeypatch):
    g = torch.Generator().manual_seed(2)
    rho = torch.randn(6, 333, generator=g)
    rho[1] = float("-inf")  # a row with nothing to sample: index 0, as nan_safe_argmax gives
    rho[2, 100:] = float("-inf")
    gseed = torch.randint(0, 2**32, (6,), generator=g, dtype=torch.int64)
    noise = mrv2.gumbel_noise(gseed, 333, use_fp64=use_fp64)
    expected = mrv2.nan_safe_argmax((rho.double() if use_fp64 else rho) + noise)
    monkeypatch.setattr(batched, "_NOISE_CHUNK_ELEMS", 6 * 50)
    assert torch.equal(batched._gumbel_argmax(rho, gseed, use_fp64), expected)
    assert int(expected[1]) == 0


# ---- no host synchronisation ----------------------------------------------------------------


def _meta(inputs: dict) -> dict:
    return {k: v.to("meta") if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}


@pytest.mark.parametrize("mode", MODES)
def test_runs_on_meta_tensors(mode):
    """Meta tensors have shapes and no data: any host read (``.item()``, ``.tolist()``,
    ``nonzero``, a boolean mask, a data-dependent shape) raises. The batched sampler runs through;
    the readable reference, which reads its metadata back, does not."""
    for draft in DRAFTS:
        inputs = _meta(make_inputs(_workload(mode, draft, 1, num_reqs=6, vocab_size=64), device="cpu"))
        for use_fp64 in (False, True):
            s, n = batched.rejection_sample(**inputs | {"use_fp64": use_fp64})
            assert s.device.type == "meta" and s.shape == (6, 5) and n.shape == (6,)
    with pytest.raises((RuntimeError, NotImplementedError)):
        mrv2.rejection_sample(**inputs)


def test_no_host_reads_on_cpu(monkeypatch):
    """On CPU: every Python-level way to read a tensor's value raises during the call."""
    calls = {}
    for mode in MODES:
        for draft in DRAFTS:
            inputs = make_inputs(_workload(mode, draft, 2, num_reqs=8), device="cpu")
            calls[mode, draft] = (inputs, mrv2.rejection_sample(**inputs))

    def forbidden(*args, **kwargs):
        raise AssertionError("host read of a tensor value inside the batched sampler")

    for name in ("item", "tolist", "numpy", "nonzero", "__bool__", "__int__", "__float__", "__index__"):
        monkeypatch.setattr(torch.Tensor, name, forbidden)
    monkeypatch.setattr(torch, "nonzero", forbidden)
    results = {key: batched.rejection_sample(**inputs) for key, (inputs, _) in calls.items()}
    monkeypatch.undo()
    for key, (_, expected) in calls.items():
        assert emitted(*results[key]) == emitted(*expected), key


@gpu
@pytest.mark.parametrize("mode", MODES)
def test_no_sync_and_graph_capture_on_cuda(mode):
    """Under ``set_sync_debug_mode("error")`` any synchronising call raises; the call is then
    captured in a CUDA graph and replayed, giving the eager result."""
    inputs = make_inputs(_workload(mode, "logits", 0, num_reqs=32, max_num_reqs=40, vocab_size=4096), device="cuda")
    eager = batched.rejection_sample(**inputs)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        batched.rejection_sample(**inputs)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        batched.rejection_sample(**inputs)  # warm-up on a side stream, as graph capture wants
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = batched.rejection_sample(**inputs)
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(captured[0], eager[0]) and torch.equal(captured[1], eager[1])


@gpu
def test_memory_at_production_shape():
    """R=512, K=4, V=151936, fp32 target, bf16 draft logits, block verification: a few GB at
    most beyond the inputs (about 1 GB expected with the default chunk sizes)."""
    w = Workload(num_reqs=512, num_speculative_steps=4, vocab_size=151936, mode="block")
    inputs = make_inputs(w, device="cuda")
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    base = torch.cuda.memory_allocated()
    batched.rejection_sample(**inputs)
    torch.cuda.synchronize()
    assert torch.cuda.max_memory_allocated() - base < 3 * 2**30


# ---- the subject ------------------------------------------------------------------------------


def test_torch_eager_subject_is_the_batched_sampler(device):
    subject = subjects.get("torch-eager")
    assert "vectorized PyTorch" in subject.summary and "CUDA-graph capturable" in subject.summary
    assert subject.provenance["module"] == batched.__name__
    w = _workload("block", "logits", 1, num_reqs=8)
    inputs = make_inputs(w, device=device)
    prepared = subject.prepare(w, device, inputs)
    assert prepared.graph_capturable
    s, n = prepared.finish(prepared.call())
    ref = batched.rejection_sample(**inputs)
    assert torch.equal(s, ref[0]) and torch.equal(n, ref[1])
