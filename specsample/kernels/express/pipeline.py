"""``express``'s launcher: :class:`Config`, the named configurations, and :class:`Pipeline`."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import triton

from ..common import PipelineLaunch
from .streams import SAMPLE_BLOCK
from .stats import _stats_kernel
from .rejection import _cumulative_log_p_kernel, _rejection_kernel, _residual_mass_kernel
from .resample import _resample_kernel, _resample_persistent_kernel
from .insert import _insert_kernel

# Warps of the one-program-per-request kernels (rejection, cum_log_p): their [K_P2, nb] fp64 LSE
# tiles spread over 128 threads. Not a Config field: it sets the reduction tree of those LSEs
# (fp64 sums, so ulps at most), and a configuration must not reach a draw even by an ulp.
REQUEST_WARPS = 4
# Geometry that no configuration varies: residual-mass programs of 2 sampling blocks (fast's
# 4096 entries), resample programs of 1 (fast's 2048), and 4 warps for the residual-mass,
# resample and insert programs (the insert, or the resample kernel's last program, picks within
# one block).
RESIDUAL_BLOCKS = 2
RESAMPLE_BLOCKS = 1
TILE_WARPS = 4


@dataclass(frozen=True)
class Config:
    """Launch geometry; none of it changes a draw (the sampling blocks are :data:`SAMPLE_BLOCK`)."""

    stats_blocks: int = 2  # sampling blocks per stats program (4096 entries: fast's large-batch stats)
    stats_warps: int = 4
    fused_insert: bool = False  # the resample kernel's last program per request inserts (fast's scheme)
    # With one-hot drafts, the resample pass as at most this many programs an SM (fewer if fewer
    # fit at once), looping over the tiles of the requests whose plan needs it (0: one program a
    # tile, the (R, nb / RESAMPLE_BLOCKS) grid). Used where the grid would be larger and R <=
    # PERSISTENT_MAX_REQS; not with fused_insert (which counts the programs of a request). With
    # draft logits always the grid: every rejected request's residual row is read there, and the
    # persistent pass read rows 29-32% slower than the grid on an H200.
    resample_programs: int = 0

    def __post_init__(self) -> None:
        if self.stats_blocks not in (1, 2, 4, 8):
            raise ValueError(f"stats_blocks: expected 1, 2, 4 or 8, got {self.stats_blocks}")
        if self.stats_warps not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"stats_warps: expected a power of two in [1, 32], got {self.stats_warps}")
        if not 0 <= self.resample_programs <= 32:
            raise ValueError(f"resample_programs: expected 0 to 32 programs an SM, got {self.resample_programs}")
        if self.resample_programs and self.fused_insert:
            raise ValueError("resample_programs: the persistent resample pass cannot fuse the insert (fused_insert)")


# One-hot drafts: the persistent resample pass, with as many programs as fit (16 an SM).
LARGE_BATCH_CONFIG = Config(resample_programs=32)
# Below SMALL_BATCH_BELOW requests the call is one partial wave of programs and its time is the
# chain of dependent steps, not bandwidth: stats programs of one sampling block (the shortest
# per-program chain, twice the large configuration's programs), and the insert inside the
# resample kernel (one launch and one wait fewer; from R=32 up the count costs more).
SMALL_BATCH_CONFIG = Config(stats_blocks=1, fused_insert=True)
SMALL_BATCH_BELOW = 32
# The persistent resample pass keeps the batch's plans as [R_P2] vectors: up to this many requests.
PERSISTENT_MAX_REQS = 1024
# Multiprocessors assumed on a CPU (Triton's interpreter), so that the tests loop over tiles.
CPU_MULTIPROCESSORS = 2
# ptxas's register cap for the persistent resample kernel (one-hot drafts): the grid kernel's
# registers at 4 warps (sm_90), so that as many of its programs fit an SM (16), with no spill;
# uncapped it takes 40 (12 an SM).
PERSISTENT_RESAMPLE_REGISTERS = 32
# The configurations by name: what `specsample tune` builds candidates on and memcheck forces.
NAMED_CONFIGS = {"large": LARGE_BATCH_CONFIG, "small": SMALL_BATCH_CONFIG}


def _multiprocessors(device: torch.device) -> int:
    """The GPU's multiprocessors (:data:`CPU_MULTIPROCESSORS` on a CPU)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return CPU_MULTIPROCESSORS


def _programs_per_multiprocessor(kernel, num_warps: int, device: torch.device) -> int:
    """How many programs of a compiled kernel fit on one multiprocessor at once: its registers
    (allocated per warp in units of 256), threads, shared memory, and the 32-block limit."""
    kernel._init_handles()
    props = torch.cuda.get_device_properties(device)
    threads = num_warps * 32
    warp_registers = -(-kernel.n_regs * 32 // 256) * 256
    fit = min(
        32,
        getattr(props, "max_threads_per_multi_processor", 2048) // threads,
        getattr(props, "regs_per_multiprocessor", 65536) // (warp_registers * num_warps),
    )
    shared = kernel.metadata.shared
    if shared:
        fit = min(fit, getattr(props, "shared_memory_per_multiprocessor", 228 * 1024) // shared)
    return max(fit, 1)


def supports_dependent_launch(device: torch.device) -> bool:
    """Programmatic dependent launch: an sm_90 (Hopper) GPU or later; not on CPU (the interpreter)."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


def default_config(num_reqs: int) -> Config:
    """The configuration used when none is given (R is known on the host: no device sync):
    ``small`` below :data:`SMALL_BATCH_BELOW` requests, ``large`` from there up."""
    if num_reqs >= SMALL_BATCH_BELOW:
        return LARGE_BATCH_CONFIG
    return SMALL_BATCH_CONFIG


class Pipeline(PipelineLaunch):
    """One ``express`` call, split into its kernel launches (``mrv2.Pipeline``'s interface).

    ``__init__`` allocates the outputs and every scratch buffer; :meth:`stages` lists the
    launches in order as ``(name, zero-argument callable)`` so that each kernel can be timed on
    its own (``specsample.measure.stage_calls``: every stage but the last is idempotent, and the
    last -- ``insert``, or ``resample`` with ``Config.fused_insert`` -- turns ``num_sampled`` from
    tau into tau + 1); :meth:`run` launches them all.
    Inputs must already have been checked by :mod:`specsample.validation`. ``config`` changes
    launch geometry only, never a draw (default: :func:`default_config` for the batch's R).
    ``skip_masked_vocab_blocks`` (vLLM's masked-block skip, a speed path): sampling blocks of
    the target logits that are ``-inf`` throughout do no arithmetic, and where the stats kernel
    has read the row (a draft-residual row, the residual-mass rows) their logits are not read at
    all; the same draws as without it.
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
        *,
        config: Config | None = None,
        skip_masked_vocab_blocks: bool = False,
    ) -> None:
        del expanded_idx_mapping, expanded_local_pos, use_fp64  # implied by cu_num_logits; no effect
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
        self.skip_masked = bool(skip_masked_vocab_blocks)
        device = target_logits.device
        # Programmatic dependent launch needs sm_90 (Hopper) or later; on CPU (Triton's
        # interpreter) and older GPUs the kernels run in plain stream order, the same draws.
        self.dependent_launch = supports_dependent_launch(device)
        self.config = config or default_config(self.num_reqs)
        if self.config.fused_insert and (triton.cdiv(self.vocab_size, SAMPLE_BLOCK) >= 1 << 15 or self.k >= 1 << 15):
            # the fused insert counts programs in num_sampled's high 16 bits, tau in the low ones
            raise ValueError(f"express: V={self.vocab_size} or K={self.k} is too large for Config.fused_insert")

        self.num_blocks = triton.cdiv(self.vocab_size, SAMPLE_BLOCK)
        self.nb_p2 = triton.next_power_of_2(self.num_blocks)
        self.k_p2 = triton.next_power_of_2(max(self.k, 1))
        self.stats_tiles = triton.cdiv(self.num_blocks, self.config.stats_blocks)
        self.resample_tiles = triton.cdiv(self.num_blocks, RESAMPLE_BLOCKS)
        n, nb, r = self.num_logits, self.num_blocks, self.num_reqs
        f32 = dict(dtype=torch.float32, device=device)
        f64 = dict(dtype=torch.float64, device=device)
        i64 = dict(dtype=torch.int64, device=device)

        # ---- [N, nb] partials per sampling block
        self.target_local_argmax = torch.empty(n, nb, **i64)
        self.target_local_max = torch.empty(n, nb, **f32)
        self.target_local_sumexp = torch.empty(n, nb, **f64)
        if self.has_draft_logits:
            self.draft_local_max = torch.empty(n, nb, **f32)
            self.draft_local_sumexp = torch.empty(n, nb, **f64)
            self.draft_strides = (draft_logits.stride(0), draft_logits.stride(1))
            self.draft_arg = draft_logits
        else:
            # An absent tensor gets zero strides; HAS_DRAFT_LOGITS=False keeps it unread.
            self.draft_local_max, self.draft_local_sumexp = self.target_local_max, self.target_local_sumexp
            self.draft_strides = (0, 0)
            self.draft_arg = target_logits
        self.cumulative_log_p = torch.empty(n if use_block_verification else 1, **f64)
        residual = use_block_verification and self.has_draft_logits
        self.row_lse = torch.empty(n if residual else 1, 2, **f64)  # each real row's (L_t, L_d)
        self.local_residual_mass = torch.empty(n, nb, **f64) if residual else self.target_local_sumexp
        self.rates = synthetic_conditional_rates if self.synthetic else temperature

        # ---- [R] plans, [R, nb] resample partials
        self.plan = torch.empty(r, dtype=torch.int32, device=device)
        self.plan_block = torch.empty(r, dtype=torch.int32, device=device)  # level-1 block, where drawn early
        self.plan_lse = torch.empty(r, 2, **f64)  # (L_t, L_d) of a draft-residual row
        self.plan_scale = torch.empty(r, **f32)  # p_tau of a draft-residual row
        self.resampled_mass = torch.empty(r, nb, **f64)  # log-masses, or block maxima (greedy bonus row)
        self.resampled_argmax = torch.empty(r, nb, **i64)

        # ---- outputs
        self.sampled = torch.empty(r, self.k + 1, **i64)
        self.num_sampled = torch.empty(r, dtype=torch.int32, device=device)

        # The resample pass: persistent (this many programs) with one-hot drafts where the (R,
        # tiles) grid would be larger than the programs that fit on the GPU at once, else the grid (0).
        self.resample_persistent_programs = self._persistent_resample_programs()

    def _persistent_resample_programs(self) -> int:
        """``Config.resample_programs`` programs an SM (fewer on a GPU where fewer fit at once, by
        the compiled kernel's registers and shared memory), times the SMs; 0 (the grid) where
        that is not fewer than the grid's programs, with draft logits, or past
        :data:`PERSISTENT_MAX_REQS` requests."""
        c = self.config
        if not c.resample_programs or self.has_draft_logits or self.num_reqs > PERSISTENT_MAX_REQS:
            return 0
        device = self.target_logits.device
        per_sm = c.resample_programs
        if device.type == "cuda":
            compiled = _resample_persistent_kernel.warmup(**self._resample_persistent_args(), grid=(1,))
            per_sm = min(per_sm, _programs_per_multiprocessor(compiled, TILE_WARPS, device))
        programs = per_sm * _multiprocessors(device)
        return programs if programs < self.num_reqs * self.resample_tiles else 0

    def stages(self) -> list[tuple[str, Callable[[], None]]]:
        """The kernel launches of one call, in order (names from ``specsample.schema.STAGES``)."""
        if self.num_reqs == 0:
            return []
        stages = [("stats", self._stats)]
        if self.use_block_verification:
            stages.append(("cum_log_p", self._cumulative_log_p))
            if self.has_draft_logits and self.k > 1:
                stages.append(("residual_mass", self._residual_mass))
        stages += [("rejection", self._rejection), ("resample", self._resample)]
        if not self.config.fused_insert:
            stages.append(("insert", self._insert))
        return stages

    def _partials(self) -> dict:
        # express's kernels also take the number of blocks a row's partials span
        return dict(super()._partials(), num_blocks=self.num_blocks)

    def _outputs(self) -> dict:
        return dict(
            sampled_ptr=self.sampled,
            sampled_stride=self.sampled.stride(0),
            num_sampled_ptr=self.num_sampled,
            plan_ptr=self.plan,
            plan_block_ptr=self.plan_block,
            plan_lse_ptr=self.plan_lse,
            plan_scale_ptr=self.plan_scale,
        )

    def _rows(self) -> dict:
        return dict(
            draft_sampled_ptr=self.draft_sampled,
            cu_num_logits_ptr=self.cu_num_logits,
            idx_mapping_ptr=self.idx_mapping,
            temperature_ptr=self.temperature,
        )

    def _request(self) -> dict:
        return dict(**self._rows(), pos_ptr=self.pos, seed_ptr=self.seed)

    def _resampled(self) -> dict:
        return dict(
            resampled_mass_ptr=self.resampled_mass,
            resampled_argmax_ptr=self.resampled_argmax,
            resampled_stride=self.num_blocks,
            num_blocks=self.num_blocks,
        )

    def _launch(self, num_warps: int) -> dict:
        # every kernel after stats is launched dependently where the device allows it
        return dict(PDL=self.dependent_launch, num_warps=num_warps, launch_pdl=self.dependent_launch)

    # ---- 1. block stats of the rows something reads: (R * K, nb / stats_blocks) programs
    def _stats(self) -> None:
        _stats_kernel[(self.num_reqs * self.k, self.stats_tiles)](**self._stats_args(), GROUPS=self.k)

    def _stats_args(self) -> dict:
        c = self.config
        return dict(
            **self._logits(),
            **self._rows(),
            target_local_argmax_ptr=self.target_local_argmax,
            **self._partials(),
            vocab_size=self.vocab_size,
            HAS_DRAFT_LOGITS=self.has_draft_logits,
            SKIP_MASKED=self.skip_masked,
            K_P2=self.k_p2,
            SUB=c.stats_blocks,
            BLOCK=SAMPLE_BLOCK,
            PDL=self.dependent_launch,
            num_warps=c.stats_warps,
        )

    # ---- 2. prefix joint ratios in fp64, and each real row's LSEs (block verification)
    def _cumulative_log_p(self) -> None:
        _cumulative_log_p_kernel[(self.num_reqs,)](
            **self._logits(),
            **self._rows(),
            **self._partials(),
            cumulative_log_p_ptr=self.cumulative_log_p,
            row_lse_ptr=self.row_lse,
            HAS_DRAFT_LOGITS=self.has_draft_logits,
            K_P2=self.k_p2,
            NB_P2=self.nb_p2,
            **self._launch(REQUEST_WARPS),
        )

    # ---- 3. residual masses of rows 1..K-1 (block verification, draft logits)
    def _residual_mass(self) -> None:
        _residual_mass_kernel[(self.num_reqs * (self.k - 1), triton.cdiv(self.num_blocks, RESIDUAL_BLOCKS))](
            **self._logits(),
            **self._rows(),
            cumulative_log_p_ptr=self.cumulative_log_p,
            row_lse_ptr=self.row_lse,
            local_residual_mass_ptr=self.local_residual_mass,
            local_stride=self.num_blocks,
            num_blocks=self.num_blocks,
            vocab_size=self.vocab_size,
            target_local_max_ptr=self.target_local_max,
            SKIP_MASKED=self.skip_masked,
            K_P2=self.k_p2,
            GROUPS=self.k - 1,
            SUB=RESIDUAL_BLOCKS,
            BLOCK=SAMPLE_BLOCK,
            **self._launch(TILE_WARPS),
        )

    # ---- 4. accept/reject: tau into num_sampled; the plan, and level 1 where masses are known
    def _rejection(self) -> None:
        _rejection_kernel[(self.num_reqs,)](
            **self._outputs(),
            **self._logits(),
            **self._request(),
            target_local_argmax_ptr=self.target_local_argmax,
            **self._partials(),
            local_residual_mass_ptr=self.local_residual_mass,
            cumulative_log_p_ptr=self.cumulative_log_p,
            row_lse_ptr=self.row_lse,
            synthetic_conditional_rates_ptr=self.rates,
            HAS_DRAFT_LOGITS=self.has_draft_logits,
            SYNTHETIC_MODE=self.synthetic,
            USE_BLOCK_VERIFICATION=self.use_block_verification,
            K_P2=self.k_p2,
            NB_P2=self.nb_p2,
            BLOCK=SAMPLE_BLOCK,
            **self._launch(REQUEST_WARPS),
        )

    # ---- 5. block masses of the rows not known yet (with the fused insert: and the insert)
    def _resample(self) -> None:
        c = self.config
        if self.resample_persistent_programs:
            _resample_persistent_kernel[(self.resample_persistent_programs,)](**self._resample_persistent_args())
            return
        programs = self.resample_tiles
        _resample_kernel[(self.num_reqs, programs)](
            **self._outputs(),
            **self._resampled(),
            **self._logits(),
            **self._request(),
            vocab_size=self.vocab_size,
            target_local_max_ptr=self.target_local_max,
            HAS_DRAFT_LOGITS=self.has_draft_logits,
            SKIP_MASKED=self.skip_masked,
            FUSED_INSERT=c.fused_insert,
            NUM_PROGRAMS=programs,
            SUB=RESAMPLE_BLOCKS,
            NB_P2=self.nb_p2,
            BLOCK=SAMPLE_BLOCK,
            **self._launch(TILE_WARPS),
        )

    def _resample_persistent_args(self) -> dict:
        return dict(
            **self._resampled(),
            num_sampled_ptr=self.num_sampled,
            plan_ptr=self.plan,
            plan_lse_ptr=self.plan_lse,
            **self._logits(),
            cu_num_logits_ptr=self.cu_num_logits,
            idx_mapping_ptr=self.idx_mapping,
            temperature_ptr=self.temperature,
            vocab_size=self.vocab_size,
            num_reqs=self.num_reqs,
            target_local_max_ptr=self.target_local_max,
            TILES=self.resample_tiles,
            R_P2=triton.next_power_of_2(self.num_reqs),
            HAS_DRAFT_LOGITS=self.has_draft_logits,
            SKIP_MASKED=self.skip_masked,
            SUB=RESAMPLE_BLOCKS,
            BLOCK=SAMPLE_BLOCK,
            **self._launch(TILE_WARPS),
            maxnreg=PERSISTENT_RESAMPLE_REGISTERS,
        )

    # ---- 6. level 1 where not drawn yet, level 2 in the chosen block; num_sampled = tau + 1
    def _insert(self) -> None:
        _insert_kernel[(self.num_reqs,)](
            **self._outputs(),
            **self._resampled(),
            **self._logits(),
            **self._request(),
            vocab_size=self.vocab_size,
            HAS_DRAFT_LOGITS=self.has_draft_logits,
            NB_P2=self.nb_p2,
            BLOCK=SAMPLE_BLOCK,
            **self._launch(TILE_WARPS),
        )


def launch(*args, config: Config | None = None, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """Allocate and run one :class:`Pipeline` (the arguments of ``mrv2.launch``, and
    ``skip_masked_vocab_blocks``)."""
    return Pipeline(*args, config=config, **kwargs).run()
