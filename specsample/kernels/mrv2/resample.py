"""mrv2's resample and insert steps: kernels 5 and 6 (spec 3.6-3.8).

``_resample_kernel`` builds the residual logits of each request's row ``c_r + tau`` (the plain
target at the bonus row or a placeholder) and takes a Gumbel-max per 1024-wide vocab block into
[R, rb] partials; ``_insert_kernel`` takes the argmax over those partials, stores the token at
slot tau and turns num_sampled from tau into tau + 1.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..common import _log1m_of, _log_exponential, _resampled_token


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
    # common._load_logits inline: through the call, ptxas schedules the replica's one-hot kernel
    # differently (same instructions, other registers and order)
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
            # flipped Gumbel noise -log E (spec 3.8)
            rho = rho - _log_exponential(gseed, offs.to(tl.int32), False, LIBDEVICE_LOG1P)
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
