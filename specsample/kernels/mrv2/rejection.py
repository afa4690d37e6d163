"""mrv2's rejection step: kernel 4, serial over a request's drafts (spec 3.5, 5.1-5.3).

One program per request decides tau, the number of accepted drafts, from the stats partials:
greedy (target argmax), standard (Leviathan et al.), block verification (Sun et al.) or
synthetic rates; it stores the accepted drafts (a greedy request also its argmax at the
rejected slot) and the LSEs of the rejected row for the resample step.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..common import _global_argmax, _uniform
from .stats import _global_lse


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
