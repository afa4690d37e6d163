"""The ``fast`` sampler: MRV2's algorithm and random numbers, with less work per call.

Same inputs, outputs, modes and Philox draws as :mod:`.mrv2` (so the same reference, draw for
draw); it differs only in what it skips and how it evaluates the same numbers. Predictions and
measurements behind each choice, and what was tried and not kept, are in
``docs/performance-log.md``.

1. **Stats and residual mass follow the valid drafts.** :func:`_stats_kernel` reads a
   non-greedy row ``j`` only if drafts ``d_1..d_{j+1}`` are all real (its own draft is tested
   against it), a greedy row ``j`` only if ``d_1..d_j`` are (at the first placeholder greedy
   writes the row's argmax); :func:`_residual_mass_kernel` only rows ``1 <= j`` whose
   ``d_1..d_{j+1}`` are real. Rows after a request's first ``-1`` -- and, for non-greedy
   requests, the row at it, which is resampled from the plain target -- are never read.
   ``mrv2`` (like upstream after PR #50939, spec 5.5) reads every stats row. (mrv2's rejection
   kernel, reused here, still reduces the unused LSE of a block-verification request's
   placeholder row; with those stats skipped it reads stale, in-bounds partials and the resample
   step ignores the value, sampling the plain target there.)
2. **Request-major grids.** Both kernels launch one program per (request, group of
   ``Config.stats_rows`` rows, vocab block), finding the rows read from the request's drafts,
   loaded as independent scalars (:func:`_request_rows`): no program at all for bonus rows
   (stats) or row 0 (residual mass), which mrv2's (N, nb) grid launches only to exit.
3. **Fast logarithms on the GPU**: the two logs of the Gumbel noise use
   the hardware ``lg2.approx`` (relative error ~2**-22) instead of libdevice's ``logf``. This
   moves noise values by a few ulp, so a token can differ from the reference only where two
   candidates tie to within that; the tests bound such flips as they do for ``mrv2``. Off under
   the interpreter. The resample's per-row set-up is hoisted out of its (``Config.resample_loop``)
   loop over blocks, and a block's max and argmax are one reduction.
4. **Block sizes per batch size** (``Config``, :func:`default_config`), chosen by measurement
   on the H200 (``specsample tune``): 4096-wide stats and 2048-wide resample blocks from 32
   requests up, mrv2's 8192 and 1024 below, where one partial wave of programs runs and latency,
   not bandwidth, sets the time; below 4 requests the stats also load their rows before knowing
   which are read (``Config.speculative_load``), one dependent load sooner.
5. **Insert inside the resample kernel below 32 requests** (``Config.fused_insert``). Each
   resample program counts itself done with an atomic add on ``num_sampled`` (tau stays in the
   low 16 bits); the request's last one takes the argmax over the partials and writes the token
   and tau + 1, as mrv2's insert kernel does: one launch fewer. From 32 requests up the count
   costs more than the launch, so large batches keep mrv2's insert.
6. **The draft rows load with the target's**: the stats kernel
   issues both loads before any reduction (a greedy row's draft load is masked off); after the
   target's reductions and stores the compiler may not move the draft load up past those stores.

Cumulative log p, rejection and (large batches) insert are ``mrv2``'s kernels, unchanged: the
partial statistics they read are laid out the same way ([N, nb] per stats block).
"""

from __future__ import annotations

import dataclasses
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from . import mrv2
from .common import _gumbel_noise, _log1m, _load_logits, _request_rows, _resampled_token


@dataclass(frozen=True)
class Config:
    """Tunables of the fast pipeline; :func:`default_config` picks one by batch size, from
    ``specsample tune`` on an H200."""

    stats_block: int = 4096  # vocab entries per stats / residual-mass program and row
    stats_warps: int = 4
    stats_rows: int = 1  # rows of one request per stats / residual-mass program (a 2-D tile)
    speculative_load: bool = False  # stats: load a tile's rows before knowing which are read
    resample_block: int = 2048  # vocab entries per resample block
    resample_loop: int = 1  # resample blocks each program takes in turn
    resample_warps: int = 4
    fused_insert: bool = False  # the resample kernel's last program per request inserts

    def __post_init__(self) -> None:
        for name in ("stats_block", "resample_block"):
            value = getattr(self, name)
            if value < 128 or value & (value - 1):
                raise ValueError(f"{name}: expected a power of two >= 128, got {value}")
        for name in ("stats_warps", "resample_warps"):
            if getattr(self, name) not in (1, 2, 4, 8, 16, 32):
                raise ValueError(f"{name}: expected a power of two in [1, 32], got {getattr(self, name)}")
        if self.resample_loop < 1:
            raise ValueError(f"resample_loop: expected >= 1, got {self.resample_loop}")
        if self.stats_rows not in (1, 2, 4, 8):
            raise ValueError(f"stats_rows: expected 1, 2, 4 or 8, got {self.stats_rows}")


# Large batches: bandwidth-bound, fewer and wider programs; a separate insert kernel (the fused
# one's atomic count made R >= 32 2-16% slower).
LARGE_BATCH_CONFIG = Config()
# Small batches: one partial wave of programs, so latency chains set the time; mrv2's block
# sizes keep every kernel as parallel as mrv2's, and one launch fewer (fused insert) pays.
SMALL_BATCH_CONFIG = Config(stats_block=8192, stats_warps=8, resample_block=1024, resample_warps=4, fused_insert=True)
# Tiny batches: as small, and the stats load their rows before knowing which are read (the
# rows not read cost bytes, which at R=8 and phi=0.5 outweigh the dependent load it saves).
TINY_BATCH_CONFIG = dataclasses.replace(SMALL_BATCH_CONFIG, speculative_load=True)
# Batches of fewer requests than these use TINY_BATCH_CONFIG, then SMALL_BATCH_CONFIG.
TINY_BATCH_BELOW = 4
SMALL_BATCH_BELOW = 32
# The configurations by name: what `specsample tune` builds candidates on and memcheck forces.
NAMED_CONFIGS = {"large": LARGE_BATCH_CONFIG, "small": SMALL_BATCH_CONFIG, "tiny": TINY_BATCH_CONFIG}


def default_config(num_reqs: int) -> Config:
    """The configuration used when none is given (R is known on the host: no device sync)."""
    if num_reqs < TINY_BATCH_BELOW:
        return TINY_BATCH_CONFIG
    return SMALL_BATCH_CONFIG if num_reqs < SMALL_BATCH_BELOW else LARGE_BATCH_CONFIG


def _interpreted() -> bool:
    return os.environ.get("TRITON_INTERPRET") == "1"


# ---------------------------------------------------------------------------------------------
# Kernel 1: local logits stats, only for rows something reads
# ---------------------------------------------------------------------------------------------


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
    ROWS: tl.constexpr,
    GROUPS: tl.constexpr,
    BLOCK_V: tl.constexpr,
    SPECULATIVE_LOAD: tl.constexpr,
):
    # Program (req * GROUPS + g, b): rows j = g*ROWS .. g*ROWS + ROWS-1 of request req, one
    # [ROWS, BLOCK_V] tile of vocab block b. A greedy request reads rows j <= f (at the first
    # placeholder f greedy writes the row's argmax); the other modes rows j < f (their own
    # draft is tested against them; the row at f is resampled from the plain target). Bonus rows
    # are never read, and no program is launched for them.
    req = (tl.program_id(0) // GROUPS).to(tl.int64)
    j0 = (tl.program_id(0) % GROUPS) * ROWS  # the tile's first local position
    j = j0 + tl.arange(0, ROWS)
    block = tl.program_id(1)
    offs = block * BLOCK_V + tl.arange(0, BLOCK_V)
    vmask = offs < vocab_size
    start, num_drafts, first = _request_rows(cu_num_logits_ptr, draft_sampled_ptr, req, K_P2)
    rows = start + j
    t_ptrs = target_logits_ptr + rows[:, None] * target_logits_stride + offs[None, :]
    if SPECULATIVE_LOAD:
        # Small batches (latency, not bytes): load every draft row of the tile before the
        # placeholders and the temperature are known, as mrv2 does; the rows not read are
        # discarded. One dependent load fewer before the logits.
        x = tl.load(t_ptrs, mask=(j < num_drafts)[:, None] & vmask[None, :], other=float("-inf"))
    slot = tl.load(idx_mapping_ptr + req).to(tl.int64)
    temperature = tl.load(temperature_ptr + slot)
    num_read = tl.where(temperature == 0.0, tl.minimum(first + 1, num_drafts), first)
    if j0 >= num_read:
        return
    read = j < num_read
    if not SPECULATIVE_LOAD:
        x = tl.load(t_ptrs, mask=read[:, None] & vmask[None, :], other=float("-inf"))
    if HAS_DRAFT_LOGITS:
        # Issued with the target's load (nothing for a greedy row): below, after the target's
        # reductions and stores, the compiler may not move it up past those stores.
        d_ptrs = draft_logits_ptr + slot * draft_logits_stride_0 + j[:, None].to(tl.int64) * draft_logits_stride_1
        drafted = j < tl.where(temperature != 0.0, num_read, 0)
        y_raw = tl.load(d_ptrs + offs[None, :], mask=drafted[:, None] & vmask[None, :], other=float("-inf"))

    # ---- NaN is treated as -inf throughout (as mrv2)
    x = x.to(tl.float32)
    x = tl.where(x != x, float("-inf"), x)
    block_max = tl.max(x, 1)
    out = rows * local_stride + block
    tl.store(target_local_max_ptr + out, block_max, mask=read)
    if temperature == 0.0:
        local_argmax = tl.argmax(x, 1, tie_break_left=True)
        tl.store(target_local_argmax_ptr + out, block * BLOCK_V + local_argmax.to(tl.int64), mask=read)
    else:
        e = tl.where(x == float("-inf"), 0.0, tl.exp(x - block_max[:, None]))
        tl.store(target_local_sumexp_ptr + out, tl.sum(e, 1), mask=read)
        if HAS_DRAFT_LOGITS:
            y = y_raw.to(tl.float32) / temperature
            y = tl.where(y != y, float("-inf"), y)
            d_max = tl.max(y, 1)
            ey = tl.where(y == float("-inf"), 0.0, tl.exp(y - d_max[:, None]))
            tl.store(draft_local_max_ptr + out, d_max, mask=read)
            tl.store(draft_local_sumexp_ptr + out, tl.sum(ey, 1), mask=read)


# ---------------------------------------------------------------------------------------------
# Kernel 3: residual mass, only for rows the rejection kernel reads
# ---------------------------------------------------------------------------------------------


@triton.jit
def _rows_lse(
    # [N, nb] per-block max and sum exp(x - max)
    local_max_ptr,
    local_sumexp_ptr,
    rows,  # [ROWS] int64
    read,  # [ROWS] bool: rows to reduce (the others give -inf)
    local_stride,
    num_blocks,
    NUM_BLOCKS_P2: tl.constexpr,
):
    # mrv2.stats._global_lse for a vector of rows: [ROWS] LSEs from the [ROWS, nb] partials.
    b = tl.arange(0, NUM_BLOCKS_P2)
    mask = read[:, None] & (b < num_blocks)[None, :]
    ptrs = rows[:, None] * local_stride + b[None, :]
    m = tl.load(local_max_ptr + ptrs, mask=mask, other=float("-inf"))
    s = tl.load(local_sumexp_ptr + ptrs, mask=mask, other=0.0)
    big = tl.max(m, 1)
    w = tl.where(m == float("-inf"), 0.0, s * tl.exp(m - big[:, None]))
    return big + tl.log(tl.sum(w, 1))


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
    cumulative_log_p_ptr,
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
    # [N, nb] output
    local_residual_mass_ptr,
    vocab_size,
    K_P2: tl.constexpr,
    ROWS: tl.constexpr,
    GROUPS: tl.constexpr,
    BLOCK_V: tl.constexpr,
    NUM_BLOCKS_P2: tl.constexpr,
):
    # Program (req * GROUPS + g, b): rows j = 1 + g*ROWS .. of request req. The rejection kernel
    # reads row j's residual mass (Z_{j+1}) only when d_1..d_{j+1} are all real, i.e. j < f, and
    # never row 0's: no program is launched for row 0 or the bonus row.
    req = (tl.program_id(0) // GROUPS).to(tl.int64)
    j0 = 1 + (tl.program_id(0) % GROUPS) * ROWS  # the tile's first local position
    j = j0 + tl.arange(0, ROWS)
    block = tl.program_id(1)
    start, num_drafts, first = _request_rows(cu_num_logits_ptr, draft_sampled_ptr, req, K_P2)
    if j0 >= first:
        return
    slot = tl.load(idx_mapping_ptr + req).to(tl.int64)
    temperature = tl.load(temperature_ptr + slot)
    if temperature == 0.0:
        return
    read = j < first
    rows = start + j

    # partial[t, b] = sum_x max(p_j * M_b(x) - M_s(x), 0), with p_j = exp(cum_log_p[t-1])
    p_prev = tl.exp(tl.load(cumulative_log_p_ptr + rows - 1, mask=read, other=0.0))
    lse = _rows_lse(target_local_max_ptr, target_local_sumexp_ptr, rows, read, local_stride, num_blocks, NUM_BLOCKS_P2)
    d_lse = _rows_lse(draft_local_max_ptr, draft_local_sumexp_ptr, rows, read, local_stride, num_blocks, NUM_BLOCKS_P2)
    offs = block * BLOCK_V + tl.arange(0, BLOCK_V)
    mask = read[:, None] & (offs < vocab_size)[None, :]
    x = tl.load(
        target_logits_ptr + rows[:, None] * target_logits_stride + offs[None, :], mask=mask, other=float("-inf")
    )
    d_ptrs = draft_logits_ptr + slot * draft_logits_stride_0 + j[:, None].to(tl.int64) * draft_logits_stride_1
    y = tl.load(d_ptrs + offs[None, :], mask=mask, other=float("-inf")).to(tl.float32) / temperature
    res = tl.maximum(p_prev[:, None] * tl.exp(x.to(tl.float32) - lse[:, None]) - tl.exp(y - d_lse[:, None]), 0.0)
    res = tl.where(mask, res, 0.0)
    tl.store(local_residual_mass_ptr + rows * local_stride + block, tl.sum(res, 1), mask=read)


# ---------------------------------------------------------------------------------------------
# Kernel 5: resample, with the fast logs
# ---------------------------------------------------------------------------------------------


@triton.jit
def _resample_kernel(
    # [R, K + 1] output
    sampled_ptr,
    sampled_stride,
    # [R, rb] scratch
    resampled_local_argmax_ptr,
    resampled_local_max_ptr,
    resampled_stride,
    num_spans,
    # [R] in: tau, out: tau + 1
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
    BLOCKS: tl.constexpr,
    FUSED_INSERT: tl.constexpr,
    NUM_SPANS_P2: tl.constexpr,
):
    # Program (r, s) takes blocks s*BLOCKS .. s*BLOCKS + BLOCKS-1 of request r's resample row in
    # turn: the row's set-up (tau, temperature, the noise seed) is paid once for all of them.
    # With FUSED_INSERT the request's last program to finish then does mrv2's insert kernel's
    # work (spec 3.7).
    req = tl.program_id(0).to(tl.int64)
    span = tl.program_id(1)
    slot = tl.load(idx_mapping_ptr + req).to(tl.int64)
    start = tl.load(cu_num_logits_ptr + req).to(tl.int64)
    end = tl.load(cu_num_logits_ptr + req + 1).to(tl.int64)
    tau = tl.load(num_sampled_ptr + req)
    if FUSED_INSERT:
        tau = tau & 0xFFFF  # num_sampled holds tau in its low 16 bits; programs count above
    tau = tau.to(tl.int64)
    row = start + tau
    is_bonus = row == end - 1
    temperature = tl.load(temperature_ptr + slot)
    if FUSED_INSERT:
        # A greedy request's rejected slot already holds the argmax: only the bonus row is sampled
        sampling = (temperature != 0.0) | is_bonus
    else:
        if (temperature == 0.0) & (is_bonus == 0):
            return  # greedy already stored the argmax at the rejected slot
        sampling = True  # a Python constant: the block below is not a branch
    if sampling:
        # One program's partial: the Gumbel-max over its BLOCKS blocks of the resample row.
        out = req * resampled_stride + span
        rejected = tl.load(draft_sampled_ptr + row + 1, mask=row + 1 < end, other=0).to(tl.int64)
        plain = is_bonus | (rejected < 0)  # bonus row, or a placeholder never drawn: sample the target
        # Loaded whatever the row (in-bounds; unused for a plain row): one set-up for every block
        target_lse = tl.load(target_rejected_lse_ptr + req)
        draft_lse = tl.load(draft_rejected_lse_ptr + req)
        log_p_tau = 0.0
        if USE_BLOCK_VERIFICATION:
            log_p_tau = tl.load(cumulative_log_p_ptr + row - 1, mask=tau > 0, other=0.0)
        d_ptr = draft_logits_ptr + slot * draft_logits_stride_0 + tau * draft_logits_stride_1
        gseed = tl.randint(tl.load(seed_ptr + slot), tl.load(pos_ptr + row).to(tl.int32))

        # ---- BLOCKS blocks in turn, keeping the first maximum (so the partial is the one of a
        # single BLOCKS * BLOCK_V-wide block: insert's tie-break is unchanged)
        best_val = tl.full((), float("-inf"), tl.float32)
        best_idx = (span * BLOCKS * BLOCK_V).to(tl.int64)
        for i in range(BLOCKS):
            offs = (span * BLOCKS + i) * BLOCK_V + tl.arange(0, BLOCK_V)
            mask = offs < vocab_size
            x = _load_logits(target_logits_ptr + row * target_logits_stride + offs, mask, True)
            # ---- residual logits rho(x) in log space, exactly as mrv2 (spec 3.6)
            if plain:
                rho = x
            else:
                if HAS_DRAFT_LOGITS:
                    a = x - target_lse
                    if USE_BLOCK_VERIFICATION:
                        a += log_p_tau  # log p_tau (0 at tau = 0: the same sum as mrv2's)
                    g = tl.load(d_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32) / temperature
                    g = g - draft_lse
                    ratio = tl.exp(g - a)
                    rho = tl.where(ratio < 1.0, a + _log1m(ratio), float("-inf"))
                else:
                    rho = tl.where(offs == rejected, float("-inf"), x)
            # ---- Gumbel-max (target logits already carry temperature)
            if temperature != 0.0:
                rho = rho + _gumbel_noise(gseed, offs.to(tl.int32), FAST_LOG)
            rho = tl.where(mask, rho, float("-inf"))
            value, index = tl.max(rho, 0, return_indices=True, return_indices_tie_break_left=True)
            better = value > best_val
            best_idx = tl.where(better, (span * BLOCKS + i) * BLOCK_V + index.to(tl.int64), best_idx)
            best_val = tl.where(better, value, best_val)
        tl.store(resampled_local_max_ptr + out, best_val)
        tl.store(resampled_local_argmax_ptr + out, best_idx)
    if FUSED_INSERT:
        # ---- insert, by the last of the request's programs to count itself done: the barrier
        # puts every thread's partial stores before the (release) count; the one that sees
        # num_spans - 1 programs done before it (acquire) reads their partials past L1.
        tl.debug_barrier()
        done_before = tl.atomic_add(num_sampled_ptr + req, 1 << 16, sem="acq_rel") >> 16
        tl.debug_barrier()
        if done_before == num_spans - 1:
            if sampling:
                token = _resampled_token(
                    resampled_local_argmax_ptr,
                    resampled_local_max_ptr,
                    req * resampled_stride,
                    num_spans,
                    NUM_SPANS_P2,
                    ".cg",
                )
                tl.store(sampled_ptr + req * sampled_stride + tau, token)
            tl.store(num_sampled_ptr + req, (tau + 1).to(tl.int32))


# ---------------------------------------------------------------------------------------------
# Launcher
# ---------------------------------------------------------------------------------------------


# mrv2.Pipeline's parameters, to bind fast.Pipeline's arguments by name (computed once: a
# Pipeline is built on every call).
_PIPELINE_SIGNATURE = inspect.signature(mrv2.Pipeline)


class Pipeline(mrv2.Pipeline):
    """:class:`specsample.kernels.mrv2.Pipeline` with the fast stats and resample kernels.

    Same arguments (``placeholder_fix`` is always on) plus ``config`` (default:
    :func:`default_config` for the batch's R). ``use_fp64`` noise keeps mrv2's fp64 resample
    kernel.
    """

    def __init__(self, *args, config: Config | None = None, **kwargs) -> None:
        arguments = _PIPELINE_SIGNATURE.bind_partial(*args, **kwargs).arguments
        arguments["placeholder_fix"] = True
        use_fp64 = arguments.get("use_fp64", False)
        c = self.config = config or default_config(arguments["idx_mapping"].shape[0])
        super().__init__(
            **arguments,
            vocab_block_size=c.stats_block,
            block_warps=c.stats_warps,
            # (one partial per program: resample_loop blocks; fp64 noise keeps mrv2's kernel and block)
            resample_block_size=mrv2.RESAMPLE_BLOCK_SIZE if use_fp64 else c.resample_block * c.resample_loop,
        )
        if c.fused_insert and not use_fp64 and (self.num_resample_blocks >= 1 << 15 or self.k >= 1 << 16):
            # the fused insert counts programs in num_sampled's high 16 bits, tau in the low ones
            raise ValueError(
                f"fast: {self.num_resample_blocks} resample programs per request or K={self.k} "
                "is too many; use a wider Config.resample_block"
            )
        self.fast_log = self.target_logits.device.type == "cuda" and not _interpreted()
        self.k_p2 = triton.next_power_of_2(max(self.k, 1))

    def stages(self) -> list[tuple[str, Callable[[], None]]]:
        """mrv2's launches; with ``Config.fused_insert`` less insert, whose work the resample
        kernel's last program per request does (fp64 noise keeps mrv2's resample and insert)."""
        stages = super().stages()
        if self.use_fp64 or not self.config.fused_insert:
            return stages
        return [s for s in stages if s[0] != "insert"]

    def _row_tiles(self, groups: int) -> dict:
        # what the stats and residual-mass kernels take alike: each program one [rows, block] tile
        # of one request, groups of them per request
        c = self.config
        return dict(
            **self._logits(),
            draft_sampled_ptr=self.draft_sampled,
            **self._requests(),
            **self._partials(),
            vocab_size=self.vocab_size,
            K_P2=self.k_p2,
            ROWS=c.stats_rows,
            GROUPS=groups,
            BLOCK_V=c.stats_block,
            num_warps=c.stats_warps,
        )

    # ---- 1. block stats of the rows something reads: (R * groups, nb) programs
    def _stats(self) -> None:
        groups = triton.cdiv(self.k, self.config.stats_rows)
        if groups == 0:
            return  # K = 0: no draft rows
        _stats_kernel[(self.num_reqs * groups, self.num_blocks)](
            **self._row_tiles(groups),
            target_local_argmax_ptr=self.target_local_argmax,
            HAS_DRAFT_LOGITS=self.has_draft_logits,
            SPECULATIVE_LOAD=self.config.speculative_load,
        )

    # ---- 3. residual mass of the rows the rejection kernel reads: rows 1..K-1
    def _residual_mass(self) -> None:
        groups = triton.cdiv(self.k - 1, self.config.stats_rows)
        if groups <= 0:
            return  # K <= 1: the only draft row is row 0, whose residual is never read
        _residual_mass_kernel[(self.num_reqs * groups, self.num_blocks)](
            **self._row_tiles(groups),
            cumulative_log_p_ptr=self.cumulative_log_p,
            num_blocks=self.num_blocks,
            local_residual_mass_ptr=self.local_residual_mass,
            NUM_BLOCKS_P2=self.num_blocks_p2,
        )

    # ---- 5. resample with the fast logs, then insert: num_sampled = tau + 1
    def _resample(self) -> None:
        if self.use_fp64:
            return super()._resample()
        c = self.config
        _resample_kernel[(self.num_reqs, self.num_resample_blocks)](
            **self._resample_inputs(),
            sampled_ptr=self.sampled,
            sampled_stride=self.sampled.stride(0),
            num_spans=self.num_resample_blocks,
            FAST_LOG=self.fast_log,
            BLOCK_V=c.resample_block,
            BLOCKS=c.resample_loop,
            FUSED_INSERT=c.fused_insert,
            NUM_SPANS_P2=triton.next_power_of_2(self.num_resample_blocks),
            num_warps=c.resample_warps,
        )


def launch(*args, config: Config | None = None, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """Allocate and run one fast :class:`Pipeline` (the arguments of ``mrv2.launch``)."""
    return Pipeline(*args, config=config, **kwargs).run()
