"""mrv2's launcher: :class:`Pipeline` allocates one call's scratch and outputs and launches the
six kernels of :mod:`.stats`, :mod:`.rejection` and :mod:`.resample` in order."""

from __future__ import annotations

import os
from collections.abc import Callable

import torch
import triton

from ..common import PipelineLaunch
from .rejection import _rejection_kernel
from .resample import _insert_kernel, _resample_kernel
from .stats import _cumulative_log_p_kernel, _local_stats_kernel, _residual_mass_kernel

# Vocab block of the stats and residual-mass kernels: one program reads 8192 logits.
VOCAB_BLOCK_SIZE = 8192
# Vocab block of the resample kernel: smaller, so R*rb programs fill the GPU at small R.
RESAMPLE_BLOCK_SIZE = 1024


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
    ``common._log1m`` stands in under the interpreter); ``nan_guard=False`` drops the one deliberate
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
        self._take_inputs(
            target_logits,
            draft_logits,
            draft_sampled,
            cu_num_logits,
            pos,
            idx_mapping,
            temperature,
            seed,
            num_speculative_steps,
            synthetic_conditional_rates,
            use_block_verification,
        )
        self.expanded_idx_mapping, self.expanded_local_pos = expanded_idx_mapping, expanded_local_pos
        self.use_fp64, self.placeholder_fix = use_fp64, placeholder_fix
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
        self.num_blocks = triton.cdiv(self.vocab_size, vocab_block_size)
        self.num_blocks_p2 = triton.next_power_of_2(self.num_blocks)
        self.num_resample_blocks = triton.cdiv(self.vocab_size, resample_block_size)
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

    # ---- launch arguments that several kernels take alike (bound by name)
    def _requests(self) -> dict:
        # [R + 1] request boundaries, [R] slots, [max_num_reqs] temperatures
        return dict(
            cu_num_logits_ptr=self.cu_num_logits, idx_mapping_ptr=self.idx_mapping, temperature_ptr=self.temperature
        )

    def _outputs(self) -> dict:
        # [R, K + 1] tokens and [R] num_sampled (tau between the rejection and the insert)
        return dict(sampled_ptr=self.sampled, sampled_stride=self.sampled.stride(0), num_sampled_ptr=self.num_sampled)

    def _resampled(self) -> dict:
        # the [R, rb] resample partials (per-block max and its first argmax)
        return dict(
            resampled_local_argmax_ptr=self.resampled_local_argmax,
            resampled_local_max_ptr=self.resampled_local_max,
            resampled_stride=self.num_resample_blocks,
        )

    def _resample_inputs(self) -> dict:
        # what every resample kernel (mrv2's, fast's) reads and writes, less its own tunables
        return dict(
            **self._resampled(),
            num_sampled_ptr=self.num_sampled,
            target_rejected_lse_ptr=self.target_rejected_lse,
            draft_rejected_lse_ptr=self.draft_rejected_lse,
            **self._logits(),
            draft_sampled_ptr=self.draft_sampled,
            pos_ptr=self.pos,
            cumulative_log_p_ptr=self.cumulative_log_p,
            **self._requests(),
            seed_ptr=self.seed,
            vocab_size=self.vocab_size,
            HAS_DRAFT_LOGITS=self.has_draft_logits,
            USE_BLOCK_VERIFICATION=self.use_block_verification,
        )

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
            **self._requests(),
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
            **self._outputs(),
            target_rejected_lse_ptr=self.target_rejected_lse,
            draft_rejected_lse_ptr=self.draft_rejected_lse,
            **self._logits(),
            draft_sampled_ptr=self.draft_sampled,
            pos_ptr=self.pos,
            **self._requests(),
            seed_ptr=self.seed,
            target_local_argmax_ptr=self.target_local_argmax,
            **self._partials(),
            local_residual_mass_ptr=self.local_residual_mass,
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
            **self._resample_inputs(),
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
            **self._outputs(),
            **self._resampled(),
            num_resample_blocks=self.num_resample_blocks,
            **self._requests(),
            NUM_RESAMPLE_BLOCKS_P2=triton.next_power_of_2(self.num_resample_blocks),
            num_warps=1,
        )


def launch(*args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """Allocate and run one :class:`Pipeline` (same arguments)."""
    return Pipeline(*args, **kwargs).run()
