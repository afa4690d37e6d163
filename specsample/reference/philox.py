"""Counter-based random numbers in plain PyTorch, bit-exact with Triton 3.6's Philox.

The rejection sampler draws all of its randomness from Triton's stateless Philox generator
(``tl.randint``, ``tl.rand``, ``tl.randint4x``), keyed by a per-request seed and counted by a
position or token id. A reference implementation must reproduce those draws bit for bit, so
this module re-implements Philox-4x32-10 and Triton's int-to-float conversion with ordinary
tensor ops. Everything is vectorised and runs on any device torch supports.

Representation
--------------
PyTorch has no general uint32 arithmetic, so a uint32 value is held in an ``int64`` tensor with
the value in ``[0, 2**32)``. Products of two 32-bit values can reach ``2**64`` and would
overflow int64, so :func:`_mulhilo32` splits the constant multiplier into 16-bit halves; every
intermediate stays below ``2**49``.

Triton semantics mirrored here (``triton/language/random.py`` in Triton 3.6)
----------------------------------------------------------------------------
- Key: ``seed.to(uint64)`` split into ``k0 = low 32 bits``, ``k1 = high 32 bits``. A signed
  seed is sign-extended first (an int64 ``-1`` gives ``k0 = k1 = 0xFFFFFFFF``); a uint32 seed,
  such as the output of ``tl.randint``, is zero-extended, so ``k1 = 0``.
- Counter of ``randint4x(seed, offset)``: ``c0 = offset`` (bit pattern as uint32),
  ``c1 = offset >> 32`` for 64-bit offsets and ``0`` for 32-bit ones, ``c2 = c3 = 0``.
  Both cases run the 32-bit Philox.
- Round (10 of them): ``c0' = umulhi(B, c2) ^ c1 ^ k0``, ``c2' = umulhi(A, c0) ^ c3 ^ k1``,
  ``c1' = lo(B * c2)``, ``c3' = lo(A * c0)``, then ``k0 += 0x9E3779B9``,
  ``k1 += 0xBB67AE85`` (mod 2**32), with ``A = 0xD2511F53`` and ``B = 0xCD9E8D57``. This is
  Random123's Philox4x32-10, so its known-answer vectors apply.
- ``rand``: bitcast word 0 to int32, fold negatives with ``w -> -w - 1``, convert to fp32
  (round to nearest even) and multiply by the fp32 constant ``4.6566127342e-10``, which rounds
  to ``2**-31 * (1 - 2**-24)``. The result lies in ``[0, 1 - 2**-24]``: it can be 0, never 1.
"""

from __future__ import annotations

import torch

__all__ = [
    "RAND32_MIN",
    "philox4x32",
    "randint4x",
    "randint",
    "uint_to_uniform_float",
    "rand",
    "rand_clamped",
    "rand64",
]

_MASK32 = 0xFFFFFFFF

# Philox-4x32 round multipliers and Weyl key increments (Random123 / Triton constants).
_PHILOX_ROUND_A = 0xD2511F53
_PHILOX_ROUND_B = 0xCD9E8D57
_PHILOX_KEY_A = 0x9E3779B9
_PHILOX_KEY_B = 0xBB67AE85
_N_ROUNDS = 10

# Triton's uint32 -> [0, 1) scale. Triton types the Python literal as fp32, so the multiplier
# is float32(4.6566127342e-10) = 2**-31 * (1 - 2**-24), not 2**-31.
_RAND32_SCALE = 4.6566127342e-10

#: Smallest positive value ``tl.rand`` returns (``1 * scale`` in fp32, 4.6566126e-10). The
#: sampler clamps its fp32 uniforms to at least this value so that ``log u`` is finite; in a
#: Triton kernel write ``tl.maximum(u, 4.6566127342e-10)``, which rounds to the same fp32.
RAND32_MIN = float(torch.tensor(_RAND32_SCALE, dtype=torch.float32).item())

_TWO_POW_32 = 4294967296.0
_TWO_POW_MINUS_64 = 2.0**-64
_FLOAT64_TINY = torch.finfo(torch.float64).tiny


def _as_int64(x: torch.Tensor | int, device: torch.device | None = None) -> torch.Tensor:
    """Return ``x`` as an int64 tensor (sign-extending narrower signed ints)."""
    if isinstance(x, torch.Tensor):
        return x.to(torch.int64)
    return torch.tensor(x, dtype=torch.int64, device=device)


def _mulhilo32(a: int, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """High and low 32-bit words of ``a * b`` for a uint32 constant ``a`` and uint32 tensor ``b``.

    The full product needs 64 unsigned bits, more than int64 holds, so ``a`` is split into
    16-bit halves: ``a * b = (a_hi * b) << 16 + a_lo * b`` with both partial products
    below ``2**48``.
    """
    a_hi, a_lo = a >> 16, a & 0xFFFF
    p_lo = b * a_lo
    p_hi = b * a_hi
    # floor(full / 2**32): the low 16 bits of p_lo cannot carry into bit 32.
    hi = (p_hi + (p_lo >> 16)) >> 16
    lo = (p_lo + ((p_hi & 0xFFFF) << 16)) & _MASK32
    return hi, lo


def philox4x32(
    seed: torch.Tensor | int,
    c0: torch.Tensor,
    c1: torch.Tensor | int = 0,
    c2: torch.Tensor | int = 0,
    c3: torch.Tensor | int = 0,
    *,
    n_rounds: int = _N_ROUNDS,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Philox-4x32 with Triton's key derivation from a (up to 64-bit) seed.

    Parameters
    ----------
    seed : Tensor or int
        Integer seed(s), broadcast against the counter. Interpreted as ``seed.to(uint64)``:
        signed values are sign-extended to 64 bits; a uint32 value held in int64 (``>= 0``)
        gives a zero high key word.
    c0, c1, c2, c3 : Tensor or int
        Counter words, uint32 values held in int64 (only the low 32 bits are used).
    n_rounds : int
        Number of Philox rounds (Triton's default is 10).

    Returns
    -------
    tuple of 4 Tensor
        The four output words, int64 tensors holding uint32 values, of the broadcast shape.
    """
    c0 = _as_int64(c0)
    device = c0.device
    seed = _as_int64(seed, device)
    k0 = seed & _MASK32
    k1 = (seed >> 32) & _MASK32  # arithmetic shift, then mask: the uint64 high word
    c0 = c0 & _MASK32
    c1 = _as_int64(c1, device) & _MASK32
    c2 = _as_int64(c2, device) & _MASK32
    c3 = _as_int64(c3, device) & _MASK32
    shape = torch.broadcast_shapes(seed.shape, c0.shape, c1.shape, c2.shape, c3.shape)
    c0, c1, c2, c3 = (c.expand(shape) for c in (c0, c1, c2, c3))
    k0, k1 = k0.expand(shape), k1.expand(shape)

    for _ in range(n_rounds):
        hi_b, lo_b = _mulhilo32(_PHILOX_ROUND_B, c2)
        hi_a, lo_a = _mulhilo32(_PHILOX_ROUND_A, c0)
        c0, c1, c2, c3 = hi_b ^ c1 ^ k0, lo_b, hi_a ^ c3 ^ k1, lo_a
        k0 = (k0 + _PHILOX_KEY_A) & _MASK32
        k1 = (k1 + _PHILOX_KEY_B) & _MASK32
    return c0, c1, c2, c3


def randint4x(
    seed: torch.Tensor | int, offset: torch.Tensor, *, n_rounds: int = _N_ROUNDS
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Emulate ``tl.randint4x(seed, offset)``: four uint32 words per offset.

    Parameters
    ----------
    seed : Tensor or int
        Seed(s), broadcast against ``offset`` (see :func:`philox4x32`).
    offset : Tensor
        Integer offsets. The dtype matters exactly as in Triton: a 32-bit (or narrower) offset
        gives counter ``(offset, 0, 0, 0)``; an int64 offset gives
        ``(offset & 0xFFFFFFFF, offset >> 32, 0, 0)``. Kernels in this package pass int32
        offsets, so cast positions and token ids with ``.to(torch.int32)`` first.

    Returns
    -------
    tuple of 4 Tensor
        int64 tensors holding uint32 values, of the broadcast shape of ``seed`` and ``offset``.
    """
    if offset.dtype == torch.int64:
        hi = (offset >> 32) & _MASK32
    else:
        hi = 0
    # For 32-bit offsets the sign-extension to int64 is undone by the mask in philox4x32,
    # matching Triton's int32 -> uint32 bit-pattern cast.
    return philox4x32(seed, offset.to(torch.int64), hi, n_rounds=n_rounds)


def randint(seed: torch.Tensor | int, offset: torch.Tensor, *, n_rounds: int = _N_ROUNDS) -> torch.Tensor:
    """Emulate ``tl.randint(seed, offset)``: word 0 of :func:`randint4x`.

    Returns
    -------
    Tensor
        int64 tensor holding uint32 values, shape ``broadcast(seed, offset)``.
    """
    return randint4x(seed, offset, n_rounds=n_rounds)[0]


def uint_to_uniform_float(w: torch.Tensor) -> torch.Tensor:
    """Emulate Triton's ``uint_to_uniform_float`` for 32-bit words.

    Parameters
    ----------
    w : Tensor
        uint32 values held in int64 (or any integer tensor whose low 32 bits are the word).

    Returns
    -------
    Tensor
        fp32 values in ``[0, 1 - 2**-24]``, same shape as ``w``.

    Notes
    -----
    The word is reinterpreted as int32 ``x``; negatives fold to ``-x - 1`` (so 0 and -1 both map
    to 0), then ``float32(x) * float32(4.6566127342e-10)``. The int-to-float conversion rounds
    to nearest even, so the largest folded value, ``2**31 - 1``, becomes ``2**31``.
    """
    x = w.to(torch.int64) & _MASK32
    x = torch.where(x >= 2**31, x - 2**32, x)  # bitcast to int32
    x = torch.where(x < 0, -x - 1, x)  # in [0, 2**31 - 1], exact in int64
    scale = torch.tensor(_RAND32_SCALE, dtype=torch.float32, device=x.device)
    # int64 -> fp32 rounds to nearest even, as int32 -> fp32 does for values below 2**31.
    return x.to(torch.float32) * scale


def rand(seed: torch.Tensor | int, offset: torch.Tensor, *, n_rounds: int = _N_ROUNDS) -> torch.Tensor:
    """Emulate ``tl.rand(seed, offset)``: fp32 uniform in ``[0, 1)``.

    Returns
    -------
    Tensor
        fp32, shape ``broadcast(seed, offset)``.
    """
    return uint_to_uniform_float(randint(seed, offset, n_rounds=n_rounds))


def rand_clamped(seed: torch.Tensor | int, offset: torch.Tensor) -> torch.Tensor:
    """``max(tl.rand(seed, offset), RAND32_MIN)``: fp32 uniform in ``(0, 1)``.

    This is the sampler's ``rand32`` with ``includes_zero=False``: the only value changed is an
    exact 0, which becomes the smallest positive output of ``tl.rand``, so ``log u`` and
    ``-log(-log1p(-u))`` stay finite.
    """
    return torch.clamp_min(rand(seed, offset), RAND32_MIN)


def rand64(seed: torch.Tensor | int, offset: torch.Tensor) -> torch.Tensor:
    """fp64 uniform in ``(0, 1]`` built from two Philox words, for fp64 Gumbel noise.

    Recipe (a Triton kernel must do exactly this)::

        w0, w1, _, _ = tl.randint4x(seed, offset)          # uint32 words
        x = (w1.to(tl.uint64) << 32) | w0.to(tl.uint64)    # word 1 is the HIGH half
        u = x.to(tl.float64) * 5.421010862427522e-20       # 2**-64, exact power of two
        u = tl.maximum(u, 2.2250738585072014e-308)         # float64 tiny

    The uint64 -> fp64 conversion rounds to nearest even. Here it is done as
    ``float64(w1) * 2**32 + float64(w0)``: both terms are exact in fp64, so the single rounding
    of the sum equals the correctly rounded conversion of ``x``. Because of that rounding,
    ``x >= 2**64 - 2**10`` gives ``u == 1.0`` (probability about ``2**-54``). The word order
    (word 1 high, word 0 low) is the one vLLM's ``tl_rand64`` uses.

    Parameters
    ----------
    seed : Tensor or int
        Seed(s), broadcast against ``offset``.
    offset : Tensor
        Offsets; dtype semantics as in :func:`randint4x`.

    Returns
    -------
    Tensor
        fp64, shape ``broadcast(seed, offset)``.
    """
    w0, w1, _, _ = randint4x(seed, offset)
    x = w1.to(torch.float64) * _TWO_POW_32 + w0.to(torch.float64)
    return torch.clamp_min(x * _TWO_POW_MINUS_64, _FLOAT64_TINY)
