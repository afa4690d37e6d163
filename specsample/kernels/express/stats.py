"""Row statistics of ``express``: the fp64 reductions every pass shares, and the stats kernel.

Chunked sums (fp32 over :data:`~.streams.CHUNK` entries, fp64 over the chunks), fp64 LSEs from
the [N, nb] partials, the residual weights ``max(p_tau p - q, 0)``, and the stats kernel: the
block max and chunked sum-exp (or first argmax) of the rows something reads.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..common import _launch_dependents, _request_rows
from .streams import CHUNK


@triton.jit
def _lse(local_max_ptr, local_sumexp_ptr, row, local_stride, num_blocks, NB_P2: tl.constexpr):
    # fp64 log-sum-exp of a row from its block partials (fp32 maxima, fp64 sum-exps); a block
    # whose max is -inf contributes 0; an all -inf row gives -inf.
    offs = tl.arange(0, NB_P2)
    mask = offs < num_blocks
    m = tl.load(local_max_ptr + row * local_stride + offs, mask=mask, other=float("-inf")).to(tl.float64)
    s = tl.load(local_sumexp_ptr + row * local_stride + offs, mask=mask, other=0.0)
    big = tl.max(m, 0)
    w = tl.where(m == float("-inf"), 0.0, s * tl.exp(m - big))
    return big + tl.log(tl.sum(w, 0))


@triton.jit
def _row_lses(m32, s):
    # fp64 log-sum-exp along axis 1 of [rows, NB_P2] partials (fp32 maxima m32, fp64 sum-exps s),
    # as _lse does for one row. The max is taken in fp32 (exact: fp32 -> fp64 is exact and
    # monotone), which leaves the fp64 work to the exps, the sum and the log.
    big = tl.max(m32, 1).to(tl.float64)
    w = tl.where(m32 == float("-inf"), 0.0, s * tl.exp(m32.to(tl.float64) - big[:, None]))
    return big + tl.log(tl.sum(w, 1))


@triton.jit
def _pick_row(values, k, index):
    # values[index] of a [K_P2] vector (0 where no k matches): a select, not a load. A sum of
    # one entry and zeros is that entry exactly (-inf too; other rows' NaN are not added).
    return tl.sum(tl.where(k == index, values, 0), 0)


@triton.jit
def _finite_or_neg_inf(x):
    # NaN is treated as -inf throughout, as mrv2 does in its reductions.
    return tl.where(x != x, float("-inf"), x)


@triton.jit
def _split(value):
    # An fp64 scalar as fp32 hi + lo (hi = round(value), lo = round(value - hi)).
    hi = value.to(tl.float32)
    lo = (value - hi.to(tl.float64)).to(tl.float32)
    return hi, lo


@triton.jit
def _residual(x, y, target_lse, draft_lse, scale):
    # max(scale * p - q, 0) per entry in fp32, p = exp(x - L_t), q = exp(y - L_d), the fp64 LSEs
    # subtracted as hi + lo (fp32 operations only, reproducible); NaN (an all -inf row) -> 0.
    t_hi, t_lo = _split(target_lse)
    d_hi, d_lo = _split(draft_lse)
    p = tl.exp((x - t_hi) - t_lo)
    q = tl.exp((y - d_hi) - d_lo)
    r = scale * p - q
    return tl.where(r > 0.0, r, 0.0)


@triton.jit
def _chunked_sum(e, SUB: tl.constexpr, BLOCK: tl.constexpr):
    # Row sums of [SUB, BLOCK] fp32: fp32 over chunks of CHUNK consecutive entries, fp64 over the
    # chunk sums, as the reference adds them. Not can_reorder=True: compiled, that reshape may
    # move entries between rows (sampling blocks), so every partial took other blocks' terms,
    # normalised by other maxima (seen on the H200: draws unlike the reference's, and changing
    # with the configuration; the interpreter keeps the order, so CPU tests could not see it).
    chunks = tl.reshape(e, (SUB, BLOCK // CHUNK, CHUNK))
    return tl.sum(tl.sum(chunks, 2).to(tl.float64), 1)


@triton.jit
def _inverse(temperature):
    # 1 / T, IEEE-rounded (div.rn; Triton's fp32 "/" is the approximate div.full): draft logits
    # are multiplied by it, so the kernels and the reference divide by T bit for bit alike.
    return tl.math.div_rn(1.0, temperature)


@triton.jit
def _first_index_of(x, row_max, BLOCK: tl.constexpr):
    # Per row of [n, BLOCK] x (no NaN: mapped to -inf before), the first index holding row_max,
    # as argmax(tie_break_left) gives it, by two plain reductions instead of one over (value,
    # index) pairs (greedy stats at R = 128: 74.8 us against 80.9). An all -inf row gives 0.
    return tl.min(tl.where(x == row_max[:, None], tl.arange(0, BLOCK)[None, :], BLOCK), 1)


@triton.jit
def _stats_rows(cu_num_logits_ptr, draft_sampled_ptr, idx_mapping_ptr, temperature_ptr, req, K_P2: tl.constexpr):
    # The rows of request req the stats kernel reads, j < num_read: a greedy request rows
    # j <= first placeholder (greedy writes the argmax there), the others rows j < first (the
    # rows tested), or row 0 when there is none (first == 0: tau = 0 for certain, and row 0's
    # target is the distribution to sample, whose block masses are then the stats partials).
    # Also the request's first row, slot, temperature and first placeholder. Two dependent loads deep.
    start, num_drafts, first = _request_rows(cu_num_logits_ptr, draft_sampled_ptr, req, K_P2)
    slot = tl.load(idx_mapping_ptr + req).to(tl.int64)
    temperature = tl.load(temperature_ptr + slot)
    num_read = tl.where(temperature == 0.0, tl.minimum(first + 1, num_drafts), tl.maximum(first, 1))
    return start, slot, temperature, num_read, first


@triton.jit
def _stats_partials(
    x,
    y_raw,
    row,
    j,
    first,
    temperature,
    blocks,
    target_local_argmax_ptr,  # [N, nb]
    partials,
    local_stride,
    num_blocks,
    HAS_DRAFT_LOGITS: tl.constexpr,
    SKIP_MASKED: tl.constexpr,
    SUB: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # One stats tile's partials from its loaded [SUB, BLOCK] target (and draft) logits: block
    # max and chunked sum-exp (or first argmax, greedy) of row `row`, sampling blocks `blocks`.
    # SKIP_MASKED: a tile whose target is -inf (or NaN) throughout stores what its arithmetic
    # would give (sum 0, argmax the block's first entry) without it; the draft's partials are
    # still computed, since the draft's LSE runs over every block, masked or not.
    target_local_max_ptr, target_local_sumexp_ptr, draft_local_max_ptr, draft_local_sumexp_ptr = partials
    x = _finite_or_neg_inf(x.to(tl.float32))
    block_max = tl.max(x, 1)
    out = row * local_stride + blocks
    bmask = blocks < num_blocks
    tl.store(target_local_max_ptr + out, block_max, mask=bmask)
    if temperature == 0.0:
        if SKIP_MASKED and tl.max(block_max, 0) == float("-inf"):
            tl.store(target_local_argmax_ptr + out, blocks.to(tl.int64) * BLOCK, mask=bmask)
        else:
            arg = _first_index_of(x, block_max, BLOCK)
            tl.store(target_local_argmax_ptr + out, blocks.to(tl.int64) * BLOCK + arg.to(tl.int64), mask=bmask)
    else:
        if SKIP_MASKED and tl.max(block_max, 0) == float("-inf"):
            tl.store(target_local_sumexp_ptr + out, tl.zeros((SUB,), dtype=tl.float64), mask=bmask)
        else:
            e = tl.where(x == float("-inf"), 0.0, tl.exp(x - block_max[:, None]))
            tl.store(target_local_sumexp_ptr + out, _chunked_sum(e, SUB, BLOCK), mask=bmask)
        # Not for row 0 read for its target alone: its draft arithmetic on an empty tile made each
        # such program as long as a tested row's (R = 128, phi = 1: stats 41 us instead of 13.7).
        if HAS_DRAFT_LOGITS and j < first:
            y = _finite_or_neg_inf(y_raw.to(tl.float32) * _inverse(temperature))
            d_max = tl.max(y, 1)
            ey = tl.where(y == float("-inf"), 0.0, tl.exp(y - d_max[:, None]))
            tl.store(draft_local_max_ptr + out, d_max, mask=bmask)
            tl.store(draft_local_sumexp_ptr + out, _chunked_sum(ey, SUB, BLOCK), mask=bmask)


@triton.jit
def _stats_kernel(
    target_logits_ptr,  # [N, V]
    target_logits_stride,
    draft_logits_ptr,  # [max_num_reqs, K, V_d]
    draft_logits_stride_0,
    draft_logits_stride_1,
    draft_sampled_ptr,  # [N]
    cu_num_logits_ptr,  # [R + 1]
    idx_mapping_ptr,  # [R]
    temperature_ptr,  # [max_num_reqs]
    target_local_argmax_ptr,  # [N, nb]
    target_local_max_ptr,  # [N, nb]
    target_local_sumexp_ptr,  # [N, nb] fp64
    draft_local_max_ptr,  # [N, nb]
    draft_local_sumexp_ptr,  # [N, nb] fp64
    local_stride,
    num_blocks,
    vocab_size,
    HAS_DRAFT_LOGITS: tl.constexpr,
    SKIP_MASKED: tl.constexpr,
    K_P2: tl.constexpr,
    GROUPS: tl.constexpr,
    SUB: tl.constexpr,
    BLOCK: tl.constexpr,
    PDL: tl.constexpr,
):
    # Program (req * K + j, g): row j of request req, sampling blocks g*SUB .. g*SUB + SUB-1 as
    # one [SUB, BLOCK] tile, one partial per sampling block. A greedy request reads rows
    # j <= first placeholder (greedy writes the argmax there), the others rows j < first.
    # The call's first kernel: launched in stream order, it lets the rejection (or cum_log_p)
    # kernel start as soon as its last programs with work have started.
    partials = (target_local_max_ptr, target_local_sumexp_ptr, draft_local_max_ptr, draft_local_sumexp_ptr)
    req = (tl.program_id(0) // GROUPS).to(tl.int64)
    j = tl.program_id(0) % GROUPS
    start, slot, temperature, num_read, first = _stats_rows(
        cu_num_logits_ptr, draft_sampled_ptr, idx_mapping_ptr, temperature_ptr, req, K_P2
    )
    if j >= num_read:
        return
    _launch_dependents(PDL)
    row = start + j
    blocks = tl.program_id(1) * SUB + tl.arange(0, SUB)
    offs = blocks[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
    vmask = offs < vocab_size
    x = tl.load(target_logits_ptr + row * target_logits_stride + offs, mask=vmask, other=float("-inf"))
    y_raw = x  # unread without draft logits
    if HAS_DRAFT_LOGITS:
        # Issued with the target's load (fast's early draft load); only for a tested row (not a
        # greedy row, nor row 0 read for its target alone: its draft partials are never read).
        d_ptrs = draft_logits_ptr + slot * draft_logits_stride_0 + j.to(tl.int64) * draft_logits_stride_1 + offs
        tested = (temperature != 0.0) & (j < first)
        y_raw = tl.load(d_ptrs, mask=offs < tl.where(tested, vocab_size, 0), other=float("-inf"))
    _stats_partials(
        x,
        y_raw,
        row,
        j,
        first,
        temperature,
        blocks,
        target_local_argmax_ptr,
        partials,
        local_stride,
        num_blocks,
        HAS_DRAFT_LOGITS,
        SKIP_MASKED,
        SUB,
        BLOCK,
    )
