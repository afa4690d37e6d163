"""Bit-exactness of :mod:`specsample.reference.philox` against Triton's own Philox (``tl.randint`` & co.).

The Triton side runs under the Triton interpreter (``TRITON_INTERPRET=1``, CPU only). That mode
is fixed when ``triton`` is first imported: ``tl.randint`` is wrapped for the interpreter only if
the variable is set by then. Inside a pytest session some other test module has usually imported
triton already, in compiled mode, and setting the variable here would also silently switch later
modules' kernels to the interpreter. So the Triton kernels run in a fresh subprocess that
executes this file as a script (``__main__`` below sets the variable before importing triton),
and the tests compare its saved outputs with the PyTorch emulation using ``torch.equal``.
On a machine with CUDA the same kernels also run compiled, in process, and are compared too.
"""

import os
import sys

if __name__ == "__main__":
    # Must precede `import triton`: triton.language.random's functions are wrapped at import.
    os.environ["TRITON_INTERPRET"] = "1"

import pathlib
import subprocess

import pytest
import torch

triton = pytest.importorskip("triton")
import triton.language as tl  # noqa: E402

_REPO_ROOT = pathlib.Path(__file__).resolve().parents[1]
if __name__ == "__main__":
    sys.path.insert(0, str(_REPO_ROOT))

from specsample.reference import philox as rng  # noqa: E402

# ---------------------------------------------------------------------------------------------
# Inputs shared by the Triton script and the tests
# ---------------------------------------------------------------------------------------------

# int64 seeds: small, large (non-zero high key word), negative (sign-extended key) and extremes.
SEEDS = [0, 1, 12345, 2**40 + 7, -1, -(2**63), 2**63 - 1, 0xDEADBEEF]
BLOCK = 64


def _offsets_i32() -> torch.Tensor:
    """int32 offsets: 0, edges of the int32 range, and pseudo-random values."""
    g = torch.Generator().manual_seed(0)
    edge = torch.tensor([0, 1, 2, 7, 8191, 8192, 2**30, 2**31 - 1, -(2**31), -1], dtype=torch.int32)
    rnd = torch.randint(-(2**31), 2**31 - 1, (BLOCK - edge.numel(),), generator=g, dtype=torch.int64)
    return torch.cat([edge, rnd.to(torch.int32)])


def _offsets_i64() -> torch.Tensor:
    """int64 offsets, some beyond 32 bits, so Triton puts the high word into counter c1."""
    g = torch.Generator().manual_seed(1)
    edge = torch.tensor([0, 1, 2**32, 2**32 + 5, 2**40 + 3, -1, 2**63 - 1, -(2**63)], dtype=torch.int64)
    rnd = torch.randint(-(2**62), 2**62, (BLOCK - edge.numel(),), generator=g, dtype=torch.int64)
    return torch.cat([edge, rnd])


def _edge_words() -> torch.Tensor:
    """uint32 words (as int32 bit patterns) at the edges of the int -> float conversion."""
    words = [
        0,
        1,
        2,
        0x7FFFFFFF,
        0x7FFFFFC0,
        0x7FFFFFBF,
        0x7FFFFF80,
        0x40000000,
        0x00FFFFFF,
        0x01000001,
        0x80000000,
        0x80000001,
        0x8000003F,
        0x80000040,
        0xFFFFFFFF,
        0xFFFFFFFE,
    ]
    w = torch.tensor(words, dtype=torch.int64)
    return torch.where(w >= 2**31, w - 2**32, w).to(torch.int32)


# Resample-noise chain: gseed = randint(seed, pos as int32); u_v = rand(gseed, token id).
CHAIN_POS = [0, 1, 17, 4095, 2**31 - 1]
CHAIN_VOCAB = 256


# ---------------------------------------------------------------------------------------------
# Triton kernels (executed only in the interpreter subprocess)
# ---------------------------------------------------------------------------------------------


@triton.jit
def _tl_rand64(seed, offset):
    # The recipe documented in specsample.reference.philox.rand64: word 1 high, word 0 low, times 2**-64.
    w0, w1, _, _ = tl.randint4x(seed, offset)
    x = (w1.to(tl.uint64) << 32) | w0.to(tl.uint64)
    u = x.to(tl.float64) * 5.421010862427522e-20
    return tl.maximum(u, 2.2250738585072014e-308)


@triton.jit
def _philox_kernel(seed_ptr, off_ptr, words_ptr, randint_ptr, rand_ptr, rand64_ptr, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    seed = tl.load(seed_ptr + pid)  # int64 scalar
    idx = tl.arange(0, BLOCK)
    off = tl.load(off_ptr + idx)
    w0, w1, w2, w3 = tl.randint4x(seed, off)
    base = pid * 4 * BLOCK
    tl.store(words_ptr + base + idx, w0.to(tl.int32, bitcast=True))
    tl.store(words_ptr + base + BLOCK + idx, w1.to(tl.int32, bitcast=True))
    tl.store(words_ptr + base + 2 * BLOCK + idx, w2.to(tl.int32, bitcast=True))
    tl.store(words_ptr + base + 3 * BLOCK + idx, w3.to(tl.int32, bitcast=True))
    tl.store(randint_ptr + pid * BLOCK + idx, tl.randint(seed, off).to(tl.int32, bitcast=True))
    tl.store(rand_ptr + pid * BLOCK + idx, tl.rand(seed, off))
    tl.store(rand64_ptr + pid * BLOCK + idx, _tl_rand64(seed, off))


@triton.jit
def _uniform_kernel(words_ptr, out_ptr, BLOCK: tl.constexpr):
    idx = tl.arange(0, BLOCK)
    w = tl.load(words_ptr + idx).to(tl.uint32, bitcast=True)
    tl.store(out_ptr + idx, tl.random.uint_to_uniform_float(w))


@triton.jit
def _gumbel_chain_kernel(seed_ptr, pos_ptr, gseed_ptr, u_ptr, u64_ptr, n_pos, VOCAB: tl.constexpr):
    # One program per (seed, pos) pair, as in the resample kernel: the int64 seed and the int32
    # position give a uint32 gseed, which then seeds one draw per int32 token id.
    pid = tl.program_id(0)
    seed = tl.load(seed_ptr + pid // n_pos)
    pos = tl.load(pos_ptr + pid % n_pos).to(tl.int32)
    gseed = tl.randint(seed, pos)
    tok = tl.arange(0, VOCAB)
    tl.store(gseed_ptr + pid, gseed.to(tl.int32, bitcast=True))
    tl.store(u_ptr + pid * VOCAB + tok, tl.rand(gseed, tok))
    tl.store(u64_ptr + pid * VOCAB + tok, _tl_rand64(gseed, tok))


def _run_triton(device: str = "cpu") -> dict[str, torch.Tensor]:
    """Run every kernel (interpreted on "cpu", compiled on "cuda"); outputs on the CPU."""
    seeds = torch.tensor(SEEDS, dtype=torch.int64, device=device)
    out: dict[str, torch.Tensor] = {}
    for name, offs in (("i32", _offsets_i32()), ("i64", _offsets_i64())):
        words = torch.empty(len(SEEDS), 4, BLOCK, dtype=torch.int32, device=device)
        r_int = torch.empty(len(SEEDS), BLOCK, dtype=torch.int32, device=device)
        r_f32 = torch.empty(len(SEEDS), BLOCK, dtype=torch.float32, device=device)
        r_f64 = torch.empty(len(SEEDS), BLOCK, dtype=torch.float64, device=device)
        _philox_kernel[(len(SEEDS),)](seeds, offs.to(device), words, r_int, r_f32, r_f64, BLOCK=BLOCK)
        out.update({f"words_{name}": words, f"randint_{name}": r_int, f"rand_{name}": r_f32, f"rand64_{name}": r_f64})

    words = _edge_words().to(device)
    uniform = torch.empty(words.numel(), dtype=torch.float32, device=device)
    _uniform_kernel[(1,)](words, uniform, BLOCK=words.numel())
    out["uniform_edge"] = uniform

    pos = torch.tensor(CHAIN_POS, dtype=torch.int64, device=device)
    n = len(SEEDS) * len(CHAIN_POS)
    gseed = torch.empty(n, dtype=torch.int32, device=device)
    u = torch.empty(n, CHAIN_VOCAB, dtype=torch.float32, device=device)
    u64 = torch.empty(n, CHAIN_VOCAB, dtype=torch.float64, device=device)
    _gumbel_chain_kernel[(n,)](seeds, pos, gseed, u, u64, len(CHAIN_POS), VOCAB=CHAIN_VOCAB)
    out.update({"chain_gseed": gseed, "chain_u": u, "chain_u64": u64})
    return {key: val.cpu() for key, val in out.items()}


if __name__ == "__main__":
    torch.save(_run_triton(), sys.argv[1])
    sys.exit(0)


# ---------------------------------------------------------------------------------------------
# Tests
# ---------------------------------------------------------------------------------------------


def _u32(x: torch.Tensor) -> torch.Tensor:
    """int32 bit patterns -> uint32 values in int64."""
    return x.to(torch.int64) & 0xFFFFFFFF


@pytest.fixture(scope="module", params=["interpreter", pytest.param("cuda", marks=pytest.mark.gpu)])
def triton_out(request, tmp_path_factory) -> dict[str, torch.Tensor]:
    """Outputs of the Triton kernels: interpreted in a subprocess, or compiled on CUDA."""
    if request.param == "cuda":
        if not torch.cuda.is_available():
            pytest.skip("needs a CUDA device")
        if triton.knobs.runtime.interpret:
            pytest.skip("TRITON_INTERPRET is set; compiled kernels unavailable")
        return _run_triton("cuda")
    path = tmp_path_factory.mktemp("rng") / "triton_out.pt"
    env = dict(os.environ, TRITON_INTERPRET="1")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(_REPO_ROOT), env.get("PYTHONPATH")]))
    proc = subprocess.run([sys.executable, __file__, str(path)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return torch.load(path)


@pytest.mark.parametrize("kind", ["i32", "i64"])
def test_randint4x_matches_triton(triton_out, kind):
    offs = _offsets_i32() if kind == "i32" else _offsets_i64()
    seeds = torch.tensor(SEEDS, dtype=torch.int64)[:, None]
    words = torch.stack(rng.randint4x(seeds, offs[None, :]), dim=1)
    assert torch.equal(words, _u32(triton_out[f"words_{kind}"]))
    assert torch.equal(rng.randint(seeds, offs[None, :]), _u32(triton_out[f"randint_{kind}"]))


@pytest.mark.parametrize("kind", ["i32", "i64"])
def test_rand_matches_triton(triton_out, kind):
    offs = _offsets_i32() if kind == "i32" else _offsets_i64()
    seeds = torch.tensor(SEEDS, dtype=torch.int64)[:, None]
    u = rng.rand(seeds, offs[None, :])
    assert u.dtype == torch.float32
    assert torch.equal(u, triton_out[f"rand_{kind}"])


@pytest.mark.parametrize("kind", ["i32", "i64"])
def test_rand64_matches_triton_recipe(triton_out, kind):
    offs = _offsets_i32() if kind == "i32" else _offsets_i64()
    seeds = torch.tensor(SEEDS, dtype=torch.int64)[:, None]
    u = rng.rand64(seeds, offs[None, :])
    assert u.dtype == torch.float64
    assert torch.equal(u, triton_out[f"rand64_{kind}"])


def test_uint_to_uniform_float_edges_match_triton(triton_out):
    got = rng.uint_to_uniform_float(_u32(_edge_words()))
    assert torch.equal(got, triton_out["uniform_edge"])
    # 0 and 0xFFFFFFFF fold to 0; 0x7FFFFFFF rounds up to 2**31 in fp32, giving the maximum.
    assert got[0].item() == 0.0 and got[-2].item() == 0.0
    assert got[3].item() == 1.0 - 2.0**-24


def test_resample_noise_chain_matches_triton(triton_out):
    seeds = torch.tensor(SEEDS, dtype=torch.int64).repeat_interleave(len(CHAIN_POS))
    pos = torch.tensor(CHAIN_POS, dtype=torch.int32).repeat(len(SEEDS))
    gseed = rng.randint(seeds, pos)
    assert torch.equal(gseed, _u32(triton_out["chain_gseed"]))
    tok = torch.arange(CHAIN_VOCAB, dtype=torch.int32)
    assert torch.equal(rng.rand(gseed[:, None], tok[None, :]), triton_out["chain_u"])
    assert torch.equal(rng.rand64(gseed[:, None], tok[None, :]), triton_out["chain_u64"])


@pytest.mark.parametrize(
    "counter, key, expected",
    [
        ((0, 0, 0, 0), (0, 0), (0x6627E8D5, 0xE169C58D, 0xBC57AC4C, 0x9B00DBD8)),
        ((0xFFFFFFFF,) * 4, (0xFFFFFFFF,) * 2, (0x408F276D, 0x41C83B0E, 0xA20BC7C6, 0x6D5451FD)),
        (
            (0x243F6A88, 0x85A308D3, 0x13198A2E, 0x03707344),
            (0xA4093822, 0x299F31D0),
            (0xD16CFE09, 0x94FDCCEB, 0x5001E420, 0x24126EA1),
        ),
    ],
)
def test_philox_known_answers(counter, key, expected):
    """Random123's Philox4x32-10 known-answer vectors (key k0 = seed low word, k1 = high)."""
    seed = key[0] | (key[1] << 32)
    seed = seed - 2**64 if seed >= 2**63 else seed  # the same 64 bits as a signed int64
    ctr = [torch.tensor([c], dtype=torch.int64) for c in counter]
    got = rng.philox4x32(torch.tensor([seed]), *ctr)
    assert tuple(int(w.item()) for w in got) == expected


def test_broadcasting_and_ranges():
    seeds = torch.tensor([[3], [2**40 + 7]], dtype=torch.int64)
    offs = torch.arange(4096, dtype=torch.int32)[None, :]
    u = rng.rand(seeds, offs)
    assert u.shape == (2, 4096)
    assert bool((u >= 0).all()) and bool((u < 1).all())
    # Rows are independent streams: different seeds give different draws.
    assert not torch.equal(u[0], u[1])
    # A scalar seed equals the same seed broadcast explicitly.
    assert torch.equal(rng.rand(3, offs[0]), u[0])
    u64 = rng.rand64(seeds, offs)
    assert bool((u64 > 0).all()) and bool((u64 <= 1).all())
    w = rng.randint(seeds, offs)
    assert bool((w >= 0).all()) and bool((w < 2**32).all())


@pytest.mark.gpu
def test_cuda_emulation_matches_cpu():
    """The emulation itself is device-independent (integer ops and one fp32 multiply)."""
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA device")
    seeds = torch.tensor(SEEDS, dtype=torch.int64)[:, None]
    offs = torch.arange(-5000, 5000, dtype=torch.int32)[None, :]
    for fn in (rng.randint, rng.rand, rng.rand64):
        assert torch.equal(fn(seeds, offs), fn(seeds.cuda(), offs.cuda()).cpu())


def test_rand_clamped_floor():
    assert rng.RAND32_MIN == float(torch.tensor(4.6566127342e-10, dtype=torch.float32))
    assert rng.RAND32_MIN == rng.uint_to_uniform_float(torch.tensor([1])).item()
    u = rng.rand_clamped(torch.tensor(5), torch.arange(1000, dtype=torch.int32))
    assert torch.equal(u, torch.clamp_min(rng.rand(5, torch.arange(1000, dtype=torch.int32)), rng.RAND32_MIN))
