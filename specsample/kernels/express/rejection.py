"""Verification in ``express``: cumulative log p, residual masses, the rejection kernel and its plans.

The rejection kernel writes tau and, per request, the plan for the token of row c_r + tau
(``PLAN_*``): which distribution is sampled there and whether level 1 is already drawn.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..common import _global_argmax, _launch_dependents, _request_rows, _uniform, _wait_for_prior
from .streams import _pick, _row_uniform
from .stats import _chunked_sum, _finite_or_neg_inf, _inverse, _pick_row, _residual, _row_lses

# Plans for the token of row c_r + tau (per request, written by the rejection kernel)
PLAN_DONE = tl.constexpr(0)  # greedy rejection: the argmax is written
PLAN_ARGMAX = tl.constexpr(1)  # greedy bonus row: first argmax of the target row
PLAN_TARGET = tl.constexpr(2)  # softmax(target row): the bonus row, or the row of a placeholder (never drawn)
PLAN_RESIDUAL = tl.constexpr(3)  # max(p - q, 0), draft logits, masses from the resample pass (standard; block tau = 0)
PLAN_ONE_HOT = tl.constexpr(4)  # p without the rejected draft: level 1 from the stats partials
PLAN_BLOCK_RESIDUAL = tl.constexpr(5)  # max(p_tau p - q, 0), block + draft logits, tau >= 1: level 1 from residual mass
# softmax(target row 0), d_1 a placeholder or no draft: level 1 from the stats partials
PLAN_TARGET_DRAWN = tl.constexpr(6)


@triton.jit
def _needs_row_pass(plan):
    # The plans whose row the resample pass reads (their block masses are not known before it).
    return (plan == PLAN_TARGET) | (plan == PLAN_RESIDUAL) | (plan == PLAN_ARGMAX)


@triton.jit
def _cumulative_log_p_request(
    logits,
    requests,
    partials,
    local_stride,
    num_blocks,
    cumulative_log_p_ptr,  # [N] fp64
    row_lse_ptr,  # [N, 2] fp64
    HAS_DRAFT_LOGITS: tl.constexpr,
    K_P2: tl.constexpr,
    NB_P2: tl.constexpr,
    req,
    PDL: tl.constexpr,
):
    # The cum_log_p kernel's program for request req.
    target_logits_ptr, target_logits_stride, draft_logits_ptr, draft_logits_stride_0, draft_logits_stride_1 = logits
    draft_sampled_ptr, cu_num_logits_ptr, idx_mapping_ptr, temperature_ptr = requests
    target_local_max_ptr, target_local_sumexp_ptr, draft_local_max_ptr, draft_local_sumexp_ptr = partials
    slot = tl.load(idx_mapping_ptr + req).to(tl.int64)
    start = tl.load(cu_num_logits_ptr + req).to(tl.int64)
    num_drafts = tl.load(cu_num_logits_ptr + req + 1).to(tl.int64) - start - 1
    temperature = tl.load(temperature_ptr + slot)
    # A greedy request writes nothing: its stores are masked off rather than the program returning
    # early, which would put every load behind the temperature's (one round more; its loads stay
    # inside the request's rows, their values unused).
    k = tl.arange(0, K_P2)
    in_req = k < num_drafts
    # (the temperature broadcast first: Triton's interpreter cannot `&` a vector with a scalar test)
    sampled_rows = in_req & (tl.zeros((K_P2,), dtype=tl.float32) + temperature != 0.0)
    rows = start + k
    nb = tl.arange(0, NB_P2)
    tile = rows[:, None] * local_stride + nb[None, :]
    tile_mask = in_req[:, None] & (nb < num_blocks)[None, :]
    raw = tl.load(draft_sampled_ptr + rows + 1, mask=in_req, other=-1).to(tl.int64)
    first_draft = tl.load(draft_sampled_ptr + start + 1, mask=num_drafts > 0, other=-1)  # d_1, same round
    token = tl.maximum(raw, 0)  # clamp: never form a pointer from -1
    x = tl.load(target_logits_ptr + rows * target_logits_stride + token, mask=in_req, other=float("-inf"))
    if HAS_DRAFT_LOGITS:
        d_ptr = draft_logits_ptr + slot * draft_logits_stride_0 + k.to(tl.int64) * draft_logits_stride_1
        y_raw = tl.load(d_ptr + token, mask=in_req, other=float("-inf"))
    _wait_for_prior(PDL)
    m_t = tl.load(target_local_max_ptr + tile, mask=tile_mask, other=float("-inf"))
    s_t = tl.load(target_local_sumexp_ptr + tile, mask=tile_mask, other=0.0)
    if HAS_DRAFT_LOGITS:
        m_d = tl.load(draft_local_max_ptr + tile, mask=tile_mask, other=float("-inf"))
        s_d = tl.load(draft_local_sumexp_ptr + tile, mask=tile_mask, other=0.0)
    if first_draft < 0:
        # first == 0: no real row, log p stays 0 on every row (what the chain below gives), no
        # LSEs kept; the partials are never waited on, no LSE tiles.
        tl.store(cumulative_log_p_ptr + rows, tl.zeros((K_P2,), dtype=tl.float64), mask=sampled_rows)
    else:
        first = tl.min(tl.where(raw >= 0, K_P2, k), 0)  # rows before the first -1 are real
        real = (k < first) & sampled_rows
        lse = _row_lses(m_t, s_t)
        lp = _finite_or_neg_inf(x.to(tl.float32)).to(tl.float64) - lse
        lq = tl.zeros((K_P2,), dtype=tl.float64)
        if HAS_DRAFT_LOGITS:
            d_lse = _row_lses(m_d, s_d)
            lq = _finite_or_neg_inf(y_raw.to(tl.float32) * _inverse(temperature)).to(tl.float64) - d_lse
            tl.store(row_lse_ptr + 2 * rows, lse, mask=real)
            tl.store(row_lse_ptr + 2 * rows + 1, d_lse, mask=real)
        log_p = tl.zeros((), dtype=tl.float64)
        out = tl.zeros((K_P2,), dtype=tl.float64)
        for i in tl.static_range(K_P2):
            log_p = tl.where(i < first, tl.minimum(log_p + _pick_row(lp, k, i) - _pick_row(lq, k, i), 0.0), log_p)
            out = tl.where(k == i, log_p, out)
        tl.store(cumulative_log_p_ptr + rows, out, mask=sampled_rows)


@triton.jit
def _cumulative_log_p_kernel(
    target_logits_ptr,  # [N, V]
    target_logits_stride,
    draft_logits_ptr,  # [max_num_reqs, K, V_d]
    draft_logits_stride_0,
    draft_logits_stride_1,
    draft_sampled_ptr,  # [N]
    cu_num_logits_ptr,  # [R + 1]
    idx_mapping_ptr,  # [R]
    temperature_ptr,  # [max_num_reqs]
    target_local_max_ptr,  # [N, nb]
    target_local_sumexp_ptr,  # [N, nb] fp64
    draft_local_max_ptr,  # [N, nb]
    draft_local_sumexp_ptr,  # [N, nb] fp64
    local_stride,
    num_blocks,
    cumulative_log_p_ptr,  # [N] fp64
    row_lse_ptr,  # [N, 2] fp64
    HAS_DRAFT_LOGITS: tl.constexpr,
    K_P2: tl.constexpr,
    NB_P2: tl.constexpr,
    PDL: tl.constexpr,
):
    # log p_i = min(log p_{i-1} + log M_b(X_i) - log M_s(X_i), 0), fp64, up to the first -1 (the
    # value is carried, unchanged, through it and every later row: none of them is read). With
    # draft logits each real row's two LSEs are kept for the residual-mass pass ([N, 2] fp64).
    # As in the rejection kernel, the K rows are [K_P2] vectors: every load issued before the
    # arithmetic (tokens, then the gathered logits, then -- after the wait for stats, with a
    # dependent launch -- the partials), the LSEs one [K_P2, nb] reduction; only the prefix itself
    # is a K-step chain, in the reference's order.
    logits = (target_logits_ptr, target_logits_stride, draft_logits_ptr, draft_logits_stride_0, draft_logits_stride_1)
    requests = (draft_sampled_ptr, cu_num_logits_ptr, idx_mapping_ptr, temperature_ptr)
    partials = (target_local_max_ptr, target_local_sumexp_ptr, draft_local_max_ptr, draft_local_sumexp_ptr)
    _launch_dependents(PDL)
    _cumulative_log_p_request(
        logits,
        requests,
        partials,
        local_stride,
        num_blocks,
        cumulative_log_p_ptr,
        row_lse_ptr,
        HAS_DRAFT_LOGITS,
        K_P2,
        NB_P2,
        tl.program_id(0),
        PDL,
    )


@triton.jit
def _residual_mass_kernel(
    target_logits_ptr,  # [N, V]
    target_logits_stride,
    draft_logits_ptr,  # [max_num_reqs, K, V_d]
    draft_logits_stride_0,
    draft_logits_stride_1,
    draft_sampled_ptr,  # [N]
    cumulative_log_p_ptr,  # [N] fp64
    row_lse_ptr,  # [N, 2] fp64
    cu_num_logits_ptr,  # [R + 1]
    idx_mapping_ptr,  # [R]
    temperature_ptr,  # [max_num_reqs]
    local_residual_mass_ptr,  # [N, nb] fp64
    local_stride,
    num_blocks,
    vocab_size,
    target_local_max_ptr,  # [N, nb] the stats partials' block maxima (read with SKIP_MASKED)
    SKIP_MASKED: tl.constexpr,
    K_P2: tl.constexpr,
    GROUPS: tl.constexpr,
    SUB: tl.constexpr,
    BLOCK: tl.constexpr,
    PDL: tl.constexpr,
):
    # Program (req * (K-1) + j - 1, g): row j >= 1 of request req, read when d_1..d_{j+1} are real
    # (the rejection kernel reads Z_{j+1} = sum_b mass[t, b] then, and level 1 picks from these
    # masses if tau lands on row j); sampling blocks g*SUB .. g*SUB + SUB-1 as one tile.
    # Launched dependently: the row's logits load before the wait for cum_log_p, its p_j and
    # LSEs after. With SKIP_MASKED the stats kernel's block maxima of the row (a tested row)
    # say which blocks are masked -- residual 0 there, since p = 0 -- so those blocks' logits
    # are never read; the maxima are complete only once cum_log_p is (it waited for stats), so
    # the tile loads then come after the wait.
    req = (tl.program_id(0) // GROUPS).to(tl.int64)
    j = 1 + tl.program_id(0) % GROUPS
    start, num_drafts, first = _request_rows(cu_num_logits_ptr, draft_sampled_ptr, req, K_P2)
    if j >= first:
        _wait_for_prior(PDL)
        return
    slot = tl.load(idx_mapping_ptr + req).to(tl.int64)
    temperature = tl.load(temperature_ptr + slot)
    if temperature == 0.0:
        _wait_for_prior(PDL)
        return
    _launch_dependents(PDL)
    row = start + j
    blocks = tl.program_id(1) * SUB + tl.arange(0, SUB)
    offs = blocks[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
    mask = offs < vocab_size
    read = mask
    if SKIP_MASKED:
        _wait_for_prior(PDL)
        live = _live_blocks(target_local_max_ptr, row * local_stride, blocks, num_blocks)
        read = mask & live[:, None]
    x = tl.load(target_logits_ptr + row * target_logits_stride + offs, mask=read, other=float("-inf"))
    d_ptr = draft_logits_ptr + slot * draft_logits_stride_0 + j.to(tl.int64) * draft_logits_stride_1
    y = tl.load(d_ptr + offs, mask=read, other=float("-inf"))
    if not SKIP_MASKED:
        _wait_for_prior(PDL)
    if SKIP_MASKED and tl.max(live.to(tl.int32), 0) == 0:
        zero = tl.zeros((SUB,), dtype=tl.float64)
        tl.store(local_residual_mass_ptr + row * local_stride + blocks, zero, mask=blocks < num_blocks)
    else:
        # (new names: a tile redefined in one arm of an `if` with another dtype does not compile)
        scale = tl.exp(tl.load(cumulative_log_p_ptr + row - 1)).to(tl.float32)  # p_j
        xf = _finite_or_neg_inf(x.to(tl.float32))
        yf = _finite_or_neg_inf(y.to(tl.float32) * _inverse(temperature))
        r = _residual(xf, yf, tl.load(row_lse_ptr + 2 * row), tl.load(row_lse_ptr + 2 * row + 1), scale)
        mass = _chunked_sum(tl.where(mask, r, 0.0), SUB, BLOCK)
        tl.store(local_residual_mass_ptr + row * local_stride + blocks, mass, mask=blocks < num_blocks)


@triton.jit
def _live_blocks(target_local_max_ptr, base, blocks, num_blocks):
    # Per sampling block of a row the stats kernel read: whether it holds a logit above -inf
    # (its max, NaN read as -inf, is finite or +inf); False past the row's blocks.
    block_max = tl.load(target_local_max_ptr + base + blocks, mask=blocks < num_blocks, other=float("-inf"))
    return block_max != float("-inf")


@triton.jit
def _reject_request(
    outputs,
    plans,
    logits,
    requests,
    pos_ptr,  # [N]
    seed_ptr,  # [max_num_reqs]
    target_local_argmax_ptr,  # [N, nb]
    partials,
    local_residual_mass_ptr,  # [N, nb] fp64
    local_stride,
    num_blocks,
    cumulative_log_p_ptr,  # [N] fp64
    row_lse_ptr,  # [N, 2] fp64
    synthetic_conditional_rates_ptr,  # [K]
    HAS_DRAFT_LOGITS: tl.constexpr,
    SYNTHETIC_MODE: tl.constexpr,
    USE_BLOCK_VERIFICATION: tl.constexpr,
    K_P2: tl.constexpr,
    NB_P2: tl.constexpr,
    BLOCK: tl.constexpr,
    req,
    PDL: tl.constexpr,
):
    # The rejection kernel's program for request req.
    sampled_ptr, sampled_stride, num_sampled_ptr = outputs
    plan_ptr, plan_block_ptr, plan_lse_ptr, plan_scale_ptr = plans
    target_logits_ptr, target_logits_stride, draft_logits_ptr, draft_logits_stride_0, draft_logits_stride_1 = logits
    draft_sampled_ptr, cu_num_logits_ptr, idx_mapping_ptr, temperature_ptr = requests
    target_local_max_ptr, target_local_sumexp_ptr, draft_local_max_ptr, draft_local_sumexp_ptr = partials
    slot = tl.load(idx_mapping_ptr + req).to(tl.int64)
    start = tl.load(cu_num_logits_ptr + req).to(tl.int64)
    num_drafts = tl.load(cu_num_logits_ptr + req + 1).to(tl.int64) - start - 1
    temperature = tl.load(temperature_ptr + slot)
    seed = tl.load(seed_ptr + slot)
    is_greedy = temperature == 0.0
    out = sampled_ptr + req * sampled_stride
    nb = tl.arange(0, NB_P2)
    nb_mask = nb < num_blocks

    # ---- round 2: tokens and positions (each needs only the request's rows), issued with the
    # temperature's load, before the greedy branch (a greedy request's are unused)
    k = tl.arange(0, K_P2)
    in_req = k < num_drafts
    rows = start + k
    raw = tl.load(draft_sampled_ptr + rows + 1, mask=in_req, other=-1).to(tl.int64)
    # d_1 as a scalar too (same round): first == 0 (tau = 0, the plain target row) is then a
    # scalar test, taken before anything waits on the partials -- no reduction over raw needed
    first_draft = tl.load(draft_sampled_ptr + start + 1, mask=num_drafts > 0, other=-1)
    positions = tl.load(pos_ptr + rows, mask=in_req, other=0)
    if USE_BLOCK_VERIFICATION:
        has_next = k < num_drafts - 1
        nxt = tl.load(draft_sampled_ptr + rows + 2, mask=has_next, other=-1).to(tl.int64)  # d_{k+2}
    if SYNTHETIC_MODE:
        rates = tl.load(synthetic_conditional_rates_ptr + k, mask=in_req, other=0.0)
    # ---- round 3: the drafts' logits (clamped: never a pointer from -1)
    token = tl.maximum(raw, 0)
    if (not USE_BLOCK_VERIFICATION) or (not HAS_DRAFT_LOGITS):
        x_raw = tl.load(target_logits_ptr + rows * target_logits_stride + token, mask=in_req, other=float("-inf"))
    if USE_BLOCK_VERIFICATION:
        if not HAS_DRAFT_LOGITS:
            # d_{k+2}'s target logit on row k + 1 (one-hot: Z_{k+1} = p_k (1 - M_b(d)))
            x_next_raw = tl.load(
                target_logits_ptr + (rows + 1) * target_logits_stride + tl.maximum(nxt, 0),
                mask=has_next,
                other=float("-inf"),
            )
    elif HAS_DRAFT_LOGITS:
        d_ptr = draft_logits_ptr + slot * draft_logits_stride_0 + k.to(tl.int64) * draft_logits_stride_1
        y_raw = tl.load(d_ptr + token, mask=in_req, other=float("-inf"))

    # ---- round 4, once the kernel before has finished: what the earlier kernels wrote
    _wait_for_prior(PDL)
    tile = rows[:, None] * local_stride + nb[None, :]
    tile_mask = in_req[:, None] & nb_mask[None, :]
    if USE_BLOCK_VERIFICATION:
        log_p = tl.load(cumulative_log_p_ptr + rows, mask=in_req, other=0.0)
        if HAS_DRAFT_LOGITS:
            # Z_{k+1} = sum_b residual mass of row k + 1, and the [N, 2] LSEs cum_log_p kept
            next_mass = tl.load(
                local_residual_mass_ptr + tile + local_stride,
                mask=has_next[:, None] & nb_mask[None, :],
                other=0.0,
            )
            row_lse_t = tl.load(row_lse_ptr + 2 * rows, mask=in_req, other=0.0)
            row_lse_d = tl.load(row_lse_ptr + 2 * rows + 1, mask=in_req, other=0.0)
        else:
            m_t = tl.load(target_local_max_ptr + tile, mask=tile_mask, other=float("-inf"))
            s_t = tl.load(target_local_sumexp_ptr + tile, mask=tile_mask, other=0.0)
    else:
        m_t = tl.load(target_local_max_ptr + tile, mask=tile_mask, other=float("-inf"))
        s_t = tl.load(target_local_sumexp_ptr + tile, mask=tile_mask, other=0.0)
        if HAS_DRAFT_LOGITS:
            m_d = tl.load(draft_local_max_ptr + tile, mask=tile_mask, other=float("-inf"))
            s_d = tl.load(draft_local_sumexp_ptr + tile, mask=tile_mask, other=0.0)
    if is_greedy:
        tau = tl.zeros((), dtype=tl.int64)
        verifying = tl.full((), 1, dtype=tl.int1)
        for step in range(0, num_drafts):
            row = start + step
            draft = tl.load(draft_sampled_ptr + row + 1).to(tl.int64)
            draft_token = tl.maximum(draft, 0)  # clamp: never form a pointer from -1
            # mrv2's greedy path: not short-circuited at a -1, where it stores the argmax.
            if verifying:
                best = _global_argmax(
                    target_local_argmax_ptr, target_local_max_ptr, row, local_stride, num_blocks, NB_P2
                )
                if SYNTHETIC_MODE:
                    accepted = _uniform(seed, tl.load(pos_ptr + row)) < tl.load(synthetic_conditional_rates_ptr + step)
                else:
                    accepted = best == draft_token
                accepted = accepted & (draft >= 0)
                tl.store(out + step, tl.where(accepted, draft_token, best))
                tau += accepted.to(tl.int64)
                verifying = accepted
        tl.store(num_sampled_ptr + req, tau.to(tl.int32))
        tl.store(plan_ptr + req, tl.where(tau == num_drafts, PLAN_ARGMAX, PLAN_DONE).to(tl.int32))
    elif first_draft < 0:
        # d_1 is a placeholder (or there is no draft): tau = 0, nothing accepted, and row c_r's
        # token is drawn from the plain target. The stats kernel read that row (_stats_rows), so
        # level 1 is here, over the log-masses m_b + log s_b of its partials (what the resample
        # pass would store for the row); no LSE tiles. The partials and gathered logits loaded
        # above (rows of drafts, none tested) are unused.
        row_0 = start * local_stride + nb
        m_0 = tl.load(target_local_max_ptr + row_0, mask=nb_mask, other=float("-inf"))
        s_0 = tl.load(target_local_sumexp_ptr + row_0, mask=nb_mask, other=0.0)
        log_mass = m_0.to(tl.float64) + tl.log(s_0)
        big = tl.max(log_mass, 0)
        w = tl.where(log_mass == float("-inf"), 0.0, tl.exp(log_mass - big))
        b, _ = _pick(w, _row_uniform(seed, tl.load(pos_ptr + start)), NB_P2)
        tl.store(plan_block_ptr + req, b.to(tl.int32))
        tl.store(num_sampled_ptr + req, 0)
        tl.store(plan_ptr + req, PLAN_TARGET_DRAWN)
    else:
        if (not USE_BLOCK_VERIFICATION) or (not HAS_DRAFT_LOGITS):
            x = _finite_or_neg_inf(x_raw.to(tl.float32))
        if USE_BLOCK_VERIFICATION:
            if not HAS_DRAFT_LOGITS:
                x_next = _finite_or_neg_inf(x_next_raw.to(tl.float32))

        # ---- arithmetic: every step at once
        u32 = _uniform(seed, positions)
        valid = raw >= 0  # false past the request's drafts too (other=-1)
        first = tl.min(tl.where(valid, K_P2, k), 0)  # the first -1 (or past the drafts): the test stops there
        if USE_BLOCK_VERIFICATION:
            # Sun et al.: tau = max{i+1 : u_i <= h_i} over the steps before the first -1, in fp64
            pi = tl.exp(log_p)
            if HAS_DRAFT_LOGITS:
                z = tl.sum(next_mass, 1)
            else:
                lse = _row_lses(m_t, s_t)
                # L_{k+1}: the next row's LSE, a [K_P2] shift (a select, not a reload)
                lse_next = tl.sum(tl.where(k[None, :] == k[:, None] + 1, lse[None, :], 0.0), 1)
                z = pi * (1.0 - tl.exp(x_next.to(tl.float64) - lse_next))
            denom = z + 1.0 - pi
            h = tl.where(nxt >= 0, tl.where(denom > 0.0, z / denom, 1.0), pi)  # else the block's end: h = p_gamma
            hit = (k < first) & (u32.to(tl.float64) <= h)
            tau = tl.max(tl.where(hit, k + 1, 0), 0).to(tl.int64)
            tl.store(out + k, token, mask=k < first)
        else:
            # Leviathan et al.: accept iff log p(d) > log u + log q(d) (strict), in fp64
            lse = _row_lses(m_t, s_t)
            lp = x.to(tl.float64) - lse
            lq = tl.zeros((K_P2,), dtype=tl.float64)
            if HAS_DRAFT_LOGITS:
                d_lse = _row_lses(m_d, s_d)
                y = _finite_or_neg_inf(y_raw.to(tl.float32) * _inverse(temperature))
                lq = y.to(tl.float64) - d_lse
            if SYNTHETIC_MODE:
                accepted = u32 < rates
            else:
                accepted = lp > tl.log(u32.to(tl.float64)) + lq
            accepted = accepted & valid
            tau = tl.min(tl.where(accepted, K_P2, k), 0).to(tl.int64)  # the first rejection, or the first -1
            tl.store(out + k, token, mask=(k <= tau) & valid)  # the rejected draft too (the insert overwrites it)
        tl.store(num_sampled_ptr + req, tau.to(tl.int32))

        # ---- the plan for row c_r + tau, from the vectors above
        rejected = tl.max(tl.where(k == tau, raw, -1), 0)  # -1: a placeholder, or the bonus row (tau = n)
        plan = tl.full((), PLAN_TARGET, tl.int32)  # bonus row, or a placeholder: the plain target
        if rejected >= 0:
            u_row = _row_uniform(seed, _pick_row(positions, k, tau))
            if HAS_DRAFT_LOGITS:
                # max(p_tau p - q, 0) at row tau (p_tau = 1 outside block verification and at tau = 0)
                plan = tl.full((), PLAN_RESIDUAL, tl.int32)
                scale = tl.full((), 1.0, tl.float32)
                if USE_BLOCK_VERIFICATION:
                    if tau > 0:
                        # the residual-mass pass has this row's block masses: level 1 here
                        plan = tl.full((), PLAN_BLOCK_RESIDUAL, tl.int32)
                        scale = _pick_row(pi, k, tau - 1).to(tl.float32)
                        w = tl.sum(tl.where(k[:, None] == tau - 1, next_mass, 0.0), 0)
                        b, _ = _pick(w, u_row, NB_P2)
                        tl.store(plan_block_ptr + req, b.to(tl.int32))
                    tau_lse = _pick_row(row_lse_t, k, tau)
                    tau_d_lse = _pick_row(row_lse_d, k, tau)
                else:
                    tau_lse = _pick_row(lse, k, tau)
                    tau_d_lse = _pick_row(d_lse, k, tau)
                tl.store(plan_scale_ptr + req, scale)
                tl.store(plan_lse_ptr + 2 * req, tau_lse)
                tl.store(plan_lse_ptr + 2 * req + 1, tau_d_lse)
            else:
                # One-hot residual p(x) [x != d] (p_tau cancels under block verification): block
                # masses are the stats partials of row tau (in the tile), less d's own term in
                # d's block; level 1 here.
                plan = tl.full((), PLAN_ONE_HOT, tl.int32)
                at_tau = k[:, None] == tau
                m32 = tl.max(tl.where(at_tau, m_t, float("-inf")), 0)
                s = tl.sum(tl.where(at_tau, s_t, 0.0), 0)
                d_block = rejected // BLOCK
                x_d = _pick_row(x, k, tau)
                d_max = tl.max(tl.where(nb == d_block, m32, float("-inf")), 0)
                e_d = tl.where(x_d == float("-inf"), 0.0, tl.exp(x_d - d_max)).to(tl.float64)
                s = tl.where(nb == d_block, tl.maximum(s - e_d, 0.0), s)
                m = m32.to(tl.float64)
                big = tl.max(m, 0)
                w = tl.where(m == float("-inf"), 0.0, s * tl.exp(m - big))
                b, _ = _pick(w, u_row, NB_P2)
                tl.store(plan_block_ptr + req, b.to(tl.int32))
        tl.store(plan_ptr + req, plan)


@triton.jit
def _rejection_kernel(
    sampled_ptr,  # [R, K + 1]
    sampled_stride,
    num_sampled_ptr,  # [R]
    plan_ptr,  # [R]
    plan_block_ptr,  # [R]
    plan_lse_ptr,  # [R, 2] fp64
    plan_scale_ptr,  # [R]
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
    target_local_argmax_ptr,  # [N, nb]
    target_local_max_ptr,  # [N, nb]
    target_local_sumexp_ptr,  # [N, nb] fp64
    draft_local_max_ptr,  # [N, nb]
    draft_local_sumexp_ptr,  # [N, nb] fp64
    local_residual_mass_ptr,  # [N, nb] fp64
    local_stride,
    num_blocks,
    cumulative_log_p_ptr,  # [N] fp64
    row_lse_ptr,  # [N, 2] fp64
    synthetic_conditional_rates_ptr,  # [K]
    HAS_DRAFT_LOGITS: tl.constexpr,
    SYNTHETIC_MODE: tl.constexpr,
    USE_BLOCK_VERIFICATION: tl.constexpr,
    K_P2: tl.constexpr,
    NB_P2: tl.constexpr,
    BLOCK: tl.constexpr,
    PDL: tl.constexpr,
):
    # One program per request. A sampled request tests its K drafts as [K_P2] vectors, not step
    # by step: every load the test needs is issued before any arithmetic (ptxas does not hoist a
    # load above the branches of libdevice's fp64 exp / log or of a warp shuffle, so a load after
    # a reduction costs a dependent memory round of its own), four rounds in all -- the request's
    # rows; the tokens and positions; the gathered logits; after the wait for the kernel before
    # (dependent launch), its [K_P2, nb] partials -- and the fp64 LSEs of all K rows are one
    # [K_P2, nb] reduction over the program's warps. The first three rounds read the call's
    # inputs only, so with a dependent launch they overlap the kernel before. The plan reuses
    # the rejected row's LSEs, partials and logits (selected from the vectors, no reload). Steps
    # past a rejection are computed and thrown away: no load past the request's rows, and only
    # the acceptance test's arithmetic, which is what a [K_P2] vector costs anyway.
    outputs = (sampled_ptr, sampled_stride, num_sampled_ptr)
    plans = (plan_ptr, plan_block_ptr, plan_lse_ptr, plan_scale_ptr)
    logits = (target_logits_ptr, target_logits_stride, draft_logits_ptr, draft_logits_stride_0, draft_logits_stride_1)
    requests = (draft_sampled_ptr, cu_num_logits_ptr, idx_mapping_ptr, temperature_ptr)
    partials = (target_local_max_ptr, target_local_sumexp_ptr, draft_local_max_ptr, draft_local_sumexp_ptr)
    _launch_dependents(PDL)
    _reject_request(
        outputs,
        plans,
        logits,
        requests,
        pos_ptr,
        seed_ptr,
        target_local_argmax_ptr,
        partials,
        local_residual_mass_ptr,
        local_stride,
        num_blocks,
        cumulative_log_p_ptr,
        row_lse_ptr,
        synthetic_conditional_rates_ptr,
        HAS_DRAFT_LOGITS,
        SYNTHETIC_MODE,
        USE_BLOCK_VERIFICATION,
        K_P2,
        NB_P2,
        BLOCK,
        tl.program_id(0).to(tl.int64),
        PDL,
    )
