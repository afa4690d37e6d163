"""The ``fast`` sampler: MRV2's algorithm and random numbers, with less work per call.

Same inputs, outputs, modes and Philox draws as :mod:`.mrv2` (so the same reference, draw for
draw); it differs only in what it skips and how it evaluates the same numbers. Each change is
predicted and measured in ``notes/performance.md``:

1. **Stats follow the valid drafts.** :func:`_stats_kernel` returns at once for a row nothing
   reads: a non-greedy row ``j`` is read only if drafts ``d_1..d_{j+1}`` are all real (its own
   draft is tested against it); a greedy row ``j`` only if ``d_1..d_j`` are (at the first
   placeholder greedy writes the row's argmax). Rows after a request's first ``-1`` -- and, for
   non-greedy requests, the row at it, which is resampled from the plain target -- are never
   read. ``mrv2`` (like upstream after PR #50939, spec 5.5) reads every row. (mrv2's rejection
   kernel, reused here, still reduces the unused LSE of a block-verification request's
   placeholder row; with those stats skipped it reads stale, in-bounds partials and the resample
   step ignores the value, sampling the plain target there.)
2. **Fast logarithms on the GPU** (``Config.fast_log``): the two logs of the Gumbel noise use
   the hardware ``lg2.approx`` (relative error ~2**-22) instead of libdevice's ``logf``. This
   moves noise values by a few ulp, so a token can differ from the reference only where two
   candidates tie to within that; the tests bound such flips as they do for ``mrv2``. Off under
   the interpreter. A Philox with one 32x32->64 multiply per product instead of separate high
   and low multiplies was tried and measured slower (notes), so the noise is ``tl.rand``, as in
   mrv2.
3. **Block sizes and grid layout per batch size** (``Config``, :func:`default_config`), chosen
   by measurement on the H200 (``scripts/tune_fast.py``). At large R the stats and residual-mass
   kernels run on a (R, nb) grid whose programs loop over the rows their request needs
   (:func:`_request_stats_kernel`, :func:`_request_residual_mass_kernel`): skipped rows then
   cost nothing, where an (N, nb) grid still launches, and retires, one program per skipped
   row and block. At small R the (N, nb) grid and mrv2's block sizes keep more programs in
   flight. The residual-mass kernel of the large-batch layout skips the same way: row ``j``
   only while ``d_1..d_{j+1}`` are real (mrv2 tests only ``d_{j+1}``).

Cumulative log p, rejection and insert are ``mrv2``'s kernels, unchanged, and so is residual
mass in the small-batch layout: the partial statistics they read are laid out the same way
([N, nb] per stats block).
"""

from __future__ import annotations

import functools
import inspect
import os
from dataclasses import dataclass

import torch
import triton
import triton.language as tl
from triton.language.extra import libdevice

from . import mrv2
from .mrv2 import MIN_UNIFORM, _log1m

@dataclass(frozen=True)
class Config:
    """Tunables of the fast pipeline; :func:`default_config` picks one by batch size, from
    ``scripts/tune_fast.py`` on the H200 (notes/performance.md)."""

    stats_block: int = 4096  # vocab entries per stats / residual-mass program
    stats_warps: int = 4
    resample_block: int = 2048  # vocab entries per resample program
    resample_warps: int = 4
    fast_log: bool = True  # hardware lg2.approx for the Gumbel noise (GPU only)
    # Stats and residual mass on a (R, nb) grid, each program looping over its request's rows
    # (few programs, and a skipped request costs one short program per block), instead of
    # (N, nb) with one row each (more parallel work at small R).
    request_grid: bool = True
    # Request grid only: each program loads row j+1 before reducing row j.
    prefetch: bool = False

    def __post_init__(self) -> None:
        for name in ("stats_block", "resample_block"):
            value = getattr(self, name)
            if value < 128 or value & (value - 1):
                raise ValueError(f"{name}: expected a power of two >= 128, got {value}")
        for name in ("stats_warps", "resample_warps"):
            if getattr(self, name) not in (1, 2, 4, 8, 16, 32):
                raise ValueError(f"{name}: expected a power of two in [1, 32], got {getattr(self, name)}")


# Large batches: bandwidth-bound, fewer and wider programs.
LARGE_BATCH_CONFIG = Config()
# Small batches: one partial wave of programs, so latency chains set the time; mrv2's block
# sizes and the one-row-per-program grid keep every kernel as parallel as mrv2's.
SMALL_BATCH_CONFIG = Config(stats_block=8192, stats_warps=8, resample_block=1024, resample_warps=4, request_grid=False)
# Batches of fewer requests than this use SMALL_BATCH_CONFIG.
SMALL_BATCH_BELOW = 32


def default_config(num_reqs: int) -> Config:
    """The configuration used when none is given (R is known on the host: no device sync)."""
    return SMALL_BATCH_CONFIG if num_reqs < SMALL_BATCH_BELOW else LARGE_BATCH_CONFIG


def _interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


# ---------------------------------------------------------------------------------------------
# Device helpers
# ---------------------------------------------------------------------------------------------


@triton.jit
def _gumbel_noise(seed, offset, FAST_LOG: tl.constexpr):
    # The flipped Gumbel noise of mrv2's resample: -log(-log1p(-u)), u = max(rand, MIN_UNIFORM).
    u = tl.maximum(tl.rand(seed, offset), MIN_UNIFORM)
    if FAST_LOG:
        # log(1 - u) with the same series near 0 as mrv2._log1m; lg2.approx elsewhere.
        one_minus = tl.where(u < 1e-3, -u * (1.0 + u * (0.5 + u * (1.0 / 3.0))), libdevice.fast_logf(1.0 - u))
        return -libdevice.fast_logf(-one_minus)
    else:
        return -tl.log(-_log1m(u))


# ---------------------------------------------------------------------------------------------
# Kernel 1: local logits stats, only for rows something reads
# ---------------------------------------------------------------------------------------------


@triton.jit
def _load_row_block(
    target_logits_ptr,
    target_logits_stride,
    draft_logits_ptr,
    draft_logits_stride_0,
    draft_logits_stride_1,
    row,
    local_pos,
    slot,
    temperature,
    offs,
    limit,
    HAS_DRAFT_LOGITS: tl.constexpr,
):
    # One block (entries offs < limit) of a target row and, for a sampling row with draft
    # logits, of its draft row (divided by T); NaN is -inf (as mrv2). Row indices are int64
    # (the caller casts), so N*V > 2**31 is safe. limit 0 loads nothing.
    x = tl.load(target_logits_ptr + row * target_logits_stride + offs, mask=offs < limit, other=float("-inf"))
    x = x.to(tl.float32)
    x = tl.where(x != x, float("-inf"), x)
    if HAS_DRAFT_LOGITS:
        d_ptr = draft_logits_ptr + slot * draft_logits_stride_0 + local_pos * draft_logits_stride_1
        d_limit = tl.where(temperature != 0.0, limit, 0)
        y = tl.load(d_ptr + offs, mask=offs < d_limit, other=float("-inf")).to(tl.float32)
        y = y / tl.where(temperature != 0.0, temperature, 1.0)
        y = tl.where(y != y, float("-inf"), y)
    else:
        y = x
    return x, y


@triton.jit
def _store_block_stats(
    x,
    y,
    target_local_argmax_ptr,
    target_local_max_ptr,
    target_local_sumexp_ptr,
    draft_local_max_ptr,
    draft_local_sumexp_ptr,
    out,
    block,
    temperature,
    HAS_DRAFT_LOGITS: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    # The stats of one loaded block, exactly as mrv2's stats kernel (spec 3.2).
    block_max = tl.max(x, 0)
    tl.store(target_local_max_ptr + out, block_max)
    if temperature == 0.0:
        local_argmax = tl.argmax(x, 0, tie_break_left=True)
        tl.store(target_local_argmax_ptr + out, block * BLOCK_V + local_argmax.to(tl.int64))
    else:
        e = tl.where(x == float("-inf"), 0.0, tl.exp(x - block_max))
        tl.store(target_local_sumexp_ptr + out, tl.sum(e, 0))
        if HAS_DRAFT_LOGITS:
            d_max = tl.max(y, 0)
            ey = tl.where(y == float("-inf"), 0.0, tl.exp(y - d_max))
            tl.store(draft_local_max_ptr + out, d_max)
            tl.store(draft_local_sumexp_ptr + out, tl.sum(ey, 0))


@triton.jit
def _stats_kernel(
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
    # [N, nb] outputs
    target_local_argmax_ptr,
    target_local_max_ptr,
    target_local_sumexp_ptr,
    draft_local_max_ptr,
    draft_local_sumexp_ptr,
    local_stride,
    num_logits,
    vocab_size,
    num_speculative_steps,
    HAS_DRAFT_LOGITS: tl.constexpr,
    K_P2: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    # Grid (N, nb): one program per row and block (the small-batch layout).
    row = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    # ---- is this row read? Greedy reads row j while d_1..d_j are real; the other modes while
    # d_1..d_{j+1} are. Those drafts sit at rows row+1-i for i = 0..j (i = 0 only when not
    # greedy). The K rows row+1-i, i < K, are loaded as scalars together with the row's local
    # position and slot (independent loads, no cross-warp reduction), so the check costs two
    # dependent steps (those loads, then the temperature) before the logits. Rows outside the
    # request are loaded but never tested.
    local_pos = tl.load(expanded_local_pos_ptr + row)
    slot = tl.load(expanded_idx_mapping_ptr + row).to(tl.int64)
    d0 = tl.load(draft_sampled_ptr + row + 1, mask=row + 1 < num_logits, other=0)
    before = 0  # placeholders among d at rows row+1-i, 1 <= i <= local_pos
    for i in tl.static_range(1, K_P2):
        d = tl.load(draft_sampled_ptr + row + 1 - i, mask=(i < num_speculative_steps) & (row + 1 - i >= 0), other=0)
        before += ((d < 0) & (i <= local_pos)).to(tl.int32)
    if local_pos >= num_speculative_steps:
        return  # bonus rows need no stats
    temperature = tl.load(temperature_ptr + slot)
    if (before > 0) | ((temperature != 0.0) & (d0 < 0)):
        return
    offs = block * BLOCK_V + tl.arange(0, BLOCK_V)
    x, y = _load_row_block(
        target_logits_ptr, target_logits_stride, draft_logits_ptr, draft_logits_stride_0, draft_logits_stride_1,
        row, local_pos.to(tl.int64), slot, temperature, offs, vocab_size, HAS_DRAFT_LOGITS,
    )  # fmt: skip
    _store_block_stats(
        x, y, target_local_argmax_ptr, target_local_max_ptr, target_local_sumexp_ptr,
        draft_local_max_ptr, draft_local_sumexp_ptr, row * local_stride + block, block, temperature,
        HAS_DRAFT_LOGITS, BLOCK_V,
    )  # fmt: skip


@triton.jit
def _leading_real_drafts(draft_sampled_ptr, start, num_drafts, K_P2: tl.constexpr):
    # m = number of real drafts before the request's first placeholder (num_drafts if none).
    k = tl.arange(0, K_P2)
    drafts = tl.load(draft_sampled_ptr + start + 1 + k, mask=k < num_drafts, other=0)
    return tl.minimum(tl.min(tl.where(drafts < 0, k, K_P2), 0), num_drafts)


@triton.jit
def _request_stats_kernel(
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
    # [N, nb] outputs
    target_local_argmax_ptr,
    target_local_max_ptr,
    target_local_sumexp_ptr,
    draft_local_max_ptr,
    draft_local_sumexp_ptr,
    local_stride,
    vocab_size,
    HAS_DRAFT_LOGITS: tl.constexpr,
    K_P2: tl.constexpr,
    BLOCK_V: tl.constexpr,
    PREFETCH: tl.constexpr,
):
    # Grid (R, nb): one program per request and block, looping over the rows something reads
    # (the large-batch layout). A request whose rows are all skipped costs one short program
    # per block instead of K + 1. PREFETCH loads row j+1 before reducing row j (two rows in
    # flight per program).
    req = tl.program_id(0)
    block = tl.program_id(1)
    slot = tl.load(idx_mapping_ptr + req).to(tl.int64)
    start = tl.load(cu_num_logits_ptr + req).to(tl.int64)
    num_drafts = tl.load(cu_num_logits_ptr + req + 1).to(tl.int64) - start - 1
    temperature = tl.load(temperature_ptr + slot)
    m = _leading_real_drafts(draft_sampled_ptr, start, num_drafts, K_P2)
    # Greedy reads rows 0..m (the argmax at the first placeholder), other modes rows 0..m-1;
    # never the bonus row (j = num_drafts).
    num_rows = tl.minimum(m + (temperature == 0.0).to(m.dtype), num_drafts)
    offs = block * BLOCK_V + tl.arange(0, BLOCK_V)
    if PREFETCH:
        x_next, y_next = _load_row_block(
            target_logits_ptr, target_logits_stride, draft_logits_ptr, draft_logits_stride_0, draft_logits_stride_1,
            start, 0, slot, temperature, offs, tl.where(num_rows > 0, vocab_size, 0), HAS_DRAFT_LOGITS,
        )  # fmt: skip
    for j in range(0, num_rows):
        row = start + j
        if PREFETCH:
            x, y = x_next, y_next
            x_next, y_next = _load_row_block(
                target_logits_ptr, target_logits_stride, draft_logits_ptr, draft_logits_stride_0, draft_logits_stride_1,
                row + 1, j + 1, slot, temperature, offs, tl.where(j + 1 < num_rows, vocab_size, 0), HAS_DRAFT_LOGITS,
            )  # fmt: skip
        else:
            x, y = _load_row_block(
                target_logits_ptr, target_logits_stride, draft_logits_ptr, draft_logits_stride_0, draft_logits_stride_1,
                row, j, slot, temperature, offs, vocab_size, HAS_DRAFT_LOGITS,
            )  # fmt: skip
        _store_block_stats(
            x, y, target_local_argmax_ptr, target_local_max_ptr, target_local_sumexp_ptr,
            draft_local_max_ptr, draft_local_sumexp_ptr, row * local_stride + block, block, temperature,
            HAS_DRAFT_LOGITS, BLOCK_V,
        )  # fmt: skip


# ---------------------------------------------------------------------------------------------
# Kernel 3: residual mass, large-batch layout (block verification with draft logits)
# ---------------------------------------------------------------------------------------------


@triton.jit
def _request_residual_mass_kernel(
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
    # [N]
    cumulative_log_p_ptr,
    # [N, nb] output
    local_residual_mass_ptr,
    vocab_size,
    K_P2: tl.constexpr,
    BLOCK_V: tl.constexpr,
    NUM_BLOCKS_P2: tl.constexpr,
    PREFETCH: tl.constexpr,
):
    # Grid (R, nb). mrv2's residual mass (spec 3.4) for the rows the rejection kernel reads:
    # row j needs Z_{j+1} when 1 <= j and d_{j+1} is real, i.e. rows 1..m-1.
    req = tl.program_id(0)
    block = tl.program_id(1)
    slot = tl.load(idx_mapping_ptr + req).to(tl.int64)
    start = tl.load(cu_num_logits_ptr + req).to(tl.int64)
    num_drafts = tl.load(cu_num_logits_ptr + req + 1).to(tl.int64) - start - 1
    temperature = tl.load(temperature_ptr + slot)
    m = _leading_real_drafts(draft_sampled_ptr, start, num_drafts, K_P2)
    if temperature == 0.0:
        return  # greedy rows have no residual
    offs = block * BLOCK_V + tl.arange(0, BLOCK_V)
    mask = offs < vocab_size
    d_base = draft_logits_ptr + slot * draft_logits_stride_0 + offs
    if PREFETCH:
        first = offs < tl.where(m > 1, vocab_size, 0)
        x_next = tl.load(target_logits_ptr + (start + 1) * target_logits_stride + offs, mask=first, other=float("-inf"))
        y_next = tl.load(d_base + draft_logits_stride_1, mask=first, other=float("-inf"))
    for j in range(1, m):
        row = start + j
        if PREFETCH:
            x, y = x_next, y_next
            following = offs < tl.where(j + 1 < m, vocab_size, 0)
            x_next = tl.load(target_logits_ptr + (row + 1) * target_logits_stride + offs, mask=following,
                             other=float("-inf"))  # fmt: skip
            y_next = tl.load(d_base + (j + 1) * draft_logits_stride_1, mask=following, other=float("-inf"))
        else:
            x = tl.load(target_logits_ptr + row * target_logits_stride + offs, mask=mask, other=float("-inf"))
            y = tl.load(d_base + j * draft_logits_stride_1, mask=mask, other=float("-inf"))
        p_prev = tl.exp(tl.load(cumulative_log_p_ptr + row - 1))
        lse = mrv2._global_lse(target_local_max_ptr, target_local_sumexp_ptr, row, local_stride, num_blocks,
                               NUM_BLOCKS_P2)  # fmt: skip
        d_lse = mrv2._global_lse(draft_local_max_ptr, draft_local_sumexp_ptr, row, local_stride, num_blocks,
                                 NUM_BLOCKS_P2)  # fmt: skip
        res = tl.maximum(p_prev * tl.exp(x.to(tl.float32) - lse) - tl.exp(y.to(tl.float32) / temperature - d_lse), 0.0)
        res = tl.where(mask, res, 0.0)
        tl.store(local_residual_mass_ptr + row * local_stride + block, tl.sum(res, 0))


# ---------------------------------------------------------------------------------------------
# Kernel 5: resample, with the fast logs
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
    FAST_LOG: tl.constexpr,
    BLOCK_V: tl.constexpr,
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
    x = tl.where(x != x, float("-inf"), x)

    # ---- residual logits rho(x) in log space, exactly as mrv2 (spec 3.6)
    rejected = tl.load(draft_sampled_ptr + row + 1, mask=row + 1 < end, other=0).to(tl.int64)
    if is_bonus | (rejected < 0):
        rho = x  # bonus row, or a placeholder that was never drawn: sample the target
    else:
        if HAS_DRAFT_LOGITS:
            a = x - tl.load(target_rejected_lse_ptr + req)
            if USE_BLOCK_VERIFICATION:
                if tau > 0:
                    a += tl.load(cumulative_log_p_ptr + row - 1)
            d_ptr = draft_logits_ptr + slot * draft_logits_stride_0 + tau * draft_logits_stride_1
            g = tl.load(d_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32) / temperature
            g = g - tl.load(draft_rejected_lse_ptr + req)
            ratio = tl.exp(g - a)
            rho = tl.where(ratio < 1.0, a + _log1m(ratio), float("-inf"))
        else:
            rho = tl.where(offs == rejected, float("-inf"), x)

    # ---- Gumbel-max (target logits already carry temperature)
    if temperature != 0.0:
        gseed = tl.randint(tl.load(seed_ptr + slot), tl.load(pos_ptr + row).to(tl.int32))
        rho = rho + _gumbel_noise(gseed, offs.to(tl.int32), FAST_LOG)
    rho = tl.where(mask, rho, float("-inf"))
    best = tl.argmax(rho, 0, tie_break_left=True)
    best_val = tl.max(rho, 0)
    out = req * resampled_stride + block
    tl.store(resampled_local_max_ptr + out, best_val)
    tl.store(resampled_local_argmax_ptr + out, block * BLOCK_V + best.to(tl.int64))


# ---------------------------------------------------------------------------------------------
# Launcher
# ---------------------------------------------------------------------------------------------


class Pipeline(mrv2.Pipeline):
    """:class:`specsample.kernels.mrv2.Pipeline` with the fast stats and resample kernels.

    Same arguments (``placeholder_fix`` is always on) plus ``config``. ``use_fp64`` noise keeps
    mrv2's fp64 resample kernel.
    """

    planted_knob = False  # planted.VARIANTS: the test-only knob slows mrv2's pipelines only

    def __init__(self, *args, config: Config | None = None, **kwargs) -> None:
        arguments = inspect.signature(mrv2.Pipeline).bind_partial(*args, **kwargs).arguments
        arguments["placeholder_fix"] = True
        use_fp64 = arguments.get("use_fp64", False)
        c = self.config = config or default_config(arguments["idx_mapping"].shape[0])
        super().__init__(
            **arguments, vocab_block_size=c.stats_block, block_warps=c.stats_warps,
            # fp64 noise keeps mrv2's resample kernel, with mrv2's block
            resample_block_size=mrv2.RESAMPLE_BLOCK_SIZE if use_fp64 else c.resample_block,
        )  # fmt: skip
        self.fast_log = c.fast_log and self.target_logits.device.type == "cuda" and not _interpreted()
        self.k_p2 = triton.next_power_of_2(max(self.k, 1))

    # ---- 1. block stats of the rows something reads
    def _stats(self) -> None:
        c = self.config
        if c.request_grid:
            _request_stats_kernel[(self.num_reqs, self.num_blocks)](
                self.target_logits, self.target_logits.stride(0),
                self.draft_arg, *self.draft_strides,
                self.draft_sampled, self.cu_num_logits, self.idx_mapping, self.temperature,
                self.target_local_argmax, self.target_local_max, self.target_local_sumexp,
                self.draft_local_max, self.draft_local_sumexp, self.num_blocks,
                self.vocab_size,
                HAS_DRAFT_LOGITS=self.has_draft_logits, K_P2=self.k_p2,
                BLOCK_V=c.stats_block, PREFETCH=c.prefetch, num_warps=c.stats_warps,
            )  # fmt: skip
            return
        _stats_kernel[(self.num_logits, self.num_blocks)](
            self.target_logits, self.target_logits.stride(0),
            self.draft_arg, *self.draft_strides,
            self.draft_sampled, self.expanded_idx_mapping, self.expanded_local_pos, self.temperature,
            self.target_local_argmax, self.target_local_max, self.target_local_sumexp,
            self.draft_local_max, self.draft_local_sumexp, self.num_blocks,
            self.num_logits, self.vocab_size, self.k,
            HAS_DRAFT_LOGITS=self.has_draft_logits, K_P2=self.k_p2,
            BLOCK_V=c.stats_block, num_warps=c.stats_warps,
        )  # fmt: skip

    # ---- 3. residual mass of the rows the rejection kernel reads (large-batch layout)
    def _residual_mass(self) -> None:
        c = self.config
        if not c.request_grid:
            return super()._residual_mass()  # mrv2's kernel, at this pipeline's block size
        _request_residual_mass_kernel[(self.num_reqs, self.num_blocks)](
            self.target_logits, self.target_logits.stride(0),
            self.draft_arg, *self.draft_strides,
            self.draft_sampled, self.cu_num_logits, self.idx_mapping, self.temperature,
            self.target_local_max, self.target_local_sumexp, self.draft_local_max, self.draft_local_sumexp,
            self.num_blocks, self.num_blocks,
            self.cumulative_log_p, self.local_residual_mass,
            self.vocab_size,
            K_P2=self.k_p2, BLOCK_V=c.stats_block, NUM_BLOCKS_P2=self.num_blocks_p2, PREFETCH=c.prefetch,
            num_warps=c.stats_warps,
        )  # fmt: skip

    # ---- 5. resample with the fast logs
    def _resample(self) -> None:
        if self.use_fp64:
            return super()._resample()
        c = self.config
        _resample_kernel[(self.num_reqs, self.num_resample_blocks)](
            self.resampled_local_argmax, self.resampled_local_max, self.num_resample_blocks,
            self.num_sampled, self.target_rejected_lse, self.draft_rejected_lse,
            self.target_logits, self.target_logits.stride(0),
            self.draft_arg, *self.draft_strides,
            self.draft_sampled, self.pos, self.cumulative_log_p, self.cu_num_logits, self.idx_mapping,
            self.temperature, self.seed,
            self.vocab_size,
            HAS_DRAFT_LOGITS=self.has_draft_logits, USE_BLOCK_VERIFICATION=self.use_block_verification,
            FAST_LOG=self.fast_log,
            BLOCK_V=c.resample_block, num_warps=c.resample_warps,
        )  # fmt: skip


def launch(*args, config: Config | None = None, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """Allocate and run one fast :class:`Pipeline` (the arguments of ``mrv2.launch``)."""
    return Pipeline(*args, config=config, **kwargs).run()


def rejection_sample_fast(*args, config: Config | None = None, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """The fast sampler, with the arguments, validation and outputs of
    :func:`specsample.rejection_sample` (see there), plus ``config``."""
    from ..sampler import bind_arguments, checked_launch

    return checked_launch(bind_arguments(args, kwargs), launch=functools.partial(launch, config=config))
