"""The workload spec: :class:`Workload`, its validation and its readable name, and
:func:`workload_of`, the workload of a canonical point.

The mode, pattern and draft names are append-only: results key on them, so an existing name must
never change meaning.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..schema import (
    DRAFT_CACHES,
    DRAFTS,
    LOGITS_SHAPES,
    MODES,
    PATH_AXES,
    PATH_DEFAULTS,
    PATTERNS,
    ROW_ENTROPIES,
)

FLOAT_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}


@dataclass(frozen=True)
class Workload:
    """One rejection-sampling batch, as a hashable spec.

    Attributes
    ----------
    num_reqs : int
        ``R``, requests in the batch.
    num_speculative_steps : int
        ``K``, the most drafts a request can have.
    vocab_size : int
        ``V`` (at least 2); target and draft share it.
    placeholder_density : float
        ``phi`` in [0, 1]: fraction of all draft slots set to ``-1``. Exactly
        ``round(phi * S)`` placeholders are placed, ``S`` being the number of draft slots.
    placeholder_pattern : str
        ``"trailing"``: each request's *last* drafts are ``-1``, the count spread as evenly as
        possible (every request gets ``floor`` or ``ceil`` of ``phi * n_r``).
        ``"random"``: ``-1`` at uniformly random draft slots, so some fall mid-block.
        ``"all"``: every draft is ``-1``; ``phi`` is ignored.
    mode : str
        One of :data:`MODES`. ``"greedy"`` makes every request greedy; ``"block"`` sets
        ``use_block_verification``; ``"synthetic"`` passes conditional acceptance rates.
        The other modes build the same tensors and differ only in those flags.
    draft : str
        ``"logits"`` passes ``draft_logits``; ``"one-hot"`` passes ``None``. The draft tokens
        are the same in both: drawn from the draft distribution either way.
    target_dtype, draft_dtype : torch.dtype
        fp32, fp16 or bf16.
    temperature : float
        ``T > 0`` of the non-greedy requests.
    greedy_fraction : float
        Fraction of requests with ``T = 0`` (exactly ``round(greedy_fraction * R)`` of them);
        ``mode="greedy"`` forces 1.
    agreement : float
        In [0, 1]. The draft distribution is ``q = a p + (1 - a) r`` with ``r`` an independent
        LLM-like distribution, so the standard acceptance rate per step is
        ``1 - TV(p, q) = a + (1 - a) (1 - TV(p, r))``, a little above ``a``; ``a = 1`` gives
        ``q = p``. Greedy drafts equal the target argmax with probability ``a``.
    ragged : bool
        If True, ``n_r`` is uniform on ``0..K`` and at least one request has fewer than ``K``.
    max_num_reqs : int or None
        Request-state slots, at least ``R``; ``None`` means ``R``. When larger, requests sit
        at a seeded random subset of slots.
    seed : int
        In ``[0, 2**32)``; every random choice derives from it.
    """

    num_reqs: int = 128
    num_speculative_steps: int = 4
    vocab_size: int = 151936
    placeholder_density: float = 0.0
    placeholder_pattern: str = "trailing"
    mode: str = "standard"
    draft: str = "logits"
    target_dtype: torch.dtype = torch.float32
    draft_dtype: torch.dtype = torch.bfloat16
    temperature: float = 1.0
    greedy_fraction: float = 0.0
    agreement: float = 0.7
    ragged: bool = False
    max_num_reqs: int | None = None
    seed: int = 0
    # vLLM's newer sampler paths (specsample.schema.PATH_AXES; docs/paths.md). The defaults
    # build exactly the inputs built before these fields existed.
    logits_shape: str = "gaussian"
    row_entropy: str = "natural"
    masked_vocab_fraction: float = 0.0
    skip_masked_vocab_blocks: bool = False
    fly_window_size: int = 0
    watermark: bool = False
    draft_cache: str = "replicated"

    def __post_init__(self) -> None:
        _check_int("num_reqs", self.num_reqs, low=1)
        _check_int("num_speculative_steps", self.num_speculative_steps, low=1)
        _check_int("vocab_size", self.vocab_size, low=2)
        _check_unit("placeholder_density", self.placeholder_density)
        _check_choice("placeholder_pattern", self.placeholder_pattern, PATTERNS)
        _check_choice("mode", self.mode, MODES)
        _check_choice("draft", self.draft, DRAFTS)
        _check_choice("target_dtype", self.target_dtype, tuple(FLOAT_DTYPES))
        _check_choice("draft_dtype", self.draft_dtype, tuple(FLOAT_DTYPES))
        _check_real("temperature", self.temperature)
        if not self.temperature > 0:
            raise ValueError(f"temperature must be > 0 (greedy is greedy_fraction), got {self.temperature}")
        _check_unit("greedy_fraction", self.greedy_fraction)
        _check_unit("agreement", self.agreement)
        if not isinstance(self.ragged, bool):
            raise ValueError(f"ragged must be a bool, got {self.ragged!r}")
        if self.max_num_reqs is not None:
            _check_int("max_num_reqs", self.max_num_reqs, low=self.num_reqs)
        _check_int("seed", self.seed, low=0, high=2**32 - 1)
        _check_paths(self)

    @property
    def name(self) -> str:
        """Short readable id, e.g. ``"R128-K4-V151936-phi0.5-trailing-block-logits"``.

        Fields at their default are left out; ``phi`` shows the density actually applied
        (1 for the ``"all"`` pattern), and fields a mode ignores are not shown.
        """
        phi = 1.0 if self.placeholder_pattern == "all" else self.placeholder_density
        parts = [
            f"R{self.num_reqs}",
            f"K{self.num_speculative_steps}",
            f"V{self.vocab_size}",
            f"phi{phi:g}",
            self.placeholder_pattern,
            self.mode,
            self.draft,
        ]
        if self.target_dtype != torch.float32:
            parts.append(f"tgt_{FLOAT_DTYPES[self.target_dtype]}")
        if self.draft_dtype != torch.bfloat16:
            parts.append(f"dft_{FLOAT_DTYPES[self.draft_dtype]}")
        if self.mode != "greedy":
            if self.temperature != 1.0:
                parts.append(f"T{self.temperature:g}")
            if self.greedy_fraction != 0.0:
                parts.append(f"g{self.greedy_fraction:g}")
        if self.agreement != 0.7:
            parts.append(f"a{self.agreement:g}")
        if self.ragged:
            parts.append("ragged")
        if self.max_num_reqs is not None and self.max_num_reqs != self.num_reqs:
            parts.append(f"M{self.max_num_reqs}")
        if self.seed != 0:
            parts.append(f"s{self.seed}")
        if self.logits_shape != "gaussian":
            parts.append(self.logits_shape)
        if self.row_entropy != "natural":
            parts.append(f"H{self.row_entropy}")
        if self.masked_vocab_fraction != 0.0:
            parts.append(f"mask{self.masked_vocab_fraction:g}")
        if self.skip_masked_vocab_blocks:
            parts.append("skipmasked")
        if self.fly_window_size:
            parts.append(f"fly{self.fly_window_size}")
        if self.watermark:
            parts.append("wm")
        if self.draft_cache != "replicated":
            parts.append(f"cache_{self.draft_cache}")
        return "-".join(parts)


def _check_paths(w: Workload) -> None:
    """The path fields, and the combinations vLLM's launcher forbids (it asserts them)."""
    _check_choice("logits_shape", w.logits_shape, LOGITS_SHAPES)
    _check_choice("row_entropy", w.row_entropy, ROW_ENTROPIES)
    _check_unit("masked_vocab_fraction", w.masked_vocab_fraction)
    if w.masked_vocab_fraction >= 1.0:
        raise ValueError("masked_vocab_fraction must be below 1: a row needs one token left")
    for name in ("skip_masked_vocab_blocks", "watermark"):
        if not isinstance(getattr(w, name), bool):
            raise ValueError(f"{name} must be a bool, got {getattr(w, name)!r}")
    _check_int("fly_window_size", w.fly_window_size, low=0)
    _check_choice("draft_cache", w.draft_cache, DRAFT_CACHES)
    if w.row_entropy != "natural" and w.logits_shape != "gaussian":
        raise ValueError("row_entropy sets the top-1 mass of gaussian rows; heavy-tailed rows take it as natural")
    if w.fly_window_size and w.mode in ("block", "synthetic"):
        raise ValueError(f"fly_window_size > 0 runs in standard or greedy mode only (vLLM asserts it), not {w.mode!r}")
    if w.draft_cache == "sharded" and w.draft != "logits":
        raise ValueError("draft_cache 'sharded' holds draft logits: it needs draft 'logits'")


def _check_int(field: str, value, *, low: int, high: int | None = None) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{field} must be an int, got {value!r}")
    if value < low or (high is not None and value > high):
        bound = f"in [{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{field} must be {bound}, got {value}")


def _check_real(field: str, value) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise ValueError(f"{field} must be a finite number, got {value!r}")


def _check_unit(field: str, value) -> None:
    _check_real(field, value)
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{field} must be in [0, 1], got {value}")


def _check_choice(field: str, value, choices: tuple) -> None:
    if value not in choices:
        raise ValueError(f"{field} must be one of {choices}, got {value!r}")


def workload_of(point: dict) -> Workload:
    """The workload of a canonical point (:data:`specsample.schema.POINT_AXES`, and the
    :data:`~specsample.schema.PATH_AXES` it names, each other path axis at its
    :data:`~specsample.schema.PATH_DEFAULTS` value; seed 0 and the builder's defaults for
    everything else). Axes other than the workload's
    own (``subject``, ``stage``) are ignored."""
    paths = {axis: point.get(axis, PATH_DEFAULTS[axis]) for axis in PATH_AXES}
    return Workload(
        logits_shape=str(paths["logits_shape"]),
        row_entropy=str(paths["row_entropy"]),
        masked_vocab_fraction=float(paths["masked_vocab_fraction"]),
        skip_masked_vocab_blocks=bool(paths["skip_masked_vocab_blocks"]),
        fly_window_size=int(paths["fly_window_size"]),
        watermark=bool(paths["watermark"]),
        draft_cache=str(paths["draft_cache"]),
        num_reqs=int(point["num_reqs"]),
        num_speculative_steps=int(point["num_speculative_steps"]),
        vocab_size=int(point["vocab_size"]),
        placeholder_density=float(point["placeholder_density"]),
        placeholder_pattern=point["placeholder_pattern"],
        mode=point["mode"],
        draft=point["draft"],
    )
