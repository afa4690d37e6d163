"""The resample pass of ``express``: block masses of the rows whose masses are not known yet.

As a (R, tiles) grid, or with one-hot drafts as a fixed set of programs that loop over the
tiles of the requests whose plan needs a row pass. With ``Config.fused_insert`` the request's
last grid program does the insert.
"""

from __future__ import annotations

import triton
import triton.language as tl

from ..common import _launch_dependents, _wait_for_prior
from .stats import _chunked_sum, _finite_or_neg_inf, _first_index_of, _inverse, _residual
from .rejection import _live_blocks, _needs_row_pass, PLAN_ARGMAX, PLAN_DONE, PLAN_RESIDUAL
from .insert import _insert_request


@triton.jit
def _resample_kernel(
    sampled_ptr,  # [R, K + 1]
    sampled_stride,
    resampled_mass_ptr,  # [R, nb] fp64
    resampled_argmax_ptr,  # [R, nb]
    resampled_stride,
    num_blocks,
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
    vocab_size,
    target_local_max_ptr,  # [N, nb] the stats partials' block maxima (read with SKIP_MASKED)
    HAS_DRAFT_LOGITS: tl.constexpr,
    SKIP_MASKED: tl.constexpr,
    FUSED_INSERT: tl.constexpr,
    NUM_PROGRAMS: tl.constexpr,
    SUB: tl.constexpr,
    NB_P2: tl.constexpr,
    BLOCK: tl.constexpr,
    PDL: tl.constexpr,
):
    # Program (r, g): sampling blocks g*SUB .. g*SUB + SUB-1 of request r's row c_r + tau, for the
    # plans whose block masses are not known yet: log-masses of softmax(target) (bonus /
    # placeholder row) or of max(p - q, 0) (draft residual), or the block argmaxes of a greedy
    # bonus row, into [R, nb]. With FUSED_INSERT the request's last program to finish then does
    # the insert kernel's work: each program counts itself done in num_sampled's high 16 bits
    # (tau stays in the low 16), as fast does. Launched dependently: the request's slot and first
    # row (call inputs) load before the wait for the rejection kernel's plan.
    resampled = (resampled_mass_ptr, resampled_argmax_ptr)
    logits = (target_logits_ptr, target_logits_stride, draft_logits_ptr, draft_logits_stride_0, draft_logits_stride_1)
    outputs = (sampled_ptr, sampled_stride, num_sampled_ptr)
    plans = (plan_ptr, plan_block_ptr, plan_lse_ptr, plan_scale_ptr)
    requests = (draft_sampled_ptr, cu_num_logits_ptr, idx_mapping_ptr, temperature_ptr)
    req = tl.program_id(0).to(tl.int64)
    slot = tl.load(idx_mapping_ptr + req).to(tl.int64)
    start = tl.load(cu_num_logits_ptr + req).to(tl.int64)
    _wait_for_prior(PDL)
    plan = tl.load(plan_ptr + req)
    tau = tl.load(num_sampled_ptr + req)
    if FUSED_INSERT:
        tau = tau & 0xFFFF
    tau = tau.to(tl.int64)
    if _needs_row_pass(plan):
        _launch_dependents(PDL)
        _block_masses(
            resampled,
            req * resampled_stride,
            num_blocks,
            plan_lse_ptr,
            logits,
            temperature_ptr,
            vocab_size,
            req,
            slot,
            start + tau,
            plan,
            tau,
            tl.program_id(1),
            target_local_max_ptr,
            HAS_DRAFT_LOGITS,
            SKIP_MASKED,
            SUB,
            BLOCK,
        )
    if FUSED_INSERT:
        # The barrier puts every thread's stores before the (release) count; the program that
        # sees NUM_PROGRAMS - 1 done before it (acquire) reads their partials past L1 (.cg).
        tl.debug_barrier()
        done_before = tl.atomic_add(num_sampled_ptr + req, 1 << 16, sem="acq_rel") >> 16
        tl.debug_barrier()
        if done_before == NUM_PROGRAMS - 1:
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
                plan,
                tau,
                HAS_DRAFT_LOGITS,
                NB_P2,
                BLOCK,
                ".cg",
            )


@triton.jit
def _resample_persistent_kernel(
    resampled_mass_ptr,  # [R, nb] fp64
    resampled_argmax_ptr,  # [R, nb]
    resampled_stride,
    num_blocks,
    num_sampled_ptr,  # [R]
    plan_ptr,  # [R]
    plan_lse_ptr,  # [R, 2] fp64
    target_logits_ptr,  # [N, V]
    target_logits_stride,
    draft_logits_ptr,  # [max_num_reqs, K, V_d]
    draft_logits_stride_0,
    draft_logits_stride_1,
    cu_num_logits_ptr,  # [R + 1]
    idx_mapping_ptr,  # [R]
    temperature_ptr,  # [max_num_reqs]
    vocab_size,
    num_reqs,
    target_local_max_ptr,  # [N, nb] the stats partials' block maxima (read with SKIP_MASKED)
    TILES: tl.constexpr,
    R_P2: tl.constexpr,
    HAS_DRAFT_LOGITS: tl.constexpr,
    SKIP_MASKED: tl.constexpr,
    SUB: tl.constexpr,
    BLOCK: tl.constexpr,
    PDL: tl.constexpr,
):
    # The resample pass as a fixed grid of programs (as many as fit on the GPU at once, at most
    # Config.resample_programs an SM), looping over the tiles of the requests whose plan needs a
    # row pass: the (R, TILES) grid launches a program for every tile, and for greedy and
    # one-hot batches, where few requests need the pass, nearly all of them only exit (7.3 us of
    # 9,600 programs at R = 128). Every program reads the R plans and
    # lists the requests with work (in request order); tile f of that list (request e = f //
    # TILES, tile f % TILES of its row) goes to program f mod G, so the programs at work at
    # once read consecutive tiles as the grid's do, and every program has the grid's latency
    # chain per tile (its tiles are one after another; the grid's concurrency comes from G being
    # as many programs as fit). A run of consecutive tiles a program instead leaves programs
    # idle and cost 50% where rows are read. Even so a program's tiles
    # one after another read rows 29-32% slower than the grid's programs (draft-logits
    # residuals, H200): so the pipeline runs it for one-hot drafts only, whose pass reads only
    # the bonus / placeholder rows of the requests that accepted every draft. The same tiles by
    # the same _block_masses: the same values.
    resampled = (resampled_mass_ptr, resampled_argmax_ptr)
    logits = (target_logits_ptr, target_logits_stride, draft_logits_ptr, draft_logits_stride_0, draft_logits_stride_1)
    _wait_for_prior(PDL)
    r = tl.arange(0, R_P2)
    work = _needs_row_pass(tl.load(plan_ptr + r, mask=r < num_reqs, other=PLAN_DONE)).to(tl.int32)
    total = tl.sum(work, 0) * TILES
    if tl.program_id(0) < total:
        _launch_dependents(PDL)
        done_before = tl.cumsum(work, 0)  # requests with work up to and including r
        for f in range(tl.program_id(0), total, tl.num_programs(0)):
            e = f // TILES
            req = tl.sum((done_before <= e).to(tl.int32), 0).to(tl.int64)  # the (e + 1)-th with work
            tau = tl.load(num_sampled_ptr + req).to(tl.int64)
            _block_masses(
                resampled,
                req * resampled_stride,
                num_blocks,
                plan_lse_ptr,
                logits,
                temperature_ptr,
                vocab_size,
                req,
                tl.load(idx_mapping_ptr + req).to(tl.int64),
                tl.load(cu_num_logits_ptr + req).to(tl.int64) + tau,
                tl.load(plan_ptr + req),
                tau,
                f - e * TILES,
                target_local_max_ptr,
                HAS_DRAFT_LOGITS,
                SKIP_MASKED,
                SUB,
                BLOCK,
            )


@triton.jit
def _block_masses(
    resampled,
    base,
    num_blocks,
    plan_lse_ptr,  # [R, 2] fp64
    logits,
    temperature_ptr,  # [max_num_reqs]
    vocab_size,
    req,
    slot,
    row,
    plan,
    tau,
    tile,
    target_local_max_ptr,  # [N, nb]
    HAS_DRAFT_LOGITS: tl.constexpr,
    SKIP_MASKED: tl.constexpr,
    SUB: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # Tile ``tile`` ([SUB, BLOCK]) of the resample row ``row`` (request req's c_r + tau, its slot
    # ``slot``): per sampling block its log-mass (fp64) or, for a greedy bonus row, its max and
    # first argmax, at [R, nb] offset ``base``.
    # Every load comes before any use, and every use is inside the plan's branch: ptxas issues a
    # load at the end of the block before its first use, so with the target's log-mass computed
    # before the branch, the draft tile would load only once the target's had arrived, and the
    # temperature and LSEs once both had: 6 dependent load rounds a program instead of 3 (sm_90
    # SASS; H200, R = 128, standard phi = 0: the pass 40.7 us instead of 32.3).
    # SKIP_MASKED: a block whose target is -inf throughout gets what its arithmetic would give
    # (log-mass -inf; max -inf and argmax its first entry) without the arithmetic. A draft
    # residual's row is a tested row, so the stats kernel's block maxima say which blocks are
    # masked, and their logits are never loaded (one dependent round more, for the maxima); a
    # bonus or placeholder row is read to know.
    resampled_mass_ptr, resampled_argmax_ptr = resampled
    target_logits_ptr, target_logits_stride, draft_logits_ptr, draft_logits_stride_0, draft_logits_stride_1 = logits
    blocks = tile * SUB + tl.arange(0, SUB)
    offs = blocks[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
    mask = offs < vocab_size
    bmask = blocks < num_blocks
    if SKIP_MASKED and HAS_DRAFT_LOGITS:
        live = bmask
        if plan == PLAN_RESIDUAL:
            live = _live_blocks(target_local_max_ptr, row * num_blocks, blocks, num_blocks)
        target_read = mask & live[:, None]
    else:
        target_read = mask
    x_raw = tl.load(target_logits_ptr + row * target_logits_stride + offs, mask=target_read, other=float("-inf"))
    if HAS_DRAFT_LOGITS:
        residual = plan == PLAN_RESIDUAL
        d_ptr = draft_logits_ptr + slot * draft_logits_stride_0 + tau * draft_logits_stride_1
        draft_read = offs < tl.where(residual, vocab_size, 0)
        if SKIP_MASKED:
            draft_read = draft_read & live[:, None]
        y_raw = tl.load(d_ptr + offs, mask=draft_read, other=float("-inf"))
        temperature = tl.load(temperature_ptr + slot)
        target_lse = tl.load(plan_lse_ptr + 2 * req)
        draft_lse = tl.load(plan_lse_ptr + 2 * req + 1)
    if plan == PLAN_ARGMAX:
        x = _finite_or_neg_inf(x_raw.to(tl.float32))
        value = tl.max(x, 1)
        if SKIP_MASKED and tl.max(value, 0) == float("-inf"):
            index = tl.zeros((SUB,), dtype=tl.int32)
        else:
            index = _first_index_of(x, value, BLOCK)
        tl.store(resampled_mass_ptr + base + blocks, value.to(tl.float64), mask=bmask)
        tl.store(resampled_argmax_ptr + base + blocks, blocks.to(tl.int64) * BLOCK + index.to(tl.int64), mask=bmask)
    elif HAS_DRAFT_LOGITS and residual:
        if SKIP_MASKED and tl.max(live.to(tl.int32), 0) == 0:
            tl.store(resampled_mass_ptr + base + blocks, tl.full((SUB,), float("-inf"), tl.float64), mask=bmask)
        else:
            x = _finite_or_neg_inf(x_raw.to(tl.float32))
            y = _finite_or_neg_inf(y_raw.to(tl.float32) * _inverse(temperature))
            r = _residual(x, y, target_lse, draft_lse, 1.0)
            log_mass = tl.log(_chunked_sum(tl.where(mask, r, 0.0), SUB, BLOCK))  # -inf: an empty block
            tl.store(resampled_mass_ptr + base + blocks, log_mass, mask=bmask)
    else:
        x = _finite_or_neg_inf(x_raw.to(tl.float32))
        block_max = tl.max(x, 1)
        if SKIP_MASKED and tl.max(block_max, 0) == float("-inf"):
            tl.store(resampled_mass_ptr + base + blocks, tl.full((SUB,), float("-inf"), tl.float64), mask=bmask)
        else:
            e = tl.where(x == float("-inf"), 0.0, tl.exp(x - block_max[:, None]))
            log_mass = block_max.to(tl.float64) + tl.log(_chunked_sum(e, SUB, BLOCK))
            tl.store(resampled_mass_ptr + base + blocks, log_mass, mask=bmask)
