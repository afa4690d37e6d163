"""mrv2's row statistics: kernels 1-3, which read the logits rows before the rejection step.

``_local_stats_kernel`` writes every non-bonus row's [N, nb] block partials (max, sum-exp, or a
greedy row's first argmax); ``_cumulative_log_p_kernel`` and ``_residual_mass_kernel`` (block
verification) reduce them with the logits to the prefix ratios log p_i and the residual mass Z
per block. ``_global_lse`` turns a row's partials into its LSE (spec 3.1), for these and for the
rejection kernel.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..common import _load_logits


@triton.jit
def _global_lse(
    # [N, nb] per-block max and sum exp(x - max)
    local_max_ptr,
    local_sumexp_ptr,
    row,
    local_stride,
    num_blocks,
    NUM_BLOCKS_P2: tl.constexpr,
):
    # The LSE of row ``row`` from its stats partials (spec 3.1):
    # LSE = M + log sum_b s_b * exp(m_b - M); a block whose max is -inf contributes 0, not NaN.
    offs = tl.arange(0, NUM_BLOCKS_P2)
    mask = offs < num_blocks
    m = tl.load(local_max_ptr + row * local_stride + offs, mask=mask, other=float("-inf"))
    s = tl.load(local_sumexp_ptr + row * local_stride + offs, mask=mask, other=0.0)
    big = tl.max(m, 0)
    w = tl.where(m == float("-inf"), 0.0, s * tl.exp(m - big))
    return big + tl.log(tl.sum(w, 0))


# ---------------------------------------------------------------------------------------------
# Kernel 1: local logits stats (spec 3.2)
# ---------------------------------------------------------------------------------------------


@triton.jit
def _local_stats_kernel(
    # [N, V]
    target_logits_ptr,
    target_logits_stride,
    # [max_num_reqs, K, V_d]
    draft_logits_ptr,
    draft_logits_stride_0,
    draft_logits_stride_1,
    # [N]
    expanded_idx_mapping_ptr,
    expanded_local_pos_ptr,
    # [max_num_reqs]
    temperature_ptr,
    # [N, nb] outputs
    target_local_argmax_ptr,
    target_local_max_ptr,
    target_local_sumexp_ptr,
    draft_local_max_ptr,
    draft_local_sumexp_ptr,
    local_stride,
    vocab_size,
    num_speculative_steps,
    HAS_DRAFT_LOGITS: tl.constexpr,
    BLOCK_V: tl.constexpr,
    NAN_GUARD: tl.constexpr = True,
    FUSED_ARGMAX: tl.constexpr = False,
):
    row = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    local_pos = tl.load(expanded_local_pos_ptr + row)
    if local_pos >= num_speculative_steps:
        return  # bonus rows need no stats
    slot = tl.load(expanded_idx_mapping_ptr + row).to(tl.int64)
    temperature = tl.load(temperature_ptr + slot)

    # ---- one 8192-wide block of the target row (loaded in each branch: fewer live registers,
    # so more programs per SM); NaN is treated as -inf throughout
    offs = block * BLOCK_V + tl.arange(0, BLOCK_V)
    mask = offs < vocab_size
    out = row * local_stride + block
    if temperature == 0.0:
        x = _load_logits(target_logits_ptr + row * target_logits_stride + offs, mask, NAN_GUARD)
        if FUSED_ARGMAX:
            # the block's max and its first argmax in one reduction
            block_max, local_argmax = tl.max(x, 0, return_indices=True, return_indices_tie_break_left=True)
        else:
            block_max = tl.max(x, 0)
            local_argmax = tl.argmax(x, 0, tie_break_left=True)
        tl.store(target_local_max_ptr + out, block_max)
        tl.store(target_local_argmax_ptr + out, block * BLOCK_V + local_argmax.to(tl.int64))
    else:
        x = _load_logits(target_logits_ptr + row * target_logits_stride + offs, mask, NAN_GUARD)
        block_max, block_sumexp = _max_and_sumexp(x)
        tl.store(target_local_max_ptr + out, block_max)
        tl.store(target_local_sumexp_ptr + out, block_sumexp)
        if HAS_DRAFT_LOGITS:
            # Draft logits arrive pre-temperature in the LM-head dtype: divide by T on load.
            d_ptr = draft_logits_ptr + slot * draft_logits_stride_0 + local_pos.to(tl.int64) * draft_logits_stride_1
            y = _load_logits(d_ptr + offs, mask, NAN_GUARD) / temperature
            d_max, d_sumexp = _max_and_sumexp(y)
            tl.store(draft_local_max_ptr + out, d_max)
            tl.store(draft_local_sumexp_ptr + out, d_sumexp)


@triton.jit
def _max_and_sumexp(x):
    # max and sum exp(x - max) of a block. exp(-inf - max) is 0, so -inf entries need no mask;
    # only an all -inf block (max -inf, where x - max is NaN) needs its sum set to 0.
    m = tl.max(x, 0)
    return m, tl.where(m == float("-inf"), 0.0, tl.sum(tl.exp(x - m), 0))


# ---------------------------------------------------------------------------------------------
# Kernel 2: cumulative log p, block verification only (spec 3.3)
# ---------------------------------------------------------------------------------------------


@triton.jit
def _cumulative_log_p_kernel(
    # [N, V]
    target_logits_ptr,
    target_logits_stride,
    # [max_num_reqs, K, V_d]
    draft_logits_ptr,
    draft_logits_stride_0,
    draft_logits_stride_1,
    # [N]
    draft_sampled_ptr,
    # [R + 1]
    cu_num_logits_ptr,
    # [R]
    idx_mapping_ptr,
    # [max_num_reqs]
    temperature_ptr,
    # [N, nb]
    target_local_max_ptr,
    target_local_sumexp_ptr,
    draft_local_max_ptr,
    draft_local_sumexp_ptr,
    local_stride,
    num_blocks,
    # [N] output
    cumulative_log_p_ptr,
    HAS_DRAFT_LOGITS: tl.constexpr,
    PLACEHOLDER_FIX: tl.constexpr,
    NUM_BLOCKS_P2: tl.constexpr,
):
    req = tl.program_id(0)
    slot = tl.load(idx_mapping_ptr + req).to(tl.int64)
    temperature = tl.load(temperature_ptr + slot)
    if temperature == 0.0:
        return
    start = tl.load(cu_num_logits_ptr + req).to(tl.int64)
    num_drafts = tl.load(cu_num_logits_ptr + req + 1).to(tl.int64) - start - 1

    # log p_i = min(log p_{i-1} + log M_b(X_i) - log M_s(X_i), 0); typed before the loop
    # because the placeholder branch leaves it unassigned.
    log_p = tl.zeros((), dtype=tl.float32)
    for step in range(0, num_drafts):
        row = start + step
        token = tl.load(draft_sampled_ptr + row + 1).to(tl.int64)
        if PLACEHOLDER_FIX:
            valid = token >= 0
        else:
            valid = token > -2  # pre-#50939: no placeholder check (always true)
        if valid:
            # The replica clamps -1 to token 0 where upstream read index -1 out of bounds.
            token = tl.maximum(token, 0)
            lse = _global_lse(
                target_local_max_ptr, target_local_sumexp_ptr, row, local_stride, num_blocks, NUM_BLOCKS_P2
            )
            lp = tl.load(target_logits_ptr + row * target_logits_stride + token).to(tl.float32) - lse
            if HAS_DRAFT_LOGITS:
                d_lse = _global_lse(
                    draft_local_max_ptr, draft_local_sumexp_ptr, row, local_stride, num_blocks, NUM_BLOCKS_P2
                )
                d_ptr = draft_logits_ptr + slot * draft_logits_stride_0 + step * draft_logits_stride_1
                lq = tl.load(d_ptr + token).to(tl.float32) / temperature - d_lse
            else:
                lq = 0.0
            log_p = tl.minimum(log_p + lp - lq, 0.0)
        tl.store(cumulative_log_p_ptr + row, log_p)


# ---------------------------------------------------------------------------------------------
# Kernel 3: local residual mass, block verification with draft logits (spec 3.4)
# ---------------------------------------------------------------------------------------------


@triton.jit
def _residual_mass_kernel(
    # [N, V]
    target_logits_ptr,
    target_logits_stride,
    # [max_num_reqs, K, V_d]
    draft_logits_ptr,
    draft_logits_stride_0,
    draft_logits_stride_1,
    # [N]
    draft_sampled_ptr,
    expanded_idx_mapping_ptr,
    expanded_local_pos_ptr,
    # [max_num_reqs]
    temperature_ptr,
    # [N, nb]
    target_local_max_ptr,
    target_local_sumexp_ptr,
    draft_local_max_ptr,
    draft_local_sumexp_ptr,
    local_stride,
    num_blocks,
    # [N]
    cumulative_log_p_ptr,
    # [N, nb] output
    local_residual_mass_ptr,
    num_logits,
    vocab_size,
    num_speculative_steps,
    PLACEHOLDER_FIX: tl.constexpr,
    BLOCK_V: tl.constexpr,
    NUM_BLOCKS_P2: tl.constexpr,
):
    row = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    local_pos = tl.load(expanded_local_pos_ptr + row)
    if (local_pos == 0) | (local_pos >= num_speculative_steps):
        return  # row 0's residual is never needed; bonus rows are excluded
    if PLACEHOLDER_FIX:
        # The draft this row tests; if it is a placeholder the block ends before it and this
        # residual is unused. Masked: the last row of a launch may be a bonus row with j < K.
        nxt = tl.load(draft_sampled_ptr + row + 1, mask=row + 1 < num_logits, other=-1)
        if nxt < 0:
            return
    slot = tl.load(expanded_idx_mapping_ptr + row).to(tl.int64)
    temperature = tl.load(temperature_ptr + slot)
    if temperature == 0.0:
        return

    # partial[t, b] = sum_x max(p_j * M_b(x) - M_s(x), 0), with p_j = exp(cum_log_p[t-1]);
    # past the vocabulary both logits are -inf, so both terms are 0 there and need no mask.
    offs = block * BLOCK_V + tl.arange(0, BLOCK_V)
    mask = offs < vocab_size
    x = tl.load(target_logits_ptr + row * target_logits_stride + offs, mask=mask, other=float("-inf")).to(tl.float32)
    lse = _global_lse(target_local_max_ptr, target_local_sumexp_ptr, row, local_stride, num_blocks, NUM_BLOCKS_P2)
    m_b = tl.exp(tl.load(cumulative_log_p_ptr + row - 1)) * tl.exp(x - lse)
    d_ptr = draft_logits_ptr + slot * draft_logits_stride_0 + local_pos.to(tl.int64) * draft_logits_stride_1
    y = tl.load(d_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32) / temperature
    d_lse = _global_lse(draft_local_max_ptr, draft_local_sumexp_ptr, row, local_stride, num_blocks, NUM_BLOCKS_P2)
    res = tl.maximum(m_b - tl.exp(y - d_lse), 0.0)
    tl.store(local_residual_mass_ptr + row * local_stride + block, tl.sum(res, 0))
