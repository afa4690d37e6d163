"""The ``express`` sampler (:mod:`specsample.kernels.express`) and its own reference
(:mod:`specsample.reference.express`): every test kind mrv2 has, adapted to express's stream.

1. **The stream and the pick**: the kernels' uniforms are the reference's, bit for bit; the
   inverse-CDF pick's ties and fallbacks.
2. **Draw for draw**: the kernels emit exactly the reference's tokens on fresh random batches in
   every mode (greedy, standard, block, synthetic), with draft logits and one-hot drafts,
   fp32/bf16/fp16 logits, ``-1`` placeholders, mixed temperatures, ragged requests, vocab sizes
   that end mid-block (2, 257, 2049, 8193, 151937), R = 1, shifted positions and any int64 seeds;
   and the acceptance decisions are mrv2's (same uniforms, same tests).
3. **Determinism and batch layout**: the same inputs give the same tokens; splitting the batch,
   reordering its requests, padding it (strided rows, junk past V, more requests in other slots)
   or changing the launch configuration changes no request's tokens.
4. **Placeholders** (spec 5.4 and the upstream tests of PR #50939).
5. **Exact in distribution**: chi-square of the token at every position against the exact
   target distribution, the standard acceptance law, block >= standard in acceptance, synthetic
   rates, placeholder truncation -- on a vocabulary of four sampling blocks (the last one token
   wide), so both levels of the sampler are exercised. On CPU the reference carries the power
   (1,024 trials; the kernel is tied to it draw for draw above) and the interpreted kernel runs
   two smoke cases at V = 8; the kernel's own runs at 81,920 trials are ``gpu`` tests.
6. The pipeline's stages (``specsample.measure.stage_calls``), validation, the subject.
7. The masked-vocabulary block skip (``skip_masked_vocab_blocks``): the same tokens with it as
   without it and as the reference, at every mask fraction of the PathsMasked sweep, in every
   mode and draft kind, with placeholders, and with one live block a row; the masked blocks of
   a tested row never reach a partial.

Under the interpreter every kernel program costs milliseconds, so CPU batches stay small; the
whole file takes about 1.5 minutes on 2 CPU cores.
"""

from __future__ import annotations

import math
import zlib
from dataclasses import dataclass, replace
from functools import lru_cache
from unittest import mock

import pytest
import torch
import triton
import triton.language as tl
from batches import emitted, first_placeholder, split_requests, trial_batch, truncate_at_placeholders
from conftest import LaunchTripwire, compile_for_sm90, gpu, on_cpu, on_gpu_box
from hypothesis import given, note, settings
from hypothesis import strategies as st
from stats import FALSE_FAILURE, assert_follows
from test_fuzz import _apply, cases

from specsample import measure, semantics, subjects
from specsample.kernels import common, express
from specsample.kernels.express import streams
from specsample.reference import express as ref
from specsample.reference import mrv2 as mrv2_ref
from specsample.reference import philox
from specsample.sampler import rejection_sample_express
from specsample.workloads import Workload, make_inputs

V, R, K = 257, 8, 3
BLOCK = express.SAMPLE_BLOCK


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """The reference is thousands of tiny CPU ops: one intra-op thread is several times faster
    than two on a 2-core box (OpenMP's hand-off costs more than the ops)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _assert_same(got: list[list[int]], want: list[list[int]], what: str = "") -> None:
    differ = [i for i, (g, w) in enumerate(zip(got, want)) if g != w]
    assert len(got) == len(want) and not differ, (
        f"{what}: requests {differ}: kernel {[got[i] for i in differ]} != reference {[want[i] for i in differ]}"
    )


def _check(inputs: dict, **kwargs) -> list[list[int]]:
    """Run the express kernels on ``inputs`` and check them against the reference, draw for
    draw, and against the placeholder semantics (specsample.semantics); return the tokens."""
    sampled, num_sampled = rejection_sample_express(**inputs, **kwargs)
    assert sampled.dtype == torch.int64 and num_sampled.dtype == torch.int32
    broken = semantics.violation(inputs, sampled, num_sampled)
    assert broken is None, broken
    got = emitted(sampled, num_sampled)
    _assert_same(got, emitted(*ref.rejection_sample(**inputs)))
    return got


# ---------------------------------------------------------------------------------------------
# 1. The stream and the pick
# ---------------------------------------------------------------------------------------------


@triton.jit
def _stream_probe(seed_ptr, pos_ptr, out_u_ptr, out_row_ptr, out_block_ptr, NB: tl.constexpr):
    i = tl.program_id(0)
    block = tl.program_id(1)
    seed = tl.load(seed_ptr + i)
    position = tl.load(pos_ptr + i)
    tl.store(out_u_ptr + i, common._uniform(seed, position))
    tl.store(out_row_ptr + i, streams._row_uniform(seed, position))
    tl.store(out_block_ptr + i * NB + block, streams._block_uniform(seed, position, block))


def test_stream_matches_reference(device):
    """Acceptance (mrv2's tl.rand, clamped), level-1 and level-2 uniforms, for seeds across the
    int64 range and positions across the int32 range (negative ones wrap to uint32)."""
    seeds = torch.tensor([0, 1, -1, 2**62 + 12345, -(2**63), 7**20, 2**31, 42], dtype=torch.int64)
    pos = torch.tensor([0, 1, -1, 2**31 - 1, -(2**31), 123456, 8191, 5], dtype=torch.int32)
    nb = 4
    out_u = torch.empty(len(seeds), dtype=torch.float32)
    out_row = torch.empty(len(seeds), dtype=torch.float64)
    out_block = torch.empty(len(seeds), nb, dtype=torch.float64)
    args = [t.to(device) for t in (seeds, pos, out_u, out_row, out_block)]
    _stream_probe[(len(seeds), nb)](*args, NB=nb)
    u, row, block = (t.cpu() for t in args[2:])
    assert torch.equal(u, philox.rand_clamped(seeds, pos))
    assert torch.equal(row, ref.row_uniform(seeds, pos))
    assert torch.equal(block, ref.block_uniform(seeds[:, None], pos[:, None], torch.arange(nb)[None, :]))
    assert ((0 <= row) & (row < 1)).all() and ((0 <= block) & (block < 1)).all()
    assert len(set(block.flatten().tolist())) == block.numel()  # distinct counters, distinct draws


@triton.jit
def _pick_probe(w_ptr, u_ptr, out_ptr, SIZE: tl.constexpr):
    i = tl.program_id(0)
    w = tl.load(w_ptr + i * SIZE + tl.arange(0, SIZE))
    index, total = streams._pick(w, tl.load(u_ptr + i), SIZE)
    tl.store(out_ptr + i, index)


def test_pick_ties_and_fallbacks(device):
    """Zero weights are never picked (whatever the prefix sums' rounding); u * total at or past
    the last prefix (u = 1 here; the stream's u < 1, but rounding of the sums can do the same)
    falls back to the last positive weight; all-zero weights give index 0."""
    size = 8
    top = 1.0 - 2.0**-53
    rows = [
        ([0, 0, 1, 0, 0, 1, 0, 0], 0.0, 2),  # u = 0: the first positive weight, not index 0
        ([0, 0, 1, 0, 0, 1, 0, 0], 0.5, 5),  # exactly on the boundary: prefix > u * total is strict
        ([0, 0, 1, 0, 0, 1, 0, 0], top, 5),
        ([1, 0, 0, 0, 0, 0, 0, 0], top, 0),
        ([0, 0, 0, 0, 0, 0, 0, 3], 0.3, 7),
        ([0, 0, 0, 0, 0, 0, 0, 0], 0.3, 0),  # nothing positive
        ([0, 0, 1, 0, 0, 1, 0, 0], 1.0, 5),  # u * total at every prefix (as rounding can make it): the last positive
        ([1, 2, 0, 0, 0, 0, 0, 0], 1.0, 1),
        ([1e-300, 1, 1e300, 0, 0, 0, 0, 1e-300], top, 2),
        ([1, 2, 3, 4, 0, 0, 0, 0], 0.45, 2),  # prefixes 1, 3, 6, 10 against 4.5
    ]
    w = torch.tensor([r[0] for r in rows], dtype=torch.float64)
    u = torch.tensor([r[1] for r in rows], dtype=torch.float64)
    out = torch.empty(len(rows), dtype=torch.int32, device=device)
    _pick_probe[(len(rows),)](w.to(device), u.to(device), out, SIZE=size)
    want = [r[2] for r in rows]
    assert out.cpu().tolist() == want
    assert ref.pick(w, u)[0].tolist() == want
    # many uniforms on weights with zeros: never a zero weight, and the reference agrees
    g = torch.Generator().manual_seed(3)
    w = torch.rand(64, size, generator=g, dtype=torch.float64) * (torch.rand(64, size, generator=g) < 0.4)
    u = torch.rand(64, generator=g, dtype=torch.float64)
    out = torch.empty(64, dtype=torch.int32, device=device)
    _pick_probe[(64,)](w.to(device), u.to(device), out, SIZE=size)
    index = out.cpu().long()
    assert torch.equal(index, ref.pick(w, u)[0])
    picked = w.gather(1, index[:, None]).flatten()
    assert ((picked > 0) | (w.sum(1) == 0)).all()


# ---------------------------------------------------------------------------------------------
# 2. Draw for draw against the reference
# ---------------------------------------------------------------------------------------------

CASES = [
    # (mode, draft, pattern, density, extra Workload fields)
    ("greedy", "logits", "trailing", 0.0, {}),
    ("greedy", "one-hot", "random", 0.4, {"ragged": True}),
    ("standard", "logits", "trailing", 0.5, {}),
    ("standard", "one-hot", "random", 0.4, {}),
    ("standard", "logits", "all", 1.0, {}),
    ("block", "logits", "trailing", 0.0, {}),
    ("block", "logits", "random", 0.4, {"agreement": 0.95}),
    ("block", "one-hot", "trailing", 0.5, {}),
    ("synthetic", "logits", "random", 0.3, {}),
    ("synthetic", "one-hot", "trailing", 0.0, {"greedy_fraction": 0.5}),
    ("standard", "logits", "trailing", 0.25, {"target_dtype": torch.bfloat16, "draft_dtype": torch.float32}),
    (
        "block",
        "logits",
        "random",
        0.25,
        {"target_dtype": torch.float16, "draft_dtype": torch.float16, "temperature": 0.6},
    ),
    ("standard", "logits", "random", 0.2, {"greedy_fraction": 0.5, "ragged": True}),
    ("block", "one-hot", "random", 0.3, {"greedy_fraction": 0.3, "ragged": True, "max_num_reqs": 12}),
]


@pytest.mark.parametrize(
    "mode,draft,pattern,density,extra",
    CASES,
    ids=[f"{m}-{d}-{p}{x}-{'-'.join(sorted(e))}".rstrip("-") for m, d, p, x, e in CASES],
)
def test_kernel_matches_reference(device, mode, draft, pattern, density, extra):
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
    _check(make_inputs(w, device=device))


def _mixed_temperatures(inputs: dict, seed: int) -> dict:
    """A different temperature per slot (0.3-2.0), greedy slots kept at 0."""
    g = torch.Generator().manual_seed(seed)
    t = inputs["temperature"]
    mixed = (0.3 + 1.7 * torch.rand(t.shape[0], generator=g)).to(t.device)
    inputs["temperature"] = torch.where(t == 0, t, mixed)
    return inputs


@pytest.mark.parametrize("mode", ["standard", "block", "synthetic"])
def test_mixed_temperatures_shifted_positions_any_seeds(device, mode):
    w = Workload(
        num_reqs=R,
        num_speculative_steps=K,
        vocab_size=V,
        mode=mode,
        placeholder_pattern="random",
        placeholder_density=0.3,
        greedy_fraction=0.25,
        seed=12,
    )
    inputs = _mixed_temperatures(make_inputs(w, device=device), 12)
    inputs["pos"] = inputs["pos"].to(torch.int64) + (2**32 - 5)  # past 2**31: wraps as the int32 counter
    g = torch.Generator().manual_seed(13)
    inputs["seed"] = torch.randint(-(2**63), 2**63 - 1, inputs["seed"].shape, generator=g).to(device)
    _check(inputs)


VOCAB_CASES = [
    # (V, R, K, mode, draft): vocabularies that end one entry into a block, or hold two tokens
    (2, 4, 3, "standard", "logits"),
    (2049, 3, 2, "block", "logits"),
    (8193, 3, 2, "standard", "logits"),
    (8193, 3, 2, "block", "one-hot"),
    (8193, 2, 2, "greedy", "logits"),
    (151937, 1, 2, "standard", "logits"),
    (151937, 1, 1, "block", "one-hot"),
]


@pytest.mark.parametrize(
    "vocab,num_reqs,k,mode,draft", VOCAB_CASES, ids=[f"V{c[0]}-R{c[1]}-K{c[2]}-{c[3]}-{c[4]}" for c in VOCAB_CASES]
)
def test_awkward_vocab_sizes_match_reference(device, vocab, num_reqs, k, mode, draft):
    w = Workload(
        num_reqs=num_reqs,
        num_speculative_steps=k,
        vocab_size=vocab,
        mode=mode,
        draft=draft,
        placeholder_pattern="random",
        placeholder_density=0.25,
        agreement=0.5,
        seed=vocab % 97,
    )
    _check(make_inputs(w, device=device))


@pytest.mark.parametrize("mode,draft", [("standard", "logits"), ("block", "one-hot"), ("greedy", "logits")])
def test_single_request_matches_reference(device, mode, draft):
    w = Workload(num_reqs=1, num_speculative_steps=4, vocab_size=V, mode=mode, draft=draft, seed=14)
    _check(make_inputs(w, device=device))


def test_fp64_flag_changes_nothing(device):
    w = Workload(num_reqs=R, num_speculative_steps=K, vocab_size=V, mode="block", placeholder_density=0.3, seed=15)
    inputs = make_inputs(w, device=device)
    _check(inputs | {"use_fp64": True})  # the reference ignores the flag too


@settings(max_examples=12 if not torch.cuda.is_available() else 6, deadline=None, derandomize=True, database=None)
@given(data=st.data())
def test_random_batches_match_reference(device, data):
    """test_fuzz's valid-batch strategy (every Workload field, plus padded rows, junk past V, a
    wider or narrower draft vocab, int32/int64 indices, shifted positions, any seeds)."""
    w, x = data.draw(cases(), label="case")
    config = data.draw(st.sampled_from(sorted(CONFIGS)), label="config")
    note(w.name)
    _check(_apply(make_inputs(w, device=device), w, x), config=CONFIGS[config])


@pytest.mark.parametrize("mode", ["greedy", "standard", "block", "synthetic"])
@pytest.mark.parametrize("draft", ["logits", "one-hot"])
def test_acceptance_is_mrv2s(mode, draft):
    """Same acceptance uniforms and tests as mrv2 (compared in fp64 instead of fp32): the same
    accepted counts on the same inputs, and in greedy mode the same tokens (references; the
    kernels equal their references above)."""
    w = Workload(
        num_reqs=24,
        num_speculative_steps=4,
        vocab_size=3000,
        mode=mode,
        draft=draft,
        placeholder_pattern="random",
        placeholder_density=0.2,
        greedy_fraction=0.25,
        seed=16,
    )
    inputs = make_inputs(w)
    ours = ref.rejection_sample(**inputs)
    theirs = mrv2_ref.rejection_sample(**inputs)
    assert torch.equal(ours[1], theirs[1])
    greedy = (inputs["temperature"][inputs["idx_mapping"].long()] == 0).tolist()
    for g, a, b in zip(greedy, emitted(*ours), emitted(*theirs)):
        assert a[:-1] == b[:-1] and (a == b or not g)


# ---------------------------------------------------------------------------------------------
# 3. Determinism and batch layout
# ---------------------------------------------------------------------------------------------


def _gather_requests(inputs: dict, order: list[int]) -> dict:
    """The batch with its requests in ``order`` (slots, seeds, positions and logits unchanged)."""
    cu = inputs["cu_num_logits"].tolist()
    rows = [i for r in order for i in range(cu[r], cu[r + 1])]
    idx = torch.tensor(rows, dtype=torch.long, device=inputs["target_logits"].device)
    counts = torch.tensor([cu[r + 1] - cu[r] for r in order])
    out = dict(inputs)
    for name in ("target_logits", "draft_sampled", "pos", "expanded_idx_mapping"):
        out[name] = inputs[name][idx].contiguous()
    out["cu_num_logits"] = torch.cat([torch.zeros(1, dtype=torch.long), counts.cumsum(0)]).to(inputs["cu_num_logits"])
    out["idx_mapping"] = inputs["idx_mapping"][torch.tensor(order, device=idx.device)].contiguous()
    out["expanded_local_pos"] = torch.cat([torch.arange(int(c)) for c in counts]).to(inputs["expanded_local_pos"])
    return out


def _pad(inputs: dict, extra_requests: int = 2) -> dict:
    """The same requests, padded: rows of stride V + 5 with NaN past V, draft logits 3 entries
    wider (junk), and ``extra_requests`` more requests (copies of the first ones) in new slots
    with their own seeds, appended after the originals."""
    dev = inputs["target_logits"].device
    t = inputs["target_logits"]
    cu = inputs["cu_num_logits"].tolist()
    num_slots = inputs["temperature"].shape[0]
    copies = list(range(extra_requests))
    extra_rows = torch.tensor([i for r in copies for i in range(cu[r], cu[r + 1])], dtype=torch.long, device=dev)
    rows = torch.cat([t, t[extra_rows]])
    padded = torch.full((rows.shape[0], t.shape[1] + 5), math.nan, dtype=t.dtype, device=dev)
    padded[:, : t.shape[1]] = rows
    out = dict(inputs)
    out["target_logits"] = padded[:, : t.shape[1]]
    new_slots = torch.arange(num_slots, num_slots + extra_requests, dtype=inputs["idx_mapping"].dtype, device=dev)
    old_slots = inputs["idx_mapping"][:extra_requests].long()
    out["temperature"] = torch.cat([inputs["temperature"], inputs["temperature"][old_slots]])
    out["seed"] = torch.cat([inputs["seed"], inputs["seed"][old_slots] + 977])
    if inputs["draft_logits"] is not None:
        d = torch.cat([inputs["draft_logits"], inputs["draft_logits"][old_slots]])
        junk = torch.full((*d.shape[:2], 3), 1e4, dtype=d.dtype, device=dev)
        out["draft_logits"] = torch.cat([d, junk], dim=-1)
    counts = [cu[r + 1] - cu[r] for r in copies]
    out["draft_sampled"] = torch.cat([inputs["draft_sampled"], inputs["draft_sampled"][extra_rows]])
    out["pos"] = torch.cat([inputs["pos"], inputs["pos"][extra_rows]])
    out["cu_num_logits"] = torch.cat(
        [inputs["cu_num_logits"], cu[-1] + torch.tensor(counts).cumsum(0).to(inputs["cu_num_logits"])]
    )
    out["idx_mapping"] = torch.cat([inputs["idx_mapping"], new_slots])
    out["expanded_idx_mapping"] = torch.cat(
        [inputs["expanded_idx_mapping"], new_slots.repeat_interleave(torch.tensor(counts, device=dev))]
    )
    out["expanded_local_pos"] = torch.cat(
        [inputs["expanded_local_pos"], torch.cat([torch.arange(c) for c in counts]).to(inputs["expanded_local_pos"])]
    )
    return out


def _layout_batch(device: str, mode: str, draft: str) -> dict:
    w = Workload(
        num_reqs=6,
        num_speculative_steps=K,
        vocab_size=V,
        mode=mode,
        draft=draft,
        placeholder_pattern="random",
        placeholder_density=0.25,
        greedy_fraction=0.2,
        ragged=True,
        max_num_reqs=8,
        seed=21,
    )
    return _mixed_temperatures(make_inputs(w, device=device), 21)


def _layouts(inputs: dict, sample) -> dict[str, list[list[int]]]:
    """The tokens of the batch's requests (in the original order) under each layout."""
    n = inputs["idx_mapping"].shape[0]
    out = {"full": emitted(*sample(**inputs)), "again": emitted(*sample(**inputs))}
    out["split"] = emitted(*sample(**split_requests(inputs, 0, 2))) + emitted(*sample(**split_requests(inputs, 2, n)))
    order = list(range(n))[::-1]
    reordered = emitted(*sample(**_gather_requests(inputs, order)))
    out["reordered"] = [reordered[order.index(r)] for r in range(n)]
    out["padded"] = emitted(*sample(**_pad(inputs)))[:n]
    return out


@pytest.mark.parametrize("mode,draft", [("block", "logits"), ("standard", "one-hot")])
def test_deterministic_and_independent_of_batch_layout(device, mode, draft):
    """Same inputs twice, two chunks, the requests reversed, padded (strided NaN-padded rows, a
    wider draft vocab with junk, two more requests in new slots): every request's tokens are
    the same. Mixed temperatures, ragged requests, random placeholders."""
    inputs = _layout_batch(device, mode, draft)
    outs = _layouts(inputs, rejection_sample_express)
    for name, tokens in outs.items():
        assert tokens == outs["full"], name
    _assert_same(outs["full"], emitted(*ref.rejection_sample(**inputs)))


@pytest.mark.parametrize("mode", ["greedy", "standard", "block", "synthetic"])
@pytest.mark.parametrize("draft", ["logits", "one-hot"])
def test_reference_independent_of_batch_layout(mode, draft):
    outs = _layouts(_layout_batch("cpu", mode, draft), ref.rejection_sample)
    for name, tokens in outs.items():
        assert tokens == outs["full"], name


CONFIGS = {
    "small": express.SMALL_BATCH_CONFIG,  # fused insert
    "large": express.LARGE_BATCH_CONFIG,  # insert kernel
    # stats programs of one and of eight sampling blocks
    "narrow": express.Config(stats_blocks=1, stats_warps=2, fused_insert=True),
    "wide": express.Config(stats_blocks=8),
    # the persistent resample pass with one program an SM (two programs on a CPU): each loops over
    # tiles of several requests
    "persistent": express.Config(resample_programs=1),
}


@pytest.mark.parametrize("draft", ["logits", "one-hot"])
def test_configuration_changes_no_draw(device, draft):
    """The launch geometry (the only thing R selects) never changes a token: V = 8193 is five
    sampling blocks, so stats programs of 1, 2, 4 and 8 blocks cut it differently; the insert is
    fused into the resample kernel or not; the resample pass is a grid or persistent."""
    w = Workload(
        num_reqs=3,
        num_speculative_steps=2,
        vocab_size=8193,
        mode="block",
        draft=draft,
        placeholder_pattern="random",
        placeholder_density=0.2,
        greedy_fraction=0.3,
        seed=22,
    )
    inputs = make_inputs(w, device=device)
    outs = {name: emitted(*express.launch(**inputs, config=c)) for name, c in CONFIGS.items()}
    for name, tokens in outs.items():
        assert tokens == outs["small"], name


@pytest.mark.parametrize(
    "mode,draft", [("greedy", "logits"), ("standard", "logits"), ("standard", "one-hot"), ("synthetic", "logits")]
)
def test_large_batch_config_matches_reference(device, mode, draft):
    """The insert kernel (the large-batch configuration) on the small batches the other tests
    run with the fused insert."""
    w = Workload(
        num_reqs=R,
        num_speculative_steps=K,
        vocab_size=V,
        mode=mode,
        draft=draft,
        placeholder_pattern="random",
        placeholder_density=0.3,
        greedy_fraction=0.25,
        ragged=True,
        seed=23,
    )
    _check(make_inputs(w, device=device), config=express.LARGE_BATCH_CONFIG)


def test_default_config_follows_the_batch_size():
    assert (
        express.default_config(1) == express.default_config(express.SMALL_BATCH_BELOW - 1) == express.SMALL_BATCH_CONFIG
    )
    assert express.default_config(express.SMALL_BATCH_BELOW) == express.LARGE_BATCH_CONFIG
    assert express.SMALL_BATCH_CONFIG.fused_insert and not express.LARGE_BATCH_CONFIG.fused_insert
    stages = [name for name, _ in express.Pipeline(**make_inputs(Workload(num_reqs=2, vocab_size=V))).stages()]
    assert stages == ["stats", "rejection", "resample"]
    with pytest.raises(ValueError, match="stats_blocks"):
        express.Config(stats_blocks=3)
    with pytest.raises(ValueError, match="stats_warps"):
        express.Config(stats_warps=3)
    with pytest.raises(ValueError, match="resample_programs"):
        express.Config(resample_programs=33)
    with pytest.raises(ValueError, match="resample_programs"):
        express.Config(resample_programs=4, fused_insert=True)


def _persistent_batch(
    mode: str, num_reqs: int, vocab: int, device: str, seed: int, greedy_fraction: float
) -> tuple[Workload, dict]:
    """A one-hot batch of mixed plans (random placeholders, greedy requests, ragged) for the
    persistent resample pass."""
    w = Workload(
        num_reqs=num_reqs,
        num_speculative_steps=4,
        vocab_size=vocab,
        mode=mode,
        draft="one-hot",
        placeholder_pattern="random",
        placeholder_density=0.3,
        greedy_fraction=greedy_fraction,
        ragged=True,
        seed=seed,
    )
    return w, make_inputs(w, device=device)


@pytest.mark.parametrize("mode", ["greedy", "standard", "block", "synthetic"])
def test_persistent_resample_matches_reference(device, mode, monkeypatch):
    """The resample pass as two looping programs (two multiprocessors, one program each, on any
    device): each takes every other tile of the requests with work, across requests (V = 4100 is
    three sampling blocks), and requests whose plan needs no row pass (greedy rejections,
    one-hot residuals, d_1 a placeholder) are left out of the list. One-hot drafts: with draft
    logits the pipeline keeps the grid (checked last)."""
    monkeypatch.setattr(express.pipeline, "_multiprocessors", lambda device: 2)
    w, inputs = _persistent_batch(mode, 7, 4100, device, seed=31, greedy_fraction=0.3)
    config = express.Config(resample_programs=1)
    assert express.Pipeline(**inputs, config=config).resample_persistent_programs == 2
    _check(inputs, config=config)
    logits = make_inputs(replace(w, draft="logits"), device=device)
    assert express.Pipeline(**logits, config=config).resample_persistent_programs == 0


def test_first_placeholder_reads_row_zero_in_stats(device):
    """A non-greedy request whose d_1 is a placeholder (or that has no draft) samples row 0's
    target: the stats kernel reads that row and the rejection kernel draws level 1 from its
    partials, so the resample pass has no row to read for it."""
    w = Workload(
        num_reqs=4, num_speculative_steps=3, vocab_size=4100, mode="standard", placeholder_pattern="all", seed=32
    )
    inputs = make_inputs(w, device=device)
    pipe = express.Pipeline(**inputs, config=express.LARGE_BATCH_CONFIG)
    pipe.target_local_max.fill_(float("nan"))
    pipe.run()
    assert not torch.isnan(pipe.target_local_max[inputs["cu_num_logits"][:-1].long()]).any()
    assert (pipe.plan == express.rejection.PLAN_TARGET_DRAWN.value).all()  # level 1 drawn by the rejection kernel
    _assert_same(emitted(pipe.sampled, pipe.num_sampled), emitted(*ref.rejection_sample(**inputs)))


# ---------------------------------------------------------------------------------------------
# 4. Placeholders (spec 5.4; the upstream tests of PR #50939)
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("mode,draft", [("block", "logits"), ("standard", "one-hot"), ("greedy", "logits")])
def test_truncation_invariant(device, mode, draft):
    """m valid drafts then -1s give exactly the output of the request cut to m drafts."""
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
    assert emitted(*rejection_sample_express(**inputs)) == emitted(
        *rejection_sample_express(**truncate_at_placeholders(inputs))
    )


@pytest.mark.parametrize("mode", ["greedy", "standard", "block", "synthetic"])
@pytest.mark.parametrize("draft", ["logits", "one-hot"])
def test_reference_truncation_invariant(mode, draft):
    w = Workload(
        num_reqs=16,
        num_speculative_steps=4,
        vocab_size=3000,
        mode=mode,
        draft=draft,
        placeholder_pattern="random",
        placeholder_density=0.4,
        seed=4,
    )
    inputs = make_inputs(w)
    assert emitted(*ref.rejection_sample(**inputs)) == emitted(
        *ref.rejection_sample(**truncate_at_placeholders(inputs))
    )


def _equal_target_draft_batch(device: str, trials: int) -> dict:
    """Target == draft distribution (acceptance ~1); d_2 = -1 with a valid d_3 after it."""
    g = torch.Generator().manual_seed(0)
    target = torch.randn(V, generator=g).to(device)
    inputs = trial_batch(target, target.clone(), K, 1.0, trials, generator=g)
    inputs["draft_sampled"].view(trials, K + 1)[:, 2] = -1
    return inputs


@pytest.mark.parametrize("use_block_verification", [False, True], ids=["standard", "block"])
def test_placeholder_blocks_later_draft_tokens(device, use_block_verification):
    trials = 32 if device == "cpu" else 16384
    inputs = _equal_target_draft_batch(device, trials) | {"use_block_verification": use_block_verification}
    _, num_sampled = rejection_sample_express(**inputs)
    assert int(num_sampled.max()) <= 2
    assert float((num_sampled == 2).float().mean()) > 0.9  # acceptance really reaches the -1


def test_greedy_placeholder_emits_target_argmax(device):
    trials = 16 if device == "cpu" else 512
    g = torch.Generator().manual_seed(1)
    target = torch.randn(V, generator=g).to(device)
    best = int(target.argmax())
    drafts = torch.tensor([[best, -1, -1]]).expand(trials, K)
    inputs = trial_batch(target, None, K, 0.0, trials, generator=g, draft_tokens=drafts)
    sampled, num_sampled = rejection_sample_express(**inputs)
    assert (num_sampled == 2).all()
    assert (sampled[:, :2] == best).all()


@pytest.mark.parametrize(
    "has_draft_logits,num_placeholders", [(True, 1), (False, 2)], ids=["draft-logits-1", "one-hot-2"]
)
def test_block_verification_placeholder_truncates_block(device, has_draft_logits, num_placeholders):
    trials = 12 if device == "cpu" else 4096
    g = torch.Generator().manual_seed(2)
    target = torch.randn(V, generator=g).to(device)
    draft = (target + 0.5 * torch.randn(V, generator=g).to(device)) if has_draft_logits else None
    inputs = trial_batch(target, draft, K, 1.0, trials, generator=g) | {"use_block_verification": True}
    inputs["draft_sampled"].view(trials, K + 1)[:, K + 1 - num_placeholders :] = -1
    sampled, num_sampled = rejection_sample_express(**inputs)
    assert int(num_sampled.max()) <= K - num_placeholders + 1
    assert emitted(sampled, num_sampled) == emitted(*rejection_sample_express(**truncate_at_placeholders(inputs)))


@pytest.mark.parametrize("temperature", [0.0, 1.0])
def test_all_nan_target_logits_in_range(device, temperature):
    """V = 20000 is ten sampling blocks: all-NaN rows must neither read out of bounds nor emit
    a token outside [0, V) (every weight is 0: the pick's last fallback, token 0)."""
    v, k, trials = 20000, 1, 2
    g = torch.Generator().manual_seed(4)
    target = torch.full((v,), float("nan")).to(device)
    drafts = torch.randint(0, v, (trials, k), generator=g)
    inputs = trial_batch(target, None, k, temperature, trials, generator=g, draft_tokens=drafts)
    sampled, num_sampled = rejection_sample_express(**inputs)
    assert ((1 <= num_sampled) & (num_sampled <= k + 1)).all()
    for tokens in emitted(sampled, num_sampled):
        assert all(0 <= t < v for t in tokens)


def test_placeholder_draft_token_rejected(device):
    trials, k = 16, 1
    g = torch.Generator().manual_seed(6)
    target = torch.randn(V, generator=g).to(device)
    drafts = torch.full((trials, k), -1)
    inputs = trial_batch(target, target * 0.6, k, 0.6, trials, generator=g, draft_tokens=drafts)
    sampled, num_sampled = rejection_sample_express(**inputs)
    assert (num_sampled == 1).all()
    assert ((sampled[:, 0] >= 0) & (sampled[:, 0] < V)).all()


# ---------------------------------------------------------------------------------------------
# 5. Exact in distribution
# ---------------------------------------------------------------------------------------------

SPIKE_MASS = 0.4
V_MULTI = 3 * BLOCK + 1  # four sampling blocks, the last one token wide
SYNTHETIC_RATES = (0.9, 0.5, 0.2)  # unconditional P(accepted >= i + 1)


@dataclass(frozen=True)
class Case:
    k: int = 3
    temperature: float = 1.0
    draft: str = "logits"
    draft_dtype: torch.dtype = torch.float32
    block: bool = False
    num_placeholders: int = 0
    rates: tuple[float, ...] | None = None

    @property
    def id(self) -> str:
        parts = [f"K{self.k}", f"T{self.temperature:g}", self.draft]
        if self.draft == "logits" and self.draft_dtype != torch.float32:
            parts.append(str(self.draft_dtype).replace("torch.", ""))
        if self.block:
            parts.append("block")
        if self.num_placeholders:
            parts.append(f"{self.num_placeholders}ph")
        if self.rates:
            parts.append("synthetic")
        return "-".join(parts)


def _size(device: str, sampler: str) -> tuple[int, int]:
    """(V, trials): the reference on the CPU everywhere, the kernel at the spec's size on CUDA
    and at smoke size under the interpreter."""
    if sampler == "reference":
        return V_MULTI, 1024
    return (V_MULTI, 81920) if device == "cuda" else (8, 32)


@lru_cache(maxsize=None)
def _rows(vocab: int, temperature: float, draft_dtype: torch.dtype) -> tuple[torch.Tensor, torch.Tensor]:
    """(target row already divided by T, fp32; draft row pre-temperature). A peaked row: one
    spike token holding SPIKE_MASS at T = 1 and, past 16 tokens, 15 more head tokens spread over
    every sampling block (the last token of the vocabulary, alone in its block, among them)
    above a bulk that holds a few percent."""
    g = torch.Generator().manual_seed(2000 + vocab)
    raw = torch.randn(vocab, generator=g, dtype=torch.float64)
    if vocab > 16:
        raw -= 4.0
        heads = torch.randperm(vocab - 1, generator=g)[:15].tolist() + [vocab - 1]
        raw[heads] = torch.randn(len(heads), generator=g, dtype=torch.float64) + 3.0
        spike = heads[0]
    else:
        spike = int(torch.randint(vocab, (1,), generator=g))
    others = torch.cat([raw[:spike], raw[spike + 1 :]]).logsumexp(0)
    raw[spike] = others + math.log(SPIKE_MASS / (1 - SPIKE_MASS))
    draft = raw + torch.randn(vocab, generator=g, dtype=torch.float64)
    return (raw / temperature).float(), draft.to(draft_dtype)


@dataclass(frozen=True)
class Run:
    case: Case
    sampled: torch.Tensor
    num_sampled: torch.Tensor
    p: torch.Tensor
    q: torch.Tensor | None

    @property
    def accepted(self) -> torch.Tensor:
        return self.num_sampled - 1

    def at(self, position: int) -> torch.Tensor:
        return self.sampled[self.num_sampled >= position + 1, position]

    @property
    def alpha(self) -> float:
        if self.q is None:
            return float((self.p * self.p).sum())
        return float(torch.minimum(self.p, self.q).sum())


SAMPLERS = {"kernel": rejection_sample_express, "reference": ref.rejection_sample}


@lru_cache(maxsize=None)
def _run(sampler: str, device: str, case: Case) -> Run:
    vocab, trials = _size(device, sampler)
    device = "cpu" if sampler == "reference" else device
    greedy = case.temperature == 0.0
    temperature = 1.0 if greedy else case.temperature
    target, draft = _rows(vocab, temperature, case.draft_dtype)
    has_draft = case.draft == "logits"
    # Seeded without the block / placeholder / synthetic flags: matched coins across them.
    g = torch.Generator().manual_seed(zlib.crc32(f"{case.k}-{temperature}-{case.draft}-{case.draft_dtype}".encode()))
    inputs = trial_batch(
        target.to(device), draft.to(device) if has_draft else None, case.k, temperature, trials, generator=g
    )
    if greedy:
        inputs["temperature"].zero_()
    if case.num_placeholders:
        inputs["draft_sampled"].view(trials, case.k + 1)[:, case.k + 1 - case.num_placeholders :] = -1
    if case.rates is not None:
        inputs["synthetic_conditional_rates"] = torch.tensor(case.rates, dtype=torch.float32, device=device)
    sampled, num_sampled = SAMPLERS[sampler](**inputs, use_block_verification=case.block)
    p = torch.softmax(target.double(), -1)
    q = torch.softmax((draft.float() / temperature).double(), -1) if has_draft else None
    return Run(case, sampled.cpu(), num_sampled.cpu().long(), p, q)


def _params(cases: list[tuple[Case, bool]]) -> list:
    """(sampler, case) params: the reference for every case, on CPU tensors on every machine
    (marked ``on_cpu``: not in ``pytest -m gpu``); the kernel on CUDA for every case and under
    the interpreter only where ``kernel_on_cpu``."""
    out = []
    for c, kernel_on_cpu in cases:
        out.append(pytest.param("reference", c, id=f"reference-{c.id}", marks=on_cpu))
        out.append(pytest.param("kernel", c, id=f"kernel-{c.id}", marks=() if kernel_on_cpu else gpu))
    return out


STANDARD = [
    (Case(k=3), True),
    (Case(k=1, temperature=0.6, draft_dtype=torch.bfloat16), False),
    (Case(k=3, draft="one-hot"), False),
]
BLOCK_CASES = [
    (Case(k=3, block=True), False),
    (Case(k=3, draft="one-hot", block=True), True),
    (Case(k=5, block=True), False),
]


@pytest.mark.parametrize("sampler,case", _params(STANDARD))
def test_standard_marginals_follow_target(device, sampler, case):
    run = _run(sampler, device, case)
    assert ((1 <= run.num_sampled) & (run.num_sampled <= case.k + 1)).all()
    for position in range(case.k + 1):
        assert_follows(run.at(position), run.p, f"{case.id}, position {position}")


@pytest.mark.parametrize("sampler,case", _params(BLOCK_CASES))
def test_block_marginals_follow_target(device, sampler, case):
    run = _run(sampler, device, case)
    assert ((1 <= run.num_sampled) & (run.num_sampled <= case.k + 1)).all()
    for position in range(case.k + 1):
        assert_follows(run.at(position), run.p, f"{case.id}, position {position}")


@pytest.mark.parametrize("sampler,case", _params([(c, False) for c, _ in STANDARD]))
def test_standard_acceptance_count_law(device, sampler, case):
    """P(tau = k) = alpha^k (1 - alpha) for k < K, alpha^K for k = K (Leviathan et al.)."""
    run = _run(sampler, device, case)
    a, k = run.alpha, case.k
    law = torch.tensor([a**i * (1 - a) for i in range(k)] + [a**k], dtype=torch.float64)
    assert_follows(run.accepted, law, f"{case.id}: tau vs alpha = {a:.4f}")


@pytest.mark.parametrize("sampler,case", _params([(c, False) for c, _ in BLOCK_CASES if c.k > 1]))
def test_block_accepts_at_least_as_many(device, sampler, case):
    """Same inputs and uniforms: mean accepted length, block >= standard - tol (the spec's 0.01
    at its size on CUDA, else 6 sd / sqrt(n) of the matched differences)."""
    block = _run(sampler, device, case)
    standard = _run(sampler, device, replace(case, block=False))
    diff = (block.accepted - standard.accepted).double()
    n = diff.numel()
    tol = 0.01 if (device == "cuda" and sampler == "kernel") else 6 * float(diff.std()) / math.sqrt(n) + 1e-12
    mean_block, mean_std = float(block.accepted.double().mean()), float(standard.accepted.double().mean())
    assert mean_block >= mean_std - tol, f"block {mean_block:.4f} < standard {mean_std:.4f} - {tol:.4f} (n={n})"


def _binomial_interval(n: int, p: float, alpha: float = FALSE_FAILURE) -> tuple[float, float]:
    from scipy.stats import binom

    return float(binom.ppf(alpha / 2, n, p)) / n, float(binom.isf(alpha / 2, n, p)) / n


@pytest.mark.parametrize("temperature", [1.0, 0.0], ids=["T1", "T0-greedy"])
@pytest.mark.parametrize("sampler", [pytest.param("reference"), pytest.param("kernel", marks=gpu)])
def test_synthetic_acceptance_rates(device, sampler, temperature):
    u = SYNTHETIC_RATES
    conditional = tuple([u[0]] + [u[i] / u[i - 1] for i in range(1, len(u))])
    run = _run(sampler, device, Case(k=len(u), temperature=temperature, rates=conditional))
    n = run.num_sampled.numel()
    for i, target in enumerate(u):
        observed = float((run.accepted >= i + 1).double().mean())
        lo, hi = _binomial_interval(n, target)
        assert lo <= observed <= hi, f"P(accepted >= {i + 1}) = {observed:.4f} not in [{lo:.4f}, {hi:.4f}]"


@pytest.mark.parametrize("num_placeholders", [1, 2])
@pytest.mark.parametrize("draft", ["logits", "one-hot"])
@pytest.mark.parametrize("sampler", [pytest.param("reference"), pytest.param("kernel", marks=gpu)])
def test_block_placeholder_truncates_block_law(device, sampler, draft, num_placeholders):
    """Spec test 6: the last drafts are -1; at most num_real + 1 tokens, positions 0..num_real follow p."""
    k = 3
    run = _run(sampler, device, Case(k=k, draft=draft, block=True, num_placeholders=num_placeholders))
    num_real = k - num_placeholders
    assert int(run.num_sampled.max()) <= num_real + 1
    for position in range(num_real + 1):
        assert_follows(run.at(position), run.p, f"{run.case.id}, position {position}")


@pytest.mark.slow
@on_gpu_box  # a long CPU test (no kernel): not in CPU CI, nor in `pytest -m gpu`
@pytest.mark.parametrize("draft", ["logits", "one-hot"])
def test_reference_marginals_large(draft):
    """The reference at 16,384 trials (one to two minutes each on a CPU core), standard and block."""
    target, d = _rows(V_MULTI, 1.0, torch.float32)
    inputs = trial_batch(
        target, d if draft == "logits" else None, 3, 1.0, 16384, generator=torch.Generator().manual_seed(5)
    )
    p = torch.softmax(target.double(), -1)
    for block in (False, True):
        sampled, num_sampled = ref.rejection_sample(**inputs, use_block_verification=block)
        for position in range(4):
            assert_follows(
                sampled[num_sampled >= position + 1, position], p, f"{draft} block={block} position {position}"
            )


# ---------------------------------------------------------------------------------------------
# 6. Stages, validation, the subject, the GPU
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mode,draft,config",
    [
        ("block", "logits", "small"),
        ("standard", "one-hot", "large"),
        ("greedy", "one-hot", "persistent"),
        ("block", "one-hot", "wide"),
        ("standard", "logits", "narrow"),
    ],
)
def test_stage_calls_time_each_kernel_alone(device, mode, draft, config):
    """specsample.measure.stage_calls can time each kernel alone: stage names are schema STAGES,
    every stage but the last is idempotent, and the last (insert, or the resample that inserts)
    restores tau first."""
    w = Workload(
        num_reqs=4, num_speculative_steps=K, vocab_size=V, mode=mode, draft=draft, placeholder_density=0.3, seed=9
    )
    inputs = make_inputs(w, device=device)
    pipe = express.Pipeline(**inputs, config=CONFIGS[config])
    calls = measure.stage_calls([pipe])
    names = [name for name, _ in pipe.stages()]
    assert list(calls) == names and set(names) <= set(measure.STAGES)
    for name in names:
        calls[name][0]()
        calls[name][0]()
    _assert_same(emitted(pipe.sampled, pipe.num_sampled), emitted(*ref.rejection_sample(**inputs)))


def test_invalid_input_rejected_before_launch(device):
    w = Workload(num_reqs=2, num_speculative_steps=2, vocab_size=V, seed=1)
    inputs = make_inputs(w, device=device)
    inputs["draft_sampled"][1] = V  # out of range
    tripwire = LaunchTripwire()
    with mock.patch.object(express, "launch", tripwire), pytest.raises(ValueError, match="^draft_sampled: "):
        rejection_sample_express(**inputs)
    assert tripwire.calls == 0


def test_subject_has_its_own_stream(device):
    """The "express" subject: placeholder semantics hold, its tokens differ from mrv2's (another
    stream), its counts do not (the same acceptance)."""
    subject = subjects.get("express")
    assert subject.pipeline is express.Pipeline
    w = Workload(num_reqs=6, num_speculative_steps=K, vocab_size=V, mode="standard", placeholder_density=0.2, seed=10)
    inputs = make_inputs(w, device=device)
    out = subject.run(w, device, inputs)
    baseline = mrv2_ref.rejection_sample(**inputs)
    verdict = semantics.classify(inputs, out, baseline)
    assert verdict.semantics == "same semantics, other stream", verdict
    assert torch.equal(out[1].cpu(), baseline[1].cpu())


@gpu
def test_cuda_graph_capture_and_replay():
    """No host sync and no allocation in a call: it captures into a CUDA graph, and replays give
    the eager call's tokens."""
    w = Workload(num_reqs=32, num_speculative_steps=4, vocab_size=32000, mode="block", placeholder_density=0.5, seed=17)
    inputs = make_inputs(w, device="cuda")
    pipe = express.Pipeline(**inputs)
    eager = emitted(*pipe.run())
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        pipe.run()  # warm-up on the capture stream
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):
        pipe.run()
    pipe.sampled.fill_(-7)
    graph.replay()
    torch.cuda.synchronize()
    assert emitted(pipe.sampled, pipe.num_sampled) == eager


@gpu
@pytest.mark.parametrize("mode", ["greedy", "standard", "block"])
@pytest.mark.parametrize("draft", ["logits", "one-hot"])
def test_production_vocab_matches_reference(mode, draft):
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
    _check(make_inputs(w, device="cuda"))


@gpu
@pytest.mark.parametrize("mode", ["greedy", "standard", "block"])
def test_persistent_resample_on_the_gpu_matches_reference(mode):
    """The persistent resample pass (one-hot drafts) where it loops on a GPU at its own count of
    programs: one an SM (132 on an H200) over 64 requests x 16 tiles, mixed plans."""
    _, inputs = _persistent_batch(mode, 64, 32000, "cuda", seed=33, greedy_fraction=0.2)
    config = express.Config(resample_programs=1)
    assert express.Pipeline(**inputs, config=config).resample_persistent_programs > 0
    _check(inputs, config=config)


@gpu
@pytest.mark.large_memory  # 2**31-element inputs: scripts/gpu-check.sh runs these one at a time
@pytest.mark.parametrize("mode", ["greedy", "standard", "block"])
def test_large_index_matches_reference(mode):
    """N * V > 2**31 (V = 262144, N = 8200 rows): int64 offsets; the reference runs the last 40
    requests (their rows sit past 2**31 elements)."""
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
    sampled, num_sampled = rejection_sample_express(**inputs)
    want = emitted(*ref.rejection_sample(**split_requests(inputs, 1600, 1640)))
    _assert_same(emitted(sampled[1600:], num_sampled[1600:]), want)


@gpu
def test_layout_independence_at_production_size():
    """R = 128 (the large-batch configuration) against chunks of 8 and 1 requests (the small
    one): the same tokens."""
    w = Workload(
        num_reqs=128,
        num_speculative_steps=4,
        vocab_size=151936,
        mode="block",
        placeholder_density=0.25,
        placeholder_pattern="random",
        greedy_fraction=0.1,
        seed=18,
    )
    inputs = make_inputs(w, device="cuda")
    full = emitted(*rejection_sample_express(**inputs))
    chunks = []
    for start in range(0, 128, 8):
        chunks += emitted(*rejection_sample_express(**split_requests(inputs, start, start + 8)))
    assert chunks == full
    assert emitted(*rejection_sample_express(**split_requests(inputs, 5, 6))) == full[5:6]


@pytest.mark.parametrize(
    "mode,draft,target_dtype,draft_dtype,kernels,skip",
    [
        # stats, cum_log_p, residual_mass, rejection, resample, insert
        ("block", "logits", "bfloat16", "float16", 6, False),
        ("standard", "one-hot", "float16", "bfloat16", 4, False),  # the persistent resample (R x 75 tiles > 2 x 32)
        ("greedy", "logits", "bfloat16", "float32", 4, False),
        # the masked-block skip's kernels
        ("block", "logits", "bfloat16", "float16", 6, True),
        ("standard", "one-hot", "float16", "bfloat16", 4, True),
    ],
)
def test_kernels_compile_for_sm90(mode, draft, target_dtype, draft_dtype, kernels, skip):
    """Every kernel of a call compiles for sm_90 with 16-bit logits, the masked-block skip off and
    on. The interpreter runs a kernel without the compiler's type checks: a bf16 tile redefined as
    fp32 in both arms of an ``if`` passes every CPU test and fails to compile on a GPU. Compiled
    here on the CPU with Triton's bundled ptxas (``scripts/express_sass.py``, no GPU needed)."""
    args = ["--mode", mode, "--draft", draft, "--num-reqs", "4", "--config", "large"]
    args += ["--target-dtype", target_dtype, "--draft-dtype", draft_dtype, "--dependent-launch"]
    args += ["--skip-masked-vocab-blocks"] if skip else []
    compiled = compile_for_sm90(args)
    assert len(compiled) == kernels, compiled


# ---------------------------------------------------------------------------------------------
# 7. The masked-vocabulary block skip (vLLM's skip_masked_vocab_blocks path)
# ---------------------------------------------------------------------------------------------

MASKED_FRACTIONS = [0.0, 0.5, 0.9, 0.99]


def _skip_keeps_the_draws(inputs: dict, **kwargs) -> None:
    """The skip on emits the skip-off tokens, and both are the reference's."""
    on = _check(inputs, skip_masked_vocab_blocks=True, **kwargs)
    assert on == emitted(*rejection_sample_express(**inputs, **kwargs)), "the skip changes the draws"


@pytest.mark.parametrize("fraction", MASKED_FRACTIONS)
@pytest.mark.parametrize("draft", ["logits", "one-hot"])
@pytest.mark.parametrize("mode", ["greedy", "standard", "block"])
def test_masked_block_skip_keeps_every_draw(device, mode, draft, fraction):
    """Fresh masked batches (specsample.workloads' grammar-like masks: contiguous allowed ranges,
    the top token kept) with random placeholders and some greedy requests in the sampled modes:
    the skip on emits the skip-off tokens and the reference's. V = 16385 is nine sampling blocks,
    the last one entry wide (at 0.9 and 0.99 about a quarter of the others masked whole); the
    configuration alternates between the small one (fused insert) and the large one (the insert
    kernel; with one-hot drafts the persistent resample pass)."""
    w = Workload(
        num_reqs=5,
        num_speculative_steps=3,
        vocab_size=16385,
        mode=mode,
        draft=draft,
        placeholder_pattern="random",
        placeholder_density=0.25,
        greedy_fraction=0.0 if mode == "greedy" else 0.2,
        masked_vocab_fraction=fraction,
        seed=zlib.crc32(f"{mode}-{draft}-{fraction}".encode()) % 10_000,
    )
    inputs = make_inputs(w, device=device)
    large = (MASKED_FRACTIONS.index(fraction) + (draft == "one-hot")) % 2 == 1
    config = express.Config(resample_programs=1) if large else express.SMALL_BATCH_CONFIG
    _skip_keeps_the_draws(inputs, config=config)


def _mask_all_blocks_but(inputs: dict, live: torch.Tensor, nan_share: float = 0.0, seed: int = 0) -> None:
    """Mask every sampling block of each target row to -inf but ``live[row]`` (``[N, L]``
    block indices); ``nan_share`` of the masked entries NaN instead (read as -inf)."""
    target = inputs["target_logits"]
    vocab = target.shape[1]
    block_of = (torch.arange(vocab) // BLOCK).to(target.device)
    masked = (block_of[None, :, None] != live.to(target.device)[:, None, :]).all(dim=2)
    target.masked_fill_(masked, float("-inf"))
    if nan_share:
        g = torch.Generator().manual_seed(seed)
        target.masked_fill_(
            masked & (torch.rand(target.shape, generator=g) < nan_share).to(target.device), float("nan")
        )


@pytest.mark.parametrize("draft", ["logits", "one-hot"])
@pytest.mark.parametrize("mode", ["greedy", "standard", "block"])
def test_masked_block_skip_with_one_live_block_a_row(device, mode, draft):
    """Every sampling block of every row masked but one (at random, the last -- seven entries of
    V = 3 * 2048 + 7 -- among them), with NaN logits in some masked blocks (read as -inf, so
    those blocks are masked too): the skip on emits the skip-off tokens and the reference's."""
    vocab = 3 * BLOCK + 7
    w = Workload(
        num_reqs=6,
        num_speculative_steps=3,
        vocab_size=vocab,
        mode=mode,
        draft=draft,
        placeholder_pattern="random",
        placeholder_density=0.2,
        greedy_fraction=0.0 if mode == "greedy" else 0.3,
        seed=41,
    )
    inputs = make_inputs(w, device=device)
    rows, num_blocks = inputs["target_logits"].shape[0], triton.cdiv(vocab, BLOCK)
    live = torch.randint(0, num_blocks, (rows, 1), generator=torch.Generator().manual_seed(41))
    live[:2] = num_blocks - 1  # the partial last block
    _mask_all_blocks_but(inputs, live, nan_share=0.01, seed=41)
    _skip_keeps_the_draws(inputs)


def _fill_masked_blocks(target: torch.Tensor, rows: list[int]) -> None:
    """Junk in the masked blocks of target ``rows``: finite logits, where a pass that reads those
    blocks finds residual mass (the draft's logits there need not change: a block whose target
    is read as -inf has no residual, whatever the draft)."""
    n, vocab = target.shape
    nb = triton.cdiv(vocab, BLOCK)
    padded = torch.full((n, nb * BLOCK), float("-inf"), dtype=torch.float32, device=target.device)
    padded[:, :vocab] = target.float()
    dead = padded.view(n, nb, BLOCK).amax(dim=2) == float("-inf")
    for row in rows:
        for b in dead[row].nonzero().flatten().tolist():
            target[row, b * BLOCK : min((b + 1) * BLOCK, vocab)] = 3.0


@pytest.mark.parametrize("mode", ["standard", "block"])
def test_masked_block_skip_ignores_the_masked_blocks_of_a_tested_row(device, mode):
    """The skip's saving: a row the stats kernel read (a tested row) has its masked blocks known
    from the stats kernel's block maxima, so the residual-mass pass and the resample pass of a
    draft residual take nothing from those blocks' logits (their loads are masked off: the
    bytes saved are the GPU's to measure). Junk written there after the stats (and cum_log_p,
    and, in standard mode, the rejection kernel, which gathers the drafts' target logits) leaves
    every partial and token of the skip-on call as it was; the skip-off call reads it (the
    check that the junk would show). The calls run in plain stream order: a dependently launched
    kernel may load the logits before the kernel ahead of it (here, the junk's writes) is done,
    which a call never meets (its logits are written before its first kernel)."""
    vocab = 8193
    w = Workload(
        num_reqs=6,
        num_speculative_steps=3,
        vocab_size=vocab,
        mode=mode,
        placeholder_density=0.0,
        agreement=0.3,
        seed=43,
    )
    inputs = make_inputs(w, device=device)
    rows = inputs["target_logits"].shape[0]
    live = torch.stack([torch.arange(rows) % 5, (torch.arange(rows) + 2) % 5], dim=1)  # two of five blocks
    _mask_all_blocks_but(inputs, live)
    cu = inputs["cu_num_logits"].tolist()
    tested = [row for r in range(len(cu) - 1) for row in range(cu[r], cu[r + 1] - 1)]  # phi = 0: rows j < n
    # Each tested row's draft at random in one of its live blocks: target probability > 0, so
    # every later row has a residual for the junk to change (the logits, drawn on the device,
    # differ between devices; drafts left in masked blocks could leave none).
    # The first request's first draft instead in a masked block of its row 0: target probability
    # 0, so it is rejected there on any device, in either mode -- a draft residual at row 0,
    # whose resample pass the skip must keep off the masked blocks.
    g = torch.Generator().manual_seed(43)
    for row in tested:
        block = int(live[row, 0]) if row != cu[0] else (int(live[row, 0]) + 1) % 5
        first = block * BLOCK
        token = first + int(torch.randint(0, min(BLOCK, vocab - first), (1,), generator=g))
        inputs["draft_sampled"][row + 1] = token
    junk_after = "rejection" if mode == "standard" else "cum_log_p"

    def run(skip: bool, junk: bool) -> express.Pipeline:
        copy = {k: v.clone() if isinstance(v, torch.Tensor) else v for k, v in inputs.items()}
        pipe = express.Pipeline(**copy, config=express.LARGE_BATCH_CONFIG, skip_masked_vocab_blocks=skip)
        pipe.dependent_launch = False
        for name, stage in pipe.stages():
            stage()
            if junk and name == junk_after:
                _fill_masked_blocks(copy["target_logits"], tested)
        return pipe

    clean, skipped, read = run(False, False), run(True, True), run(False, True)
    assert emitted(skipped.sampled, skipped.num_sampled) == emitted(*ref.rejection_sample(**inputs))
    residual = clean.plan == express.rejection.PLAN_RESIDUAL.value
    assert residual[0], "the first request's draft in a masked block was not rejected at row 0"
    assert torch.equal(skipped.resampled_mass[residual], clean.resampled_mass[residual])
    assert not torch.equal(read.resampled_mass[residual], clean.resampled_mass[residual])
    if mode == "block":
        written = [row for r in range(len(cu) - 1) for row in range(cu[r] + 1, cu[r + 1] - 1)]  # rows 1..n-1
        assert torch.equal(skipped.local_residual_mass[written], clean.local_residual_mass[written])
        assert not torch.equal(read.local_residual_mass[written], clean.local_residual_mass[written])


def test_the_skip_is_an_argument_of_the_sampler_and_the_subject(device):
    """rejection_sample_express takes the flag (a bool); the subject declares the path, runs it
    from the workload's inputs, and its path check (the same call without the skip) passes."""
    w = Workload(num_reqs=4, num_speculative_steps=2, vocab_size=4100, masked_vocab_fraction=0.9, seed=44)
    inputs = make_inputs(w, device=device)
    with pytest.raises(ValueError, match="skip_masked_vocab_blocks: expected a bool"):
        rejection_sample_express(**inputs, skip_masked_vocab_blocks=1)
    subject = subjects.get("express")
    assert subject.capabilities.paths == ("skip_masked_vocab_blocks",)
    skip = replace(w, skip_masked_vocab_blocks=True)
    skip_inputs = make_inputs(skip, device=device)
    assert skip_inputs["skip_masked_vocab_blocks"] is True
    out = subject.run(skip, device, skip_inputs)
    assert emitted(*out) == emitted(*ref.rejection_sample(**inputs))
    verdict = semantics.check_paths(skip, skip_inputs, out, lambda i: subject.run(skip, device, i))
    assert verdict.violation is None


@gpu
@pytest.mark.parametrize("fraction", [0.5, 0.9, 0.99])
@pytest.mark.parametrize("mode,draft", [("standard", "logits"), ("block", "logits"), ("greedy", "one-hot")])
def test_masked_block_skip_at_production_size(mode, draft, fraction):
    """The base point (R = 128, V = 151936, phi = 0.5) masked: the skip on emits the skip-off
    tokens and the reference's."""
    w = Workload(
        num_reqs=128,
        num_speculative_steps=4,
        vocab_size=151936,
        mode=mode,
        draft=draft,
        placeholder_density=0.5,
        masked_vocab_fraction=fraction,
        seed=45,
    )
    _skip_keeps_the_draws(make_inputs(w, device="cuda"))
