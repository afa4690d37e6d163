"""MRV2 rejection sampler in Triton: six kernels and one launcher.

This is the pipeline of ``docs/algorithm.md`` (the spec's sections 2-3), written
from the spec, in its post-PR-#50939 form. One flag, ``PLACEHOLDER_FIX``, switches every kernel
back to the pre-#50939 behaviour for the benchmark-only replica in :mod:`.pre50939`; the
replica clamps the ``-1`` indices that upstream read out of bounds, so both forms are memory-safe.

Kernels (grid; launched when):

1. ``_local_stats_kernel``    (N, nb)  always: per 8192-wide vocab block max / sumexp / argmax
2. ``_cumulative_log_p_kernel`` (R,)   block verification: prefix joint ratio log p_i
3. ``_residual_mass_kernel``  (N, nb)  block verification with draft logits: partial Z
4. ``_rejection_kernel``      (R,)     always: serial over drafts, decides tau
5. ``_resample_kernel``       (R, rb)  always: residual logits + Gumbel argmax per 1024 block
6. ``_insert_kernel``         (R,)     always: argmax over blocks, num_sampled = tau + 1

Bytes (fp32 target, ``s_d`` bytes per draft value): stats reads ``R*K*V*(4 + s_d)``; residual
mass reads up to ``R*(K-1)*V*(4 + s_d)``; resample reads ``R*V*4`` (+ ``R*V*s_d`` for a
draft-logits residual); the serial kernels read O(R*K*nb) partials and gathers.

Index width: every row or slot index is cast to int64 before it meets a stride, so N*V above
2**31 is safe (vocab 151936 overflows int32 offsets past ~14000 rows).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from .common import MIN_UNIFORM, PipelineLaunch, _global_argmax, _log1m, _resampled_token, _uniform

# Vocab block of the stats and residual-mass kernels: one program reads 8192 logits.
VOCAB_BLOCK_SIZE = 8192
# Vocab block of the resample kernel: smaller, so R*rb programs fill the GPU at small R.
RESAMPLE_BLOCK_SIZE = 1024


# ---------------------------------------------------------------------------------------------
# Shared device helpers (spec 3.1)
# ---------------------------------------------------------------------------------------------


@triton.jit
def _global_lse(local_max_ptr, local_sumexp_ptr, row, local_stride, num_blocks, NUM_BLOCKS_P2: tl.constexpr):
    # LSE = M + log sum_b s_b * exp(m_b - M); a block whose max is -inf contributes 0, not NaN.
    offs = tl.arange(0, NUM_BLOCKS_P2)
    mask = offs < num_blocks
    m = tl.load(local_max_ptr + row * local_stride + offs, mask=mask, other=float("-inf"))
    s = tl.load(local_sumexp_ptr + row * local_stride + offs, mask=mask, other=0.0)
    big = tl.max(m, 0)
    w = tl.where(m == float("-inf"), 0.0, s * tl.exp(m - big))
    return big + tl.log(tl.sum(w, 0))


@triton.jit
def _log1m_of(u, LIBDEVICE_LOG1P: tl.constexpr):
    # log(1 - u): libdevice's log1p(-u) on the GPU (as vLLM's kernels take it), else the series
    # of _log1m (libdevice does not run under the interpreter).
    if LIBDEVICE_LOG1P:
        return libdevice.log1p(-u)
    else:
        return _log1m(u)


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
def _load_logits(ptrs, mask, NAN_GUARD: tl.constexpr):
    # One block of logits in fp32, -inf past the vocabulary; NaN as -inf when NAN_GUARD.
    x = tl.load(ptrs, mask=mask, other=float("-inf")).to(tl.float32)
    if NAN_GUARD:
        x = tl.where(x != x, float("-inf"), x)
    return x


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


# ---------------------------------------------------------------------------------------------
# Kernel 4: rejection (spec 3.5, 5.1-5.3)
# ---------------------------------------------------------------------------------------------


@triton.jit
def _rejection_kernel(
    # [R, K + 1] output
    sampled_ptr,
    sampled_stride,
    # [R] output: tau (rejected_steps), later num_sampled
    num_sampled_ptr,
    # [R] outputs: LSEs of row c_r + tau for the resample step
    target_rejected_lse_ptr,
    draft_rejected_lse_ptr,
    # [N, V]
    target_logits_ptr,
    target_logits_stride,
    # [max_num_reqs, K, V_d]
    draft_logits_ptr,
    draft_logits_stride_0,
    draft_logits_stride_1,
    # [N]
    draft_sampled_ptr,
    pos_ptr,
    # [R + 1]
    cu_num_logits_ptr,
    # [R]
    idx_mapping_ptr,
    # [max_num_reqs]
    temperature_ptr,
    seed_ptr,
    # [N, nb]
    target_local_argmax_ptr,
    target_local_max_ptr,
    target_local_sumexp_ptr,
    draft_local_max_ptr,
    draft_local_sumexp_ptr,
    local_residual_mass_ptr,
    local_stride,
    num_blocks,
    # [N]
    cumulative_log_p_ptr,
    # [K]
    synthetic_conditional_rates_ptr,
    HAS_DRAFT_LOGITS: tl.constexpr,
    SYNTHETIC_MODE: tl.constexpr,
    USE_BLOCK_VERIFICATION: tl.constexpr,
    PLACEHOLDER_FIX: tl.constexpr,
    NUM_BLOCKS_P2: tl.constexpr,
):
    req = tl.program_id(0).to(tl.int64)
    slot = tl.load(idx_mapping_ptr + req).to(tl.int64)
    start = tl.load(cu_num_logits_ptr + req).to(tl.int64)
    num_drafts = tl.load(cu_num_logits_ptr + req + 1).to(tl.int64) - start - 1
    temperature = tl.load(temperature_ptr + slot)
    seed = tl.load(seed_ptr + slot)
    is_greedy = temperature == 0.0

    tau = tl.zeros((), dtype=tl.int64)
    verifying = tl.full((), 1, dtype=tl.int1)
    target_lse = tl.zeros((), dtype=tl.float32)
    draft_lse = tl.zeros((), dtype=tl.float32)
    out = sampled_ptr + req * sampled_stride

    for step in range(0, num_drafts):
        row = start + step
        raw = tl.load(draft_sampled_ptr + row + 1).to(tl.int64)
        valid = raw >= 0
        token = tl.maximum(raw, 0)  # clamp: never form a pointer from -1
        if is_greedy:
            # Greedy is not short-circuited: at a placeholder it still stores the argmax,
            # because a greedy rejection is never resampled (spec 5.1).
            if verifying:
                best = _global_argmax(
                    target_local_argmax_ptr, target_local_max_ptr, row, local_stride, num_blocks, NUM_BLOCKS_P2
                )
                if SYNTHETIC_MODE:
                    u = _uniform(seed, tl.load(pos_ptr + row))
                    accepted = u < tl.load(synthetic_conditional_rates_ptr + step)
                else:
                    accepted = best == token
                accepted = accepted & valid  # after clamping, token 0 must not "match"
                tl.store(out + step, tl.where(accepted, token, best))
                tau += accepted.to(tl.int64)
                verifying = accepted
        else:
            if PLACEHOLDER_FIX:
                verifying = verifying & valid  # stop at the first -1, before any work
            if verifying:
                u = _uniform(seed, tl.load(pos_ptr + row))
                if USE_BLOCK_VERIFICATION:
                    # Sun et al.: tau = max{i+1 : u_i <= h_i}; a failed test does not stop the scan.
                    pi = tl.exp(tl.load(cumulative_log_p_ptr + row))
                    if PLACEHOLDER_FIX:
                        # Masked look-ahead: no next draft past the request's end (default -1).
                        nxt = tl.load(draft_sampled_ptr + row + 2, mask=step < num_drafts - 1, other=-1).to(tl.int64)
                        has_next = nxt >= 0
                    else:
                        nxt = tl.load(draft_sampled_ptr + row + 2, mask=step < num_drafts - 1, other=0).to(tl.int64)
                        has_next = step < num_drafts - 1
                        nxt = tl.maximum(nxt, 0)  # replica: clamp where upstream read index -1
                    if has_next:
                        if HAS_DRAFT_LOGITS:
                            offs = tl.arange(0, NUM_BLOCKS_P2)
                            partial = tl.load(
                                local_residual_mass_ptr + (row + 1) * local_stride + offs,
                                mask=offs < num_blocks,
                                other=0.0,
                            )
                            z = tl.sum(partial, 0)
                        else:
                            # One-hot: sum_x max(pi*M_b(x) - delta_d(x), 0) = pi*(1 - M_b(d)).
                            lse_next = _global_lse(
                                target_local_max_ptr,
                                target_local_sumexp_ptr,
                                row + 1,
                                local_stride,
                                num_blocks,
                                NUM_BLOCKS_P2,
                            )
                            x_next = tl.load(target_logits_ptr + (row + 1) * target_logits_stride + nxt).to(tl.float32)
                            z = pi * (1.0 - tl.exp(x_next - lse_next))
                        denom = z + 1.0 - pi
                        h = tl.where(denom > 0.0, z / denom, 1.0)
                    else:
                        h = pi  # end of block: h_gamma = p_gamma
                    if u <= h:
                        tau = step + 1
                    if PLACEHOLDER_FIX:
                        tl.store(out + step, token)
                    else:
                        tl.store(out + step, raw)  # pre-#50939 stored the raw -1
                else:
                    # Leviathan et al.: accept iff log p(d) > log u + log q(d) (strict).
                    target_lse = _global_lse(
                        target_local_max_ptr, target_local_sumexp_ptr, row, local_stride, num_blocks, NUM_BLOCKS_P2
                    )
                    lp = tl.load(target_logits_ptr + row * target_logits_stride + token).to(tl.float32) - target_lse
                    if HAS_DRAFT_LOGITS:
                        draft_lse = _global_lse(
                            draft_local_max_ptr, draft_local_sumexp_ptr, row, local_stride, num_blocks, NUM_BLOCKS_P2
                        )
                        d_ptr = draft_logits_ptr + slot * draft_logits_stride_0 + step * draft_logits_stride_1
                        lq = tl.load(d_ptr + token).to(tl.float32) / temperature - draft_lse
                    else:
                        lq = 0.0
                    if SYNTHETIC_MODE:
                        accepted = u < tl.load(synthetic_conditional_rates_ptr + step)
                    else:
                        accepted = lp > tl.log(u) + lq
                    accepted = accepted & valid
                    tl.store(out + step, token)
                    tau += accepted.to(tl.int64)
                    verifying = accepted

    if USE_BLOCK_VERIFICATION:
        if (tau < num_drafts) & (temperature != 0.0):
            # LSEs of the first rejected row, for the residual in the resample step.
            target_lse = _global_lse(
                target_local_max_ptr, target_local_sumexp_ptr, start + tau, local_stride, num_blocks, NUM_BLOCKS_P2
            )
            if HAS_DRAFT_LOGITS:
                draft_lse = _global_lse(
                    draft_local_max_ptr, draft_local_sumexp_ptr, start + tau, local_stride, num_blocks, NUM_BLOCKS_P2
                )
    tl.store(num_sampled_ptr + req, tau.to(tl.int32))
    tl.store(target_rejected_lse_ptr + req, target_lse)
    tl.store(draft_rejected_lse_ptr + req, draft_lse)


# ---------------------------------------------------------------------------------------------
# Kernel 5: resample (spec 3.6, 3.8)
# ---------------------------------------------------------------------------------------------


@triton.jit
def _resample_kernel(
    # [R, rb] outputs
    resampled_local_argmax_ptr,
    resampled_local_max_ptr,
    resampled_stride,
    # [R]
    num_sampled_ptr,
    target_rejected_lse_ptr,
    draft_rejected_lse_ptr,
    # [N, V]
    target_logits_ptr,
    target_logits_stride,
    # [max_num_reqs, K, V_d]
    draft_logits_ptr,
    draft_logits_stride_0,
    draft_logits_stride_1,
    # [N]
    draft_sampled_ptr,
    pos_ptr,
    cumulative_log_p_ptr,
    # [R + 1]
    cu_num_logits_ptr,
    # [R]
    idx_mapping_ptr,
    # [max_num_reqs]
    temperature_ptr,
    seed_ptr,
    vocab_size,
    HAS_DRAFT_LOGITS: tl.constexpr,
    USE_BLOCK_VERIFICATION: tl.constexpr,
    USE_FP64: tl.constexpr,
    PLACEHOLDER_FIX: tl.constexpr,
    BLOCK_V: tl.constexpr,
    NAN_GUARD: tl.constexpr = True,
    FUSED_ARGMAX: tl.constexpr = False,
    LIBDEVICE_LOG1P: tl.constexpr = False,
):
    req = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    slot = tl.load(idx_mapping_ptr + req).to(tl.int64)
    start = tl.load(cu_num_logits_ptr + req).to(tl.int64)
    end = tl.load(cu_num_logits_ptr + req + 1).to(tl.int64)
    tau = tl.load(num_sampled_ptr + req).to(tl.int64)
    row = start + tau
    is_bonus = row == end - 1
    temperature = tl.load(temperature_ptr + slot)
    if (temperature == 0.0) & (is_bonus == 0):
        return  # greedy already stored the argmax at the rejected slot

    offs = block * BLOCK_V + tl.arange(0, BLOCK_V)
    mask = offs < vocab_size
    x = tl.load(target_logits_ptr + row * target_logits_stride + offs, mask=mask, other=float("-inf")).to(tl.float32)
    if NAN_GUARD:
        x = tl.where(x != x, float("-inf"), x)

    # ---- residual logits rho(x), in log space (additive constants do not matter)
    # The rejected draft d_{tau+1}; masked at the bonus row so it never reads the next request.
    rejected = tl.load(draft_sampled_ptr + row + 1, mask=row + 1 < end, other=0).to(tl.int64)
    use_target = is_bonus
    if PLACEHOLDER_FIX:
        use_target = use_target | (rejected < 0)  # a placeholder was never drawn: sample p
    if use_target:
        rho = x
    else:
        if HAS_DRAFT_LOGITS:
            # rho = log max(p_tau * p - q, 0) = a + log1p(-exp(g - a)) where g < a, else -inf
            a = x - tl.load(target_rejected_lse_ptr + req)
            if USE_BLOCK_VERIFICATION:
                if tau > 0:
                    a += tl.load(cumulative_log_p_ptr + row - 1)
            d_ptr = draft_logits_ptr + slot * draft_logits_stride_0 + tau * draft_logits_stride_1
            g = tl.load(d_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32) / temperature
            g = g - tl.load(draft_rejected_lse_ptr + req)
            ratio = tl.exp(g - a)
            rho = tl.where(ratio < 1.0, a + _log1m_of(ratio, LIBDEVICE_LOG1P), float("-inf"))
        else:
            # One-hot draft: remove the rejected token (p_tau cancels under block verification).
            # A raw -1 (replica only) matches no token, as upstream's unmasked load did.
            rho = tl.where(offs == rejected, float("-inf"), x)

    # ---- Gumbel-max; target logits already carry temperature, so noise is not re-tempered
    if USE_FP64:
        rho64 = rho.to(tl.float64)
        if temperature != 0.0:
            gseed = tl.randint(tl.load(seed_ptr + slot), tl.load(pos_ptr + row).to(tl.int32))
            w0, w1, _, _ = tl.randint4x(gseed, offs.to(tl.int32))
            bits = (w1.to(tl.uint64) << 32) | w0.to(tl.uint64)  # word 1 high (specsample.reference.philox.rand64)
            u = tl.maximum(bits.to(tl.float64) * 5.421010862427522e-20, 2.2250738585072014e-308)
            rho64 = rho64 - tl.log(-tl.log(u))
        rho64 = tl.where(mask, rho64, float("-inf"))
        best = tl.argmax(rho64, 0, tie_break_left=True)
        best_val = tl.max(rho64, 0)
    else:
        if temperature != 0.0:
            gseed = tl.randint(tl.load(seed_ptr + slot), tl.load(pos_ptr + row).to(tl.int32))
            u = tl.maximum(tl.rand(gseed, offs.to(tl.int32)), MIN_UNIFORM)
            # "flipped" Gumbel: -log(-log1p(-u)) keeps the winning tail at u -> 0, where fp32
            # has resolution.
            rho = rho - tl.log(-_log1m_of(u, LIBDEVICE_LOG1P))
        rho = tl.where(mask, rho, float("-inf"))
        if FUSED_ARGMAX:
            best_val, best = tl.max(rho, 0, return_indices=True, return_indices_tie_break_left=True)
        else:
            best = tl.argmax(rho, 0, tie_break_left=True)
            best_val = tl.max(rho, 0)
    out = req * resampled_stride + block
    tl.store(resampled_local_max_ptr + out, best_val)
    tl.store(resampled_local_argmax_ptr + out, block * BLOCK_V + best.to(tl.int64))


# ---------------------------------------------------------------------------------------------
# Kernel 6: insert resampled (spec 3.7)
# ---------------------------------------------------------------------------------------------


@triton.jit
def _insert_kernel(
    # [R, K + 1]
    sampled_ptr,
    sampled_stride,
    # [R] in: tau, out: tau + 1
    num_sampled_ptr,
    # [R, rb]
    resampled_local_argmax_ptr,
    resampled_local_max_ptr,
    resampled_stride,
    num_resample_blocks,
    # [R + 1]
    cu_num_logits_ptr,
    # [R]
    idx_mapping_ptr,
    # [max_num_reqs]
    temperature_ptr,
    NUM_RESAMPLE_BLOCKS_P2: tl.constexpr,
):
    req = tl.program_id(0).to(tl.int64)
    tau = tl.load(num_sampled_ptr + req)
    tl.store(num_sampled_ptr + req, tau + 1)
    start = tl.load(cu_num_logits_ptr + req).to(tl.int64)
    end = tl.load(cu_num_logits_ptr + req + 1).to(tl.int64)
    is_bonus = start + tau == end - 1
    slot = tl.load(idx_mapping_ptr + req).to(tl.int64)
    temperature = tl.load(temperature_ptr + slot)
    if (temperature == 0.0) & (is_bonus == 0):
        return
    token = _resampled_token(
        resampled_local_argmax_ptr,
        resampled_local_max_ptr,
        req * resampled_stride,
        num_resample_blocks,
        NUM_RESAMPLE_BLOCKS_P2,
        "",
    )
    tl.store(sampled_ptr + req * sampled_stride + tau, token)


# ---------------------------------------------------------------------------------------------
# Launcher
# ---------------------------------------------------------------------------------------------


class Pipeline(PipelineLaunch):
    """One ``rejection_sample`` call, split into its kernel launches.

    ``__init__`` allocates the outputs and scratch buffers; :meth:`stages` lists the launches
    in order as ``(name, zero-argument callable)`` so that each kernel can also be timed on its
    own (``specsample.timing``); :meth:`run` launches them all. Inputs must already have been
    checked by :mod:`specsample.validation`. ``placeholder_fix=False`` selects the pre-#50939
    replica (benchmarking only). ``vocab_block_size``/``block_warps`` (stats and residual mass,
    and so the [N, nb] partials' layout) and ``resample_block_size`` let a subclass tune them;
    the defaults are mrv2's.

    How close to vLLM's own kernels:
    ``fused_reduction`` takes a block's max and argmax in one reduction, as vLLM's kernels do;
    ``log1p="libdevice"`` evaluates log(1 - u) with libdevice's ``log1p`` (the series of
    :func:`_log1m` stands in under the interpreter); ``nan_guard=False`` drops the one deliberate
    difference, mapping NaN logits to -inf on load (specsample documents NaN as -inf; vLLM's
    kernels do not map them), and is the variant that matches vLLM's work exactly.
    """

    def __init__(
        self,
        target_logits: torch.Tensor,  # [N, V]
        draft_logits: torch.Tensor | None,  # [max_num_reqs, K, V_d]
        draft_sampled: torch.Tensor,  # [N]
        cu_num_logits: torch.Tensor,  # [R + 1]
        pos: torch.Tensor,  # [N]
        idx_mapping: torch.Tensor,  # [R]
        expanded_idx_mapping: torch.Tensor,  # [N]
        expanded_local_pos: torch.Tensor,  # [N]
        temperature: torch.Tensor,  # [max_num_reqs]
        seed: torch.Tensor,  # [max_num_reqs]
        num_speculative_steps: int,
        synthetic_conditional_rates: torch.Tensor | None = None,  # [K]
        use_fp64: bool = False,
        use_block_verification: bool = False,
        placeholder_fix: bool = True,
        *,
        vocab_block_size: int = VOCAB_BLOCK_SIZE,
        block_warps: int = 8,
        resample_block_size: int = RESAMPLE_BLOCK_SIZE,
        nan_guard: bool = True,
        fused_reduction: bool = True,
        log1p: str = "libdevice",
    ) -> None:
        self.target_logits, self.draft_logits, self.draft_sampled = target_logits, draft_logits, draft_sampled
        self.cu_num_logits, self.pos, self.idx_mapping = cu_num_logits, pos, idx_mapping
        self.expanded_idx_mapping, self.expanded_local_pos = expanded_idx_mapping, expanded_local_pos
        self.temperature, self.seed, self.k = temperature, seed, num_speculative_steps
        self.use_fp64, self.use_block_verification, self.placeholder_fix = (
            use_fp64,
            use_block_verification,
            placeholder_fix,
        )
        self.num_logits, vocab_size = target_logits.shape
        self.num_reqs = idx_mapping.shape[0]
        self.has_draft_logits = draft_logits is not None
        if self.has_draft_logits:
            vocab_size = min(vocab_size, draft_logits.shape[-1])
        self.vocab_size = vocab_size
        self.synthetic = synthetic_conditional_rates is not None
        device = target_logits.device

        self.vocab_block_size, self.block_warps = vocab_block_size, block_warps
        if log1p not in ("series", "libdevice"):
            raise ValueError(f"log1p: expected 'series' or 'libdevice', got {log1p!r}")
        self.nan_guard, self.fused_reduction = nan_guard, fused_reduction
        # libdevice cannot run under Triton's interpreter: the series stands in there
        self.libdevice_log1p = (
            log1p == "libdevice" and device.type == "cuda" and os.environ.get("TRITON_INTERPRET") != "1"
        )
        self.resample_block_size = resample_block_size
        self.num_blocks = triton.cdiv(vocab_size, vocab_block_size)
        self.num_blocks_p2 = triton.next_power_of_2(self.num_blocks)
        self.num_resample_blocks = triton.cdiv(vocab_size, resample_block_size)
        n, nb, r, rb = self.num_logits, self.num_blocks, self.num_reqs, self.num_resample_blocks

        # ---- scratch: [N, nb] partials, [N] prefix ratios, [R] rejected-row LSEs, [R, rb] maxima
        f32 = dict(dtype=torch.float32, device=device)
        self.target_local_argmax = torch.empty(n, nb, dtype=torch.int64, device=device)
        self.target_local_max = torch.empty(n, nb, **f32)
        self.target_local_sumexp = torch.empty(n, nb, **f32)
        if self.has_draft_logits:
            self.draft_local_max = torch.empty(n, nb, **f32)
            self.draft_local_sumexp = torch.empty(n, nb, **f32)
            self.draft_strides = (draft_logits.stride(0), draft_logits.stride(1))
            self.draft_arg = draft_logits
        else:
            # An absent tensor gets zero strides; HAS_DRAFT_LOGITS=False keeps it unread.
            self.draft_local_max = self.draft_local_sumexp = self.target_local_max
            self.draft_strides = (0, 0)
            self.draft_arg = target_logits
        self.cumulative_log_p = torch.empty(n if use_block_verification else 1, **f32)
        residual_needed = use_block_verification and self.has_draft_logits
        self.local_residual_mass = torch.empty(n, nb, **f32) if residual_needed else self.target_local_max
        self.rates = synthetic_conditional_rates if self.synthetic else temperature
        self.target_rejected_lse = torch.empty(r, **f32)
        self.draft_rejected_lse = torch.empty(r, **f32)
        resample_dtype = torch.float64 if use_fp64 else torch.float32
        self.resampled_local_max = torch.empty(r, rb, dtype=resample_dtype, device=device)
        self.resampled_local_argmax = torch.empty(r, rb, dtype=torch.int64, device=device)

        # ---- outputs
        self.sampled = torch.empty(r, self.k + 1, dtype=torch.int64, device=device)
        self.num_sampled = torch.empty(r, dtype=torch.int32, device=device)

    def stages(self) -> list[tuple[str, Callable[[], None]]]:
        """The kernel launches of one call, in order, named as in spec section 2."""
        if self.num_reqs == 0:
            return []
        stages = [("stats", self._stats)]
        if self.use_block_verification:
            stages.append(("cum_log_p", self._cumulative_log_p))
            if self.has_draft_logits:
                stages.append(("residual_mass", self._residual_mass))
        stages += [("rejection", self._rejection), ("resample", self._resample), ("insert", self._insert)]
        return stages

    # ---- 1. block stats of every non-bonus row
    def _stats(self) -> None:
        _local_stats_kernel[(self.num_logits, self.num_blocks)](
            **self._logits(),
            expanded_idx_mapping_ptr=self.expanded_idx_mapping,
            expanded_local_pos_ptr=self.expanded_local_pos,
            temperature_ptr=self.temperature,
            target_local_argmax_ptr=self.target_local_argmax,
            **self._partials(),
            vocab_size=self.vocab_size,
            num_speculative_steps=self.k,
            HAS_DRAFT_LOGITS=self.has_draft_logits,
            BLOCK_V=self.vocab_block_size,
            NAN_GUARD=self.nan_guard,
            FUSED_ARGMAX=self.fused_reduction,
            num_warps=self.block_warps,
        )

    # ---- 2. prefix joint ratios log p_i (block verification)
    def _cumulative_log_p(self) -> None:
        _cumulative_log_p_kernel[(self.num_reqs,)](
            **self._logits(),
            draft_sampled_ptr=self.draft_sampled,
            cu_num_logits_ptr=self.cu_num_logits,
            idx_mapping_ptr=self.idx_mapping,
            temperature_ptr=self.temperature,
            **self._partials(),
            num_blocks=self.num_blocks,
            cumulative_log_p_ptr=self.cumulative_log_p,
            HAS_DRAFT_LOGITS=self.has_draft_logits,
            PLACEHOLDER_FIX=self.placeholder_fix,
            NUM_BLOCKS_P2=self.num_blocks_p2,
            num_warps=1,
        )

    # ---- 3. residual mass per vocab block (block verification with draft logits)
    def _residual_mass(self) -> None:
        _residual_mass_kernel[(self.num_logits, self.num_blocks)](
            **self._logits(),
            draft_sampled_ptr=self.draft_sampled,
            expanded_idx_mapping_ptr=self.expanded_idx_mapping,
            expanded_local_pos_ptr=self.expanded_local_pos,
            temperature_ptr=self.temperature,
            **self._partials(),
            num_blocks=self.num_blocks,
            cumulative_log_p_ptr=self.cumulative_log_p,
            local_residual_mass_ptr=self.local_residual_mass,
            num_logits=self.num_logits,
            vocab_size=self.vocab_size,
            num_speculative_steps=self.k,
            PLACEHOLDER_FIX=self.placeholder_fix,
            BLOCK_V=self.vocab_block_size,
            NUM_BLOCKS_P2=self.num_blocks_p2,
            num_warps=self.block_warps,
        )

    # ---- 4. accept/reject: tau per request into num_sampled
    def _rejection(self) -> None:
        _rejection_kernel[(self.num_reqs,)](
            sampled_ptr=self.sampled,
            sampled_stride=self.sampled.stride(0),
            num_sampled_ptr=self.num_sampled,
            target_rejected_lse_ptr=self.target_rejected_lse,
            draft_rejected_lse_ptr=self.draft_rejected_lse,
            **self._logits(),
            draft_sampled_ptr=self.draft_sampled,
            pos_ptr=self.pos,
            cu_num_logits_ptr=self.cu_num_logits,
            idx_mapping_ptr=self.idx_mapping,
            temperature_ptr=self.temperature,
            seed_ptr=self.seed,
            target_local_argmax_ptr=self.target_local_argmax,
            target_local_max_ptr=self.target_local_max,
            target_local_sumexp_ptr=self.target_local_sumexp,
            draft_local_max_ptr=self.draft_local_max,
            draft_local_sumexp_ptr=self.draft_local_sumexp,
            local_residual_mass_ptr=self.local_residual_mass,
            local_stride=self.num_blocks,
            num_blocks=self.num_blocks,
            cumulative_log_p_ptr=self.cumulative_log_p,
            synthetic_conditional_rates_ptr=self.rates,
            HAS_DRAFT_LOGITS=self.has_draft_logits,
            SYNTHETIC_MODE=self.synthetic,
            USE_BLOCK_VERIFICATION=self.use_block_verification,
            PLACEHOLDER_FIX=self.placeholder_fix,
            NUM_BLOCKS_P2=self.num_blocks_p2,
            num_warps=1,
        )

    # ---- 5. resample row c_r + tau per 1024-wide block
    def _resample(self) -> None:
        _resample_kernel[(self.num_reqs, self.num_resample_blocks)](
            resampled_local_argmax_ptr=self.resampled_local_argmax,
            resampled_local_max_ptr=self.resampled_local_max,
            resampled_stride=self.num_resample_blocks,
            num_sampled_ptr=self.num_sampled,
            target_rejected_lse_ptr=self.target_rejected_lse,
            draft_rejected_lse_ptr=self.draft_rejected_lse,
            **self._logits(),
            draft_sampled_ptr=self.draft_sampled,
            pos_ptr=self.pos,
            cumulative_log_p_ptr=self.cumulative_log_p,
            cu_num_logits_ptr=self.cu_num_logits,
            idx_mapping_ptr=self.idx_mapping,
            temperature_ptr=self.temperature,
            seed_ptr=self.seed,
            vocab_size=self.vocab_size,
            HAS_DRAFT_LOGITS=self.has_draft_logits,
            USE_BLOCK_VERIFICATION=self.use_block_verification,
            USE_FP64=self.use_fp64,
            PLACEHOLDER_FIX=self.placeholder_fix,
            BLOCK_V=self.resample_block_size,
            NAN_GUARD=self.nan_guard,
            FUSED_ARGMAX=self.fused_reduction,
            LIBDEVICE_LOG1P=self.libdevice_log1p,
            num_warps=4,
        )

    # ---- 6. insert the winning block's token; num_sampled = tau + 1
    def _insert(self) -> None:
        _insert_kernel[(self.num_reqs,)](
            sampled_ptr=self.sampled,
            sampled_stride=self.sampled.stride(0),
            num_sampled_ptr=self.num_sampled,
            resampled_local_argmax_ptr=self.resampled_local_argmax,
            resampled_local_max_ptr=self.resampled_local_max,
            resampled_stride=self.num_resample_blocks,
            num_resample_blocks=self.num_resample_blocks,
            cu_num_logits_ptr=self.cu_num_logits,
            idx_mapping_ptr=self.idx_mapping,
            temperature_ptr=self.temperature,
            NUM_RESAMPLE_BLOCKS_P2=triton.next_power_of_2(self.num_resample_blocks),
            num_warps=1,
        )


def launch(*args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """Allocate and run one :class:`Pipeline` (same arguments)."""
    return Pipeline(*args, **kwargs).run()
