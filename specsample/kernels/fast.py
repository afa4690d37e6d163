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
3. **Block sizes per batch size** (``Config``, :func:`default_config`), chosen by measurement
   on the H200 (``scripts/tune_fast.py``): 4096-wide stats and 2048-wide resample blocks from
   32 requests up, mrv2's 8192 and 1024 below, where one partial wave of programs runs and
   latency, not bandwidth, sets the time. (A grid of one program per request and block,
   looping over the request's rows, was measured too: faster at phi=1, up to 50% slower at
   phi=0; not kept, see the notes.)

Cumulative log p, residual mass, rejection and insert are ``mrv2``'s kernels, unchanged: the
partial statistics they read are laid out the same way ([N, nb] per stats block).
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
# sizes keep every kernel as parallel as mrv2's.
SMALL_BATCH_CONFIG = Config(stats_block=8192, stats_warps=8, resample_block=1024, resample_warps=4)
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
    row = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    # ---- is this row read? Greedy reads row j while d_1..d_j are real; the other modes while
    # d_1..d_{j+1} are. Those drafts sit at rows row+1-i for i = 0..j (i = 0 only when not
    # greedy). They are loaded as scalars together with the row's local position and slot
    # (independent loads, no cross-warp reduction); a placeholder among d_1..d_j skips the row
    # in every mode, before the temperature is even loaded, and only the row's own draft d_{j+1}
    # waits for it. Rows outside the request are loaded but never tested.
    local_pos = tl.load(expanded_local_pos_ptr + row)
    slot = tl.load(expanded_idx_mapping_ptr + row).to(tl.int64)
    own = tl.load(draft_sampled_ptr + row + 1, mask=row + 1 < num_logits, other=0)
    earlier = 0  # placeholders among d_1..d_j, at rows row+1-i for 1 <= i <= j
    for i in tl.static_range(1, K_P2):
        d = tl.load(draft_sampled_ptr + row + 1 - i, mask=(i < num_speculative_steps) & (row + 1 - i >= 0), other=0)
        earlier += ((d < 0) & (i <= local_pos)).to(tl.int32)
    if (local_pos >= num_speculative_steps) | (earlier > 0):
        return  # bonus rows need no stats; nothing reads a row after a placeholder
    temperature = tl.load(temperature_ptr + slot)
    if (temperature != 0.0) & (own < 0):
        return  # a sampling row at a placeholder is resampled from the plain target

    # ---- one block of the target row; NaN is treated as -inf throughout (as mrv2)
    offs = block * BLOCK_V + tl.arange(0, BLOCK_V)
    mask = offs < vocab_size
    x = tl.load(target_logits_ptr + row * target_logits_stride + offs, mask=mask, other=float("-inf"))
    x = x.to(tl.float32)
    x = tl.where(x != x, float("-inf"), x)
    block_max = tl.max(x, 0)
    out = row * local_stride + block
    tl.store(target_local_max_ptr + out, block_max)

    if temperature == 0.0:
        local_argmax = tl.argmax(x, 0, tie_break_left=True)
        tl.store(target_local_argmax_ptr + out, block * BLOCK_V + local_argmax.to(tl.int64))
    else:
        e = tl.where(x == float("-inf"), 0.0, tl.exp(x - block_max))
        tl.store(target_local_sumexp_ptr + out, tl.sum(e, 0))
        if HAS_DRAFT_LOGITS:
            d_ptr = draft_logits_ptr + slot * draft_logits_stride_0 + local_pos.to(tl.int64) * draft_logits_stride_1
            y = tl.load(d_ptr + offs, mask=mask, other=float("-inf")).to(tl.float32) / temperature
            y = tl.where(y != y, float("-inf"), y)
            d_max = tl.max(y, 0)
            ey = tl.where(y == float("-inf"), 0.0, tl.exp(y - d_max))
            tl.store(draft_local_max_ptr + out, d_max)
            tl.store(draft_local_sumexp_ptr + out, tl.sum(ey, 0))


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


# mrv2.Pipeline's parameters, to bind fast.Pipeline's arguments by name (computed once: a
# Pipeline is built on every call).
_PIPELINE_SIGNATURE = inspect.signature(mrv2.Pipeline)


class Pipeline(mrv2.Pipeline):
    """:class:`specsample.kernels.mrv2.Pipeline` with the fast stats and resample kernels.

    Same arguments (``placeholder_fix`` is always on) plus ``config`` (default:
    :func:`default_config` for the batch's R). ``use_fp64`` noise keeps mrv2's fp64 resample
    kernel.
    """

    planted_knob = False  # planted.VARIANTS: the test-only knob slows mrv2's pipelines only

    def __init__(self, *args, config: Config | None = None, **kwargs) -> None:
        arguments = _PIPELINE_SIGNATURE.bind_partial(*args, **kwargs).arguments
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
