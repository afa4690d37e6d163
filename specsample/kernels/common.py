"""Device helpers that more than one of our samplers' kernels use: ``mrv2``, ``fast`` and ``express``.

The acceptance uniform (spec 3.8), a block of logits loaded NaN-safe, ``log(1 - u)``, the
Gumbel noise of the resample step (spec 3.8), the argmax over per-block partials, the rows of a
request that a pass reads, and programmatic dependent launch. Every helper is inlined into the
kernels that call it, so where it lives changes no kernel's code.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import triton
import triton.language as tl
from triton.language.extra import libdevice

if TYPE_CHECKING:
    import torch

# Smallest uniform: tl.rand can return exactly 0, and log(0) would make the standard test fail
# open (and the Gumbel noise infinite); the clamp keeps log u finite (spec 3.8). The constant is
# Triton's own scale, fp32(4.6566127342e-10) = 2**-31 * (1 - 2**-24), the smallest positive
# value tl.rand returns (as specsample.reference.philox.RAND32_MIN).
MIN_UNIFORM = tl.constexpr(4.6566127342e-10)


@triton.jit
def _uniform(seed, position):
    # Acceptance uniform u = rand32(seed, pos), clamped away from 0 (spec 3.8).
    u = tl.rand(seed, position.to(tl.int32))
    return tl.maximum(u, MIN_UNIFORM)


@triton.jit
def _log1m(u):
    # log(1 - u), accurate near u = 0 where fp32 rounds 1 - u to 1 (a log1p(-u) that also runs
    # under the interpreter): series below 1e-3, whose truncation error is below u**4 / 4.
    return tl.where(u < 1e-3, -u * (1.0 + u * (0.5 + u * (1.0 / 3.0))), tl.log(1.0 - u))


@triton.jit
def _log1m_of(u, LIBDEVICE_LOG1P: tl.constexpr):
    # log(1 - u): libdevice's log1p(-u) on the GPU (as vLLM's kernels take it), else the series
    # of _log1m (libdevice does not run under the interpreter).
    if LIBDEVICE_LOG1P:
        return libdevice.log1p(-u)
    else:
        return _log1m(u)


@triton.jit
def _load_logits(
    ptrs,  # [BLOCK_V] (or any block shape) pointers into one logits row
    mask,  # same shape as ptrs
    NAN_GUARD: tl.constexpr,
):
    # One block of logits in fp32, -inf past the vocabulary; NaN as -inf when NAN_GUARD.
    x = tl.load(ptrs, mask=mask, other=float("-inf")).to(tl.float32)
    if NAN_GUARD:
        x = tl.where(x != x, float("-inf"), x)
    return x


@triton.jit
def _log_exponential(
    seed,
    offset,  # [BLOCK_V] int32 Philox counters (the vocabulary entries)
    FAST_LOG: tl.constexpr,
    LIBDEVICE_LOG1P: tl.constexpr,
):
    # log E of the Exp(1) variate E = -log(1 - u), u = max(rand(seed, offset), MIN_UNIFORM);
    # -log E is the "flipped" Gumbel noise of the resample, which keeps the winning tail at
    # u -> 0, where fp32 has resolution. FAST_LOG: log(1 - u) with _log1m's series near 0 and
    # lg2.approx elsewhere, then lg2.approx again (fast's GPU path); else _log1m_of.
    u = tl.maximum(tl.rand(seed, offset), MIN_UNIFORM)
    if FAST_LOG:
        one_minus = tl.where(u < 1e-3, -u * (1.0 + u * (0.5 + u * (1.0 / 3.0))), libdevice.fast_logf(1.0 - u))
        return libdevice.fast_logf(-one_minus)
    else:
        return tl.log(-_log1m_of(u, LIBDEVICE_LOG1P))


@triton.jit
def _gumbel_noise(
    seed,
    offset,  # [BLOCK_V] int32 Philox counters (the vocabulary entries)
    FAST_LOG: tl.constexpr,
):
    # The flipped Gumbel noise -log E of _log_exponential.
    return -_log_exponential(seed, offset, FAST_LOG, False)


@triton.jit
def _resampled_token(
    # [., nb] per-block first argmax and max of one row, at ``offset``
    local_argmax_ptr,
    local_max_ptr,
    offset,
    num_blocks,
    NUM_BLOCKS_P2: tl.constexpr,
    CACHE: tl.constexpr,
):
    # The token of the first block whose maximum is largest; NaN maxima count as -inf, otherwise
    # argmax may pick a padded block (spec 3.7, 6.8). CACHE ".cg" reads partials that other
    # programs of the same kernel wrote past L1.
    offs = tl.arange(0, NUM_BLOCKS_P2)
    m = tl.load(local_max_ptr + offset + offs, mask=offs < num_blocks, other=float("-inf"), cache_modifier=CACHE)
    m = tl.where(m != m, float("-inf"), m)
    best = tl.argmax(m, 0, tie_break_left=True)
    return tl.load(local_argmax_ptr + offset + best, cache_modifier=CACHE)


@triton.jit
def _global_argmax(
    # [N, nb] per-block first argmax and max
    local_argmax_ptr,
    local_max_ptr,
    row,
    local_stride,
    num_blocks,
    NUM_BLOCKS_P2: tl.constexpr,
):
    # The first argmax of row ``row`` of the target logits, from its stats partials (spec 3.1).
    return _resampled_token(local_argmax_ptr, local_max_ptr, row * local_stride, num_blocks, NUM_BLOCKS_P2, "")


@triton.jit
def _request_rows(
    cu_num_logits_ptr,  # [R + 1]
    draft_sampled_ptr,  # [N]
    req,
    K_P2: tl.constexpr,
):
    # A request's first row, its number of drafts n and the local position of its first
    # placeholder f: row start + j tests draft d_{j+1} = draft_sampled[start + 1 + j], so f is the
    # first j with d_{j+1} = -1 (n if none). The drafts load as independent scalars, last first
    # so that the first placeholder wins: no cross-warp reduction on the way to the logits load.
    start = tl.load(cu_num_logits_ptr + req).to(tl.int64)
    num_drafts = (tl.load(cu_num_logits_ptr + req + 1) - 1).to(tl.int64) - start
    first = num_drafts
    for i in tl.static_range(K_P2 - 1, -1, -1):
        d = tl.load(draft_sampled_ptr + start + 1 + i, mask=i < num_drafts, other=0)
        first = tl.where(d < 0, i, first)
    return start, num_drafts, first


@triton.jit
def _launch_dependents(PDL: tl.constexpr):
    # Programmatic dependent launch: the call's next kernel may start its programs once every
    # program of this one has passed here or exited (it waits in _wait_for_prior before reading
    # our output). Only programs with work call it (an exit counts as the trigger): first in
    # every program, exit-only ones included, it made express's large stats kernel at phi = 1 (R = 128,
    # standard: all of its 19k programs exit at once) 24.9 us instead of 13.7 on an H200.
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def _wait_for_prior(PDL: tl.constexpr):
    # Wait for the call's previous kernel to finish and its stores to be visible. Every program of
    # a dependently launched kernel passes here before it reads anything a kernel of the call
    # wrote, before any store, and before it exits (an early exit included): so a kernel finishes
    # only after the one before it, and the next kernel's wait covers every earlier kernel too.
    # Loads before it read the call's inputs only (logits, tokens, positions, request metadata).
    if PDL:
        tl.extra.cuda.gdc_wait()


class PipelineLaunch:
    """What mrv2's and express's ``Pipeline`` share: :meth:`run` (every stage in order) and the
    launch arguments that every kernel of both takes alike. A subclass sets ``target_logits``,
    ``draft_arg``, ``draft_strides``, the ``*_local_max`` / ``*_local_sumexp`` partials,
    ``num_blocks``, ``sampled`` and ``num_sampled``, and defines ``stages()``."""

    def run(self):
        for _, stage in self.stages():
            stage()
        return self.sampled, self.num_sampled

    def _take_inputs(
        self,
        target_logits: torch.Tensor,  # [N, V]
        draft_logits: torch.Tensor | None,  # [max_num_reqs, K, V_d]
        draft_sampled: torch.Tensor,  # [N]
        cu_num_logits: torch.Tensor,  # [R + 1]
        pos: torch.Tensor,  # [N]
        idx_mapping: torch.Tensor,  # [R]
        temperature: torch.Tensor,  # [max_num_reqs]
        seed: torch.Tensor,  # [max_num_reqs]
        num_speculative_steps: int,
        synthetic_conditional_rates: torch.Tensor | None,  # [K]
        use_block_verification: bool,
    ) -> None:
        """Keep the call's inputs that every kernel reads alike, and what their shapes give: N,
        R, V (the narrower of the target's and the draft's), whether there are draft logits and
        whether the rates are synthetic."""
        self.target_logits, self.draft_logits, self.draft_sampled = target_logits, draft_logits, draft_sampled
        self.cu_num_logits, self.pos, self.idx_mapping = cu_num_logits, pos, idx_mapping
        self.temperature, self.seed, self.k = temperature, seed, num_speculative_steps
        self.use_block_verification = use_block_verification
        self.num_logits, vocab_size = target_logits.shape
        self.num_reqs = idx_mapping.shape[0]
        self.has_draft_logits = draft_logits is not None
        if self.has_draft_logits:
            vocab_size = min(vocab_size, draft_logits.shape[-1])
        self.vocab_size = vocab_size
        self.synthetic = synthetic_conditional_rates is not None

    def _logits(self) -> dict:
        # [N, V] target and [max_num_reqs, K, V_d] draft logits, as every kernel takes them
        return dict(
            target_logits_ptr=self.target_logits,
            target_logits_stride=self.target_logits.stride(0),
            draft_logits_ptr=self.draft_arg,
            draft_logits_stride_0=self.draft_strides[0],
            draft_logits_stride_1=self.draft_strides[1],
        )

    def _partials(self) -> dict:
        # the [N, nb] stats partials (target and draft block max and sum-exp)
        return dict(
            target_local_max_ptr=self.target_local_max,
            target_local_sumexp_ptr=self.target_local_sumexp,
            draft_local_max_ptr=self.draft_local_max,
            draft_local_sumexp_ptr=self.draft_local_sumexp,
            local_stride=self.num_blocks,
        )
