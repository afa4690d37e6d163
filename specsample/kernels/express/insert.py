"""The insert step of ``express``: level 1 where not drawn yet, level 2 in the chosen block.

One block of the row is read again; ``num_sampled`` becomes tau + 1.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..common import _launch_dependents, _resampled_token, _wait_for_prior
from .streams import _block_uniform, _chunk_offsets, _pick, _row_uniform, _sample_block, CHUNK
from .stats import _finite_or_neg_inf, _inverse, _residual
from .rejection import (
    PLAN_ARGMAX,
    PLAN_BLOCK_RESIDUAL,
    PLAN_DONE,
    PLAN_ONE_HOT,
    PLAN_RESIDUAL,
    PLAN_TARGET,
    PLAN_TARGET_DRAWN,
)


@triton.jit
def _insert_kernel(
    sampled_ptr,  # [R, K + 1]
    sampled_stride,
    num_sampled_ptr,  # [R]
    plan_ptr,  # [R]
    plan_block_ptr,  # [R]
    plan_lse_ptr,  # [R, 2] fp64
    plan_scale_ptr,  # [R]
    resampled_mass_ptr,  # [R, nb] fp64
    resampled_argmax_ptr,  # [R, nb]
    resampled_stride,
    num_blocks,
    target_logits_ptr,  # [N, V]
    target_logits_stride,
    draft_logits_ptr,  # [max_num_reqs, K, V_d]
    draft_logits_stride_0,
    draft_logits_stride_1,
    draft_sampled_ptr,  # [N]
    pos_ptr,  # [N]
    cu_num_logits_ptr,  # [R + 1]
    idx_mapping_ptr,  # [R]
    temperature_ptr,  # [max_num_reqs]
    seed_ptr,  # [max_num_reqs]
    vocab_size,
    HAS_DRAFT_LOGITS: tl.constexpr,
    NB_P2: tl.constexpr,
    BLOCK: tl.constexpr,
    PDL: tl.constexpr,
):
    outputs = (sampled_ptr, sampled_stride, num_sampled_ptr)
    plans = (plan_ptr, plan_block_ptr, plan_lse_ptr, plan_scale_ptr)
    resampled = (resampled_mass_ptr, resampled_argmax_ptr)
    logits = (target_logits_ptr, target_logits_stride, draft_logits_ptr, draft_logits_stride_0, draft_logits_stride_1)
    requests = (draft_sampled_ptr, cu_num_logits_ptr, idx_mapping_ptr, temperature_ptr)
    _launch_dependents(PDL)
    req = tl.program_id(0).to(tl.int64)
    # the request's slot and first row (call inputs) before the wait: one dependent round fewer
    # after it, on the call's last kernel
    slot = tl.load(idx_mapping_ptr + req).to(tl.int64)
    start = tl.load(cu_num_logits_ptr + req).to(tl.int64)
    _wait_for_prior(PDL)
    _insert_request(
        outputs,
        plans,
        resampled,
        req * resampled_stride,
        num_blocks,
        logits,
        requests,
        pos_ptr,
        seed_ptr,
        vocab_size,
        req,
        slot,
        start,
        tl.load(plan_ptr + req),
        tl.load(num_sampled_ptr + req).to(tl.int64),
        HAS_DRAFT_LOGITS,
        NB_P2,
        BLOCK,
        "",
    )


@triton.jit
def _target_weights(x, offs, plan, rejected):
    # Level-2 weights of softmax(target) in one block (fp32 logits x, NaN as -inf): exp(x - block
    # max), 0 at -inf, less the rejected draft for a one-hot residual.
    x = _finite_or_neg_inf(x)
    block_max = tl.max(tl.max(x, 1), 0)
    r = tl.where(x == float("-inf"), 0.0, tl.exp(x - block_max))
    if plan == PLAN_ONE_HOT:
        r = tl.where(offs == rejected, 0.0, r)  # the rejected draft
    return r


@triton.jit
def _insert_request(
    outputs,
    plans,
    resampled,
    base,
    num_blocks,
    logits,
    requests,
    pos_ptr,  # [N]
    seed_ptr,  # [max_num_reqs]
    vocab_size,
    req,
    slot,
    start,
    plan,
    tau,
    HAS_DRAFT_LOGITS: tl.constexpr,
    NB_P2: tl.constexpr,
    BLOCK: tl.constexpr,
    CACHE: tl.constexpr,
):
    # The token of row c_r + tau, then num_sampled = tau + 1. Greedy bonus row: the first block
    # whose max is largest (NaN as -inf), its argmax. Sampled plans: level 1 over the resample
    # pass's log-masses (target, residual) unless the rejection kernel drew it (one-hot, block
    # residual), then level 2 inside that block, read again (8 KB of target, 4 KB of bf16 draft).
    sampled_ptr, sampled_stride, num_sampled_ptr = outputs
    plan_ptr, plan_block_ptr, plan_lse_ptr, plan_scale_ptr = plans
    resampled_mass_ptr, resampled_argmax_ptr = resampled
    target_logits_ptr, target_logits_stride, draft_logits_ptr, draft_logits_stride_0, draft_logits_stride_1 = logits
    draft_sampled_ptr, cu_num_logits_ptr, idx_mapping_ptr, temperature_ptr = requests
    if plan == PLAN_ARGMAX:
        token = _resampled_token(resampled_argmax_ptr, resampled_mass_ptr, base, num_blocks, NB_P2, CACHE)
        tl.store(sampled_ptr + req * sampled_stride + tau, token)
    elif plan != PLAN_DONE:
        # Every load is issued as soon as its address is known, before any reduction (ptxas does
        # not hoist a load above a shuffle or libdevice's branches): the log-masses, the plan's
        # values, the seed, position, temperature and rejected draft (the slot and first row
        # come in, loaded by the caller before its dependent-launch wait); then, once level 1 has
        # picked the block, the block's target and draft logits together.
        level_1_here = (plan == PLAN_TARGET) | (plan == PLAN_RESIDUAL)
        draft_residual = (plan == PLAN_RESIDUAL) | (plan == PLAN_BLOCK_RESIDUAL)
        row = start + tau
        nb = tl.arange(0, NB_P2)
        log_mass = tl.load(
            resampled_mass_ptr + base + nb,
            mask=(nb < num_blocks) & level_1_here,
            other=float("-inf"),
            cache_modifier=CACHE,
        )
        early_block = tl.load(
            plan_block_ptr + req,
            mask=(plan == PLAN_ONE_HOT) | (plan == PLAN_BLOCK_RESIDUAL) | (plan == PLAN_TARGET_DRAWN),
            other=0,
        )
        if HAS_DRAFT_LOGITS:
            scale = tl.load(plan_scale_ptr + req, mask=draft_residual, other=1.0)
            target_lse = tl.load(plan_lse_ptr + 2 * req, mask=draft_residual, other=0.0)
            draft_lse = tl.load(plan_lse_ptr + 2 * req + 1, mask=draft_residual, other=0.0)
            temperature = tl.load(temperature_ptr + slot)
        seed = tl.load(seed_ptr + slot)
        position = tl.load(pos_ptr + row)
        # the rejected draft (one-hot); row + 1 is past the batch for the last request's bonus row
        rejected = tl.load(draft_sampled_ptr + row + 1, mask=plan == PLAN_ONE_HOT, other=-1)
        if level_1_here:
            big = tl.max(log_mass, 0)
            w = tl.where(log_mass == float("-inf"), 0.0, tl.exp(log_mass - big))
            block, _ = _pick(w, _row_uniform(seed, position), NB_P2)
        else:
            block = early_block
        # ---- level 2: the chosen block's weights, recomputed, as [chunks, CHUNK]
        offs = _chunk_offsets(block, BLOCK // CHUNK, CHUNK)
        mask = offs < vocab_size
        x = tl.load(target_logits_ptr + row * target_logits_stride + offs, mask=mask, other=float("-inf"))
        if HAS_DRAFT_LOGITS:
            d_ptr = draft_logits_ptr + slot * draft_logits_stride_0 + tau * draft_logits_stride_1
            y_raw = tl.load(d_ptr + offs, mask=mask & draft_residual, other=float("-inf"))
        x = x.to(tl.float32)
        # A draft residual's weights need neither the block max nor exp(x - max): one cross-warp
        # reduction and an exp per entry fewer on that path. Nor NaN -> -inf on x: a NaN target
        # logit gives p = NaN, r = NaN and max(r, 0) = 0, as -inf gives p = 0, r = -q <= 0 and 0.
        # (With that select right after the loads, ptxas issued the block's four 16-byte target
        # loads one after another, each waiting for the last: three dependent rounds more.)
        if HAS_DRAFT_LOGITS:
            if draft_residual:
                y = _finite_or_neg_inf(y_raw.to(tl.float32) * _inverse(temperature))
                r = tl.where(mask, _residual(x, y, target_lse, draft_lse, scale), 0.0)
            else:
                r = _target_weights(x, offs, plan, rejected)
        else:
            r = _target_weights(x, offs, plan, rejected)
        index, _ = _sample_block(r, _block_uniform(seed, position, block), BLOCK // CHUNK, CHUNK)
        tl.store(sampled_ptr + req * sampled_stride + tau, block.to(tl.int64) * BLOCK + index.to(tl.int64))
    tl.store(num_sampled_ptr + req, (tau + 1).to(tl.int32))
