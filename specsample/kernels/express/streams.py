"""The random stream and the inverse-CDF pick of ``express`` (see the package docstring).

Every draw depends on (seed, position, block) only: the level-1 uniform of a row, the level-2
uniform of a (row, block), and the pick rule that turns a uniform and non-negative weights into
an index (never a zero weight, whatever the rounding). :data:`SAMPLE_BLOCK` and :data:`CHUNK`
are part of the stream's definition.
"""

from __future__ import annotations

import triton
import triton.language as tl


# Entries per vocabulary block of the two-level sampler. Part of the random stream's definition
# (block b's level-2 uniform is keyed by b): it must not depend on R or on a configuration, or
# a request's tokens would change when its batch is split.
SAMPLE_BLOCK = 2048
# Entries per chunk: sums over a chunk are fp32, sums of chunk sums fp64 (see the module docstring).
CHUNK = tl.constexpr(32)
_SCALE_53 = tl.constexpr(1.1102230246251565e-16)  # 2**-53


@triton.jit
def _row_uniform(seed, position):
    # Level-1 uniform of a row: words 1 and 2 of Philox(seed; pos, 0, 0, 0) as a 53-bit fp64.
    _, w1, w2, _ = tl.randint4x(seed, position.to(tl.int32))
    bits = (w1.to(tl.uint64) << 21) | (w2.to(tl.uint64) >> 11)
    return bits.to(tl.float64) * _SCALE_53


@triton.jit
def _block_uniform(seed, position, block):
    # Level-2 uniform of (row, block b): words 0 and 1 of Philox(seed; pos, 1 + b, 0, 0). An int64
    # offset gives the counter (low 32 bits, high 32 bits, 0, 0).
    counter = (position.to(tl.int32).to(tl.int64) & 0xFFFFFFFF) | ((block + 1).to(tl.int64) << 32)
    w0, w1, _, _ = tl.randint4x(seed, counter)
    bits = (w0.to(tl.uint64) << 21) | (w1.to(tl.uint64) >> 11)
    return bits.to(tl.float64) * _SCALE_53


@triton.jit
def _encode(positive, hit, k, SIZE: tl.constexpr):
    # _pick's packed key of index k: a hit keys k, a positive weight that is no hit keys
    # 2*SIZE - 1 - k (in [SIZE, 2*SIZE), smallest for the last), any other 2*SIZE.
    return tl.where(positive, tl.where(hit, k, 2 * SIZE - 1 - k), 2 * SIZE)


@triton.jit
def _decode(best, SIZE: tl.constexpr):
    # The smallest packed key -> the index (first hit, else last positive, else 0).
    return tl.where(best < SIZE, best, tl.where(best < 2 * SIZE, 2 * SIZE - 1 - best, 0))


@triton.jit
def _pick(weights, u, SIZE: tl.constexpr):
    # Inverse CDF over non-negative fp64 weights [SIZE]: the first index whose prefix sum exceeds
    # u * total among positive weights; else the last positive weight; else 0. Returns the
    # index and the total (the block's mass at level 2).
    # One integer min over _encode's keys instead of a min (first hit) and a max (last
    # positive): the min is the first hit, else the last positive, else none (_decode): the same
    # index, one reduction (a cross-warp one, shuffles and barriers) fewer.
    k = tl.arange(0, SIZE)
    prefix = tl.cumsum(weights, 0)
    total = tl.sum(weights, 0)
    best = tl.min(_encode(weights > 0.0, prefix > u * total, k, SIZE), 0)
    return _decode(best, SIZE), total


@triton.jit
def _prefix_pair(incl_a, excl_a, own_a, incl_b, excl_b, own_b):
    # Scan combine of (inclusive, exclusive) prefix sums: the exclusive sum of a segment is every
    # term but its last. Scanning (w, 0, w) gives both prefixes of w and w itself (the last term)
    # in one scan, all three in the scan's layout.
    return incl_a + incl_b, incl_a + excl_b, own_b


@triton.jit
def _min_key_with(key_a, x_a, y_a, key_b, x_b, y_b):
    # Reduce combine: the smaller key and the values that came with it (a tie keeps the left).
    left = key_a <= key_b
    return tl.where(left, key_a, key_b), tl.where(left, x_a, x_b), tl.where(left, y_a, y_b)


@triton.jit
def _sample_block(r, v, NC: tl.constexpr, CHUNK_: tl.constexpr):
    # Level 2 over one sampling block of fp32 weights r >= 0, as [NC, CHUNK_] chunks in order,
    # with the fp64 uniform v: a chunk by _pick's rule over the chunk masses (fp32 sums, then
    # fp64), then an entry of that chunk by _pick's rule with v's remainder rescaled to the
    # chunk, t = (v * total - mass before the chunk) / chunk mass. Returns the entry's index in
    # the block and the block's mass (fp64).
    #
    # _pick's rule and arithmetic, laid out so that fewer reductions cross warps (each is
    # shuffles, shared memory and barriers, and they run one after another): one scan gives the
    # inclusive and exclusive prefixes of the chunk masses; the chunk's key, its mass and its
    # exclusive prefix ("before": a sum of chunk sums, as the reference's, in the scan's order)
    # come out of one min-reduction, not three; and every chunk's entries get their fp64 prefix,
    # total and key inside their own warp, so the entry's pick is one min over the tile masked to
    # row j, rather than chunk j's entries reduced out of the tile across warps, converted to a
    # vector, scanned and picked.
    chunk_mass = tl.sum(r, 1).to(tl.float64)
    c = tl.arange(0, NC)
    incl, excl, chunk_mass = tl.associative_scan((chunk_mass, tl.zeros_like(chunk_mass), chunk_mass), 0, _prefix_pair)
    total = tl.sum(chunk_mass, 0)
    key = _encode(chunk_mass > 0.0, incl > v * total, c, NC)
    best, before, mass_j = tl.reduce((key, excl, chunk_mass), 0, _min_key_with)
    j = _decode(best, NC)
    t = tl.where(mass_j > 0.0, (v * total - before) / mass_j, 0.0)
    # entries of every chunk (only row j's keys survive the mask)
    r64 = r.to(tl.float64)
    inner_prefix = tl.cumsum(r64, 1)
    inner_total = tl.sum(r64, 1, keep_dims=True)
    k = tl.arange(0, CHUNK_)[None, :]
    inner_key = _encode((r64 > 0.0) & (c[:, None] == j), inner_prefix > t * inner_total, k, CHUNK_)
    i = _decode(tl.min(tl.min(inner_key, 1), 0), CHUNK_)
    return j * CHUNK_ + i, total


@triton.jit
def _chunk_offsets(block, NC: tl.constexpr, CHUNK_: tl.constexpr):
    # Vocabulary offsets of sampling block ``block`` as [NC, CHUNK_] chunks in order.
    return block * (NC * CHUNK_) + tl.arange(0, NC)[:, None] * CHUNK_ + tl.arange(0, CHUNK_)[None, :]
