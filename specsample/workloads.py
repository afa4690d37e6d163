"""Deterministic, realistic inputs for ``rejection_sample`` built from a small frozen spec.

A :class:`Workload` names one batch: its shape (``R`` requests, ``K`` speculative steps, vocab
``V``), where the ``-1`` placeholders go, the verification mode, whether draft logits are
passed, dtypes, temperatures and how closely the draft agrees with the target.
:func:`make_inputs` turns it into the keyword arguments of ``rejection_sample`` and
:func:`bytes_required` gives the traffic an ideal sampler needs for it (spec sections 1.1, 1.2
and 5.5).

The mode, pattern and draft names below are append-only: results key on them, so an existing
name must never change meaning.

Determinism and devices
-----------------------
Everything is a pure function of the spec. Each kind of randomness has its own generator,
seeded from ``(w.seed, stream)``, so changing one knob does not reshuffle the rest: workloads
that differ only in ``placeholder_density``/``placeholder_pattern``, ``mode`` (other than
``"greedy"``) or ``draft`` share every logit and every non-placeholder token.

- **Layout and metadata** (draft counts, placeholder positions, greedy requests, slots,
  ``pos``, ``temperature``, ``seed``, anchors) are drawn on the CPU and then moved, so they are
  identical on every device.
- **Floating-point data and the draft token ids** drawn from it are generated on the target
  device (a CUDA generator when the device is CUDA, so ``V = 151936, R = 512`` takes a moment
  rather than minutes). CPU and CUDA therefore give *different* logit values and draft token
  ids for the same spec; each is deterministic on its own device.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import torch

from .schema import (
    DRAFT_CACHES,
    DRAFTS,
    LOGITS_SHAPES,
    MODES,
    PATH_AXES,
    PATH_DEFAULTS,
    PATTERNS,
    PLACEHOLDER_TOKEN_ID,
    ROW_ENTROPIES,
)

__all__ = [
    "MODES",
    "DRAFTS",
    "PATTERNS",
    "PLACEHOLDER_TOKEN_ID",
    "Workload",
    "make_inputs",
    "bytes_required",
    "workload_of",
]

# MODES, DRAFTS, PATTERNS and PLACEHOLDER_TOKEN_ID are append-only names declared in
# specsample.schema (benchmark results key on them) and re-exported here.

_FLOAT_DTYPES = {torch.float32: "fp32", torch.float16: "fp16", torch.bfloat16: "bf16"}

# Shape of one synthetic LLM next-token distribution (see _peaked_logits). Real LLM rows put
# most mass on a handful of tokens: top-1 between _TOP1_MIN and _TOP1_MAX, a few runners-up,
# and a long Gaussian bulk.
_NUM_HEAD_TOKENS = 4
_TOP1_MIN, _TOP1_MAX = 0.2, 0.9
_RUNNER_UP_SHARE_MIN, _RUNNER_UP_SHARE_MAX = 0.5, 0.9  # of the mass the top-1 leaves over
_BULK_SCALE = 2.0  # std of the bulk logits; the head sits ~15 above them, as in real models

# Absolute positions: each request starts at a random context length in this range.
_POS_MIN, _POS_MAX = 16, 8192

# Synthetic mode accepts step i with probability agreement * _SYNTHETIC_DECAY**i: a fixed,
# decreasing conditional rate, comparable to the standard-mode rate at the same agreement.
_SYNTHETIC_DECAY = 0.95

# One generator per kind of randomness (see the module docstring). Append-only.
_STREAM_NUM_DRAFTS = 1
_STREAM_GREEDY = 2
_STREAM_PLACEHOLDERS = 3
_STREAM_SLOTS = 4
_STREAM_POS = 5
_STREAM_SEEDS = 6
_STREAM_ANCHORS = 7
_STREAM_GREEDY_MATCH = 8
_STREAM_TARGET = 9
_STREAM_DRAFT_NOISE = 10
_STREAM_DRAFT_SAMPLE = 11
_STREAM_ROW_ENTROPY = 12
_STREAM_VOCAB_MASK = 13
_STREAM_CONTEXTS = 14
_STREAM_SHARD_ROWS = 15

# The sampler paths' inputs (docs/paths.md explains each choice).
# row_entropy: a target row is "high" (top-3 entropy well above FLy's default threshold 0.3) with
# its top-1 mass drawn from _HIGH_TOP1, or "low" (well below it) from _LOW_TOP1.
_HIGH_TOP1 = (0.25, 0.45)
_LOW_TOP1 = (0.97, 0.995)
_MIXED_HIGH_SHARE = 0.5
# heavy-tailed: logits sigma * Gumbel, whose exp has a Pareto tail of index 1 / sigma; sigma per
# row uniform in this range gives a mean entropy near 1.5 nats and a mean top-1 near 0.6 at
# V = 151936, as measured for chat LLMs.
_HEAVY_SIGMA = (1.5, 3.0)
# masked vocabulary: the allowed tokens form this many contiguous ranges per row, as a grammar's
# token classes do (digits, one keyword's prefixes, ...).
_MASK_RANGES = 8
# watermarking: vLLM's default context width, and a fixed 64-bit key.
WATERMARK_CONTEXT_WIDTH = 4
WATERMARK_KEY = 0x5EC5A3D1E0C0FFEE
# FLy: vLLM's defaults for the threshold and the top-k of its entropy.
FLY_ENTROPY_THRESHOLD = 0.3
FLY_ENTROPY_TOP_K = 3
# a sharded draft-logits cache: this many tensor-parallel ranks; the workload is one rank's batch.
SHARD_RANKS = 2


# %%
# The spec
# --------


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
        _check_choice("target_dtype", self.target_dtype, tuple(_FLOAT_DTYPES))
        _check_choice("draft_dtype", self.draft_dtype, tuple(_FLOAT_DTYPES))
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
            parts.append(f"tgt_{_FLOAT_DTYPES[self.target_dtype]}")
        if self.draft_dtype != torch.bfloat16:
            parts.append(f"dft_{_FLOAT_DTYPES[self.draft_dtype]}")
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


def _generator(w: Workload, stream: int, device: torch.device) -> torch.Generator:
    # seed < 2**32 and stream < 2**8, so every (seed, stream) pair gets its own state.
    return torch.Generator(device=device).manual_seed((w.seed << 8) | stream)


# %%
# Layout and metadata (CPU, identical on every device)
# ----------------------------------------------------


@dataclass(frozen=True)
class _Layout:
    num_drafts: torch.Tensor  # [R] int64, n_r
    num_valid: torch.Tensor  # [R] int64, m_r: valid drafts before the first -1
    cu_num_logits: torch.Tensor  # [R + 1] int64
    is_greedy: torch.Tensor  # [R] bool
    is_placeholder: torch.Tensor  # [N] bool, never True at an anchor row
    idx_mapping: torch.Tensor  # [R] int64
    pos: torch.Tensor  # [N] int64
    temperature: torch.Tensor  # [max_num_reqs] fp32
    seed: torch.Tensor  # [max_num_reqs] int64
    anchors: torch.Tensor  # [R] int64
    greedy_match: torch.Tensor  # [R, K] bool: a greedy draft at step i equals the target argmax


def _layout(w: Workload) -> _Layout:
    cpu = torch.device("cpu")
    R, K = w.num_reqs, w.num_speculative_steps
    M = w.max_num_reqs if w.max_num_reqs is not None else R

    num_drafts = _num_drafts(w, _generator(w, _STREAM_NUM_DRAFTS, cpu))
    cu = torch.zeros(R + 1, dtype=torch.int64)
    cu[1:] = torch.cumsum(num_drafts + 1, 0)
    N = int(cu[-1])
    req_of_row = torch.repeat_interleave(torch.arange(R), num_drafts + 1)
    local_pos = torch.arange(N) - cu[:-1][req_of_row]

    is_placeholder = _placeholder_mask(w, num_drafts, req_of_row, local_pos, _generator(w, _STREAM_PLACEHOLDERS, cpu))
    # m_r: the first placeholder's local position minus one, or n_r when there is none.
    first_hit = torch.where(is_placeholder, local_pos - 1, num_drafts[req_of_row])
    num_valid = torch.full((R,), K, dtype=torch.int64).scatter_reduce(0, req_of_row, first_hit, "amin")

    g = _generator(w, _STREAM_GREEDY, cpu)
    num_greedy = R if w.mode == "greedy" else math.floor(w.greedy_fraction * R + 0.5)
    is_greedy = torch.zeros(R, dtype=torch.bool)
    is_greedy[torch.randperm(R, generator=g)[:num_greedy]] = True

    g = _generator(w, _STREAM_SLOTS, cpu)
    idx_mapping = torch.randperm(M, generator=g)[:R] if M > R else torch.arange(R)

    g = _generator(w, _STREAM_POS, cpu)
    start = torch.randint(_POS_MIN, _POS_MAX, (R,), generator=g)
    pos = start[req_of_row] + local_pos

    temperature = torch.full((M,), float(w.temperature), dtype=torch.float32)
    temperature[idx_mapping[is_greedy]] = 0.0

    # Distinct seeds in [0, 2**31): sorted draws plus 0..M-1 cannot collide; then shuffle.
    # Kept below 2**31 so that a kernel truncating the Philox key to 32 bits still sees
    # distinct keys.
    g = _generator(w, _STREAM_SEEDS, cpu)
    draws = torch.randint(0, 2**31 - M, (M,), generator=g).sort().values + torch.arange(M)
    seed = draws[torch.randperm(M, generator=g)]

    g = _generator(w, _STREAM_ANCHORS, cpu)
    anchors = torch.randint(0, w.vocab_size, (R,), generator=g)

    g = _generator(w, _STREAM_GREEDY_MATCH, cpu)
    greedy_match = torch.rand((R, K), generator=g, dtype=torch.float64) < w.agreement

    return _Layout(
        num_drafts, num_valid, cu, is_greedy, is_placeholder, idx_mapping, pos, temperature, seed, anchors, greedy_match
    )


def _num_drafts(w: Workload, g: torch.Generator) -> torch.Tensor:
    R, K = w.num_reqs, w.num_speculative_steps
    if not w.ragged:
        return torch.full((R,), K, dtype=torch.int64)
    n = torch.randint(0, K + 1, (R,), generator=g)
    if bool((n == K).all()):
        # Ragged promises at least one short request; shorten a random one.
        n[torch.randint(0, R, (1,), generator=g)] = torch.randint(0, K, (1,), generator=g)
    return n


def _placeholder_mask(
    w: Workload, num_drafts: torch.Tensor, req_of_row: torch.Tensor, local_pos: torch.Tensor, g: torch.Generator
) -> torch.Tensor:
    """``[N]`` bool: which draft rows hold ``-1``. Anchor rows (local position 0) never do.

    The total is always ``P = round(phi * S)`` over the ``S = sum n_r`` draft slots (all ``S``
    for the "all" pattern), so the density is exact to within one slot.

    - "random": ``P`` slots drawn uniformly without replacement from all ``S``.
    - "trailing": request ``r`` gets the last ``c_r`` of its drafts, with ``c_r`` the
      largest-remainder apportionment of ``phi * n_r``: every request gets the floor, and the
      ``P - sum floor`` requests with the largest fractional parts (ties in a seeded random
      order) get one more. With equal ``n_r = K`` that is ``floor(phi K)`` or ``ceil(phi K)``
      placeholders each, so no request keeps many more valid drafts than another. That matters
      for the serial kernels, whose latency follows the largest ``m_r`` in the batch.
    """
    is_draft = local_pos > 0
    if w.placeholder_pattern == "all":
        return is_draft
    S = int(num_drafts.sum())
    # Exact rational arithmetic so that e.g. phi = 0.3, n_r = 10 gives exactly 3.
    phi = Fraction(w.placeholder_density).limit_denominator(10**9)
    total = math.floor(phi * S + Fraction(1, 2))
    if w.placeholder_pattern == "random":
        mask = torch.zeros_like(is_draft)
        draft_rows = torch.nonzero(is_draft).flatten()
        mask[draft_rows[torch.randperm(S, generator=g)[:total]]] = True
        return mask
    quotas = [phi * int(n) for n in num_drafts]
    counts = [math.floor(q) for q in quotas]
    tie_rank = torch.randperm(len(counts), generator=g).tolist()
    by_remainder = sorted(range(len(counts)), key=lambda r: (counts[r] - quotas[r], tie_rank[r]))
    for r in by_remainder[: total - sum(counts)]:
        counts[r] += 1
    # The last c_r drafts of request r sit at local positions n_r - c_r + 1 .. n_r.
    first = (num_drafts - torch.tensor(counts, dtype=torch.int64) + 1)[req_of_row]
    return is_draft & (local_pos >= first)


# %%
# Logits and draft tokens (on the target device)
# ----------------------------------------------


def _peaked_logits(
    rows: int, V: int, g: torch.Generator, device: torch.device, top1_override: torch.Tensor | None = None
) -> torch.Tensor:
    """``[rows, V]`` fp32 raw logits shaped like an LLM's next-token scores.

    The bulk is ``N(0, _BULK_SCALE^2)``. ``H = min(4, V - 1)`` distinct head tokens per row are
    then set so that the top one has probability ``U(0.2, 0.9)``, ``U(0.5, 0.9)`` of the
    remainder is split among the runners-up (each capped below the top), and the bulk keeps
    the rest. Head logits end up ~15 above the bulk, as with real models.
    """
    H = min(_NUM_HEAD_TOKENS, V - 1)
    logits = torch.randn(rows, V, generator=g, device=device).mul_(_BULK_SCALE)

    # H distinct ids per row: sorted draws from [0, V - H] plus 0..H-1 are strictly increasing.
    # Distinct ids keep scatter_ deterministic on CUDA.
    ids = torch.randint(0, V - H + 1, (rows, H), generator=g, device=device).sort(dim=1).values
    ids += torch.arange(H, device=device)
    shuffle = torch.rand(rows, H, generator=g, device=device).argsort(dim=1, stable=True)
    ids = ids.gather(1, shuffle)

    top1 = _TOP1_MIN + (_TOP1_MAX - _TOP1_MIN) * torch.rand(rows, 1, generator=g, device=device)
    share = _RUNNER_UP_SHARE_MIN + (_RUNNER_UP_SHARE_MAX - _RUNNER_UP_SHARE_MIN) * torch.rand(
        rows, 1, generator=g, device=device
    )
    split = torch.randn(rows, H - 1, generator=g, device=device).softmax(dim=1)
    if top1_override is not None:  # [rows, 1]; drawn after the stream above, which stays as it was
        top1 = top1_override
    runners_up = torch.minimum((1 - top1) * share * split, 0.9 * top1)
    head_mass = torch.cat([top1, runners_up], dim=1)  # [rows, H]
    bulk_mass = 1 - head_mass.sum(dim=1, keepdim=True)  # >= (1 - 0.9) * (1 - 0.9) > 0

    # exp(head) / exp(lse(bulk)) = head_mass / bulk_mass (the H overwritten bulk values are
    # a negligible part of the bulk's sum).
    head = logits.logsumexp(dim=1, keepdim=True) + head_mass.log() - bulk_mass.log()
    return logits.scatter_(1, ids, head)


def _heavy_tailed_logits(rows: int, V: int, g: torch.Generator, device: torch.device) -> torch.Tensor:
    """``[rows, V]`` fp32 logits ``sigma * Gumbel``: ``exp`` of them has a Pareto tail of index
    ``1 / sigma``, so the sorted probabilities fall like a power of the rank (Zipf-like), as a
    language model's do; ``sigma`` per row uniform in ``_HEAVY_SIGMA`` (docs/paths.md)."""
    sigma = _HEAVY_SIGMA[0] + (_HEAVY_SIGMA[1] - _HEAVY_SIGMA[0]) * torch.rand(rows, 1, generator=g, device=device)
    u = torch.rand(rows, V, generator=g, device=device).clamp_(min=1e-12, max=1 - 1e-7)
    return u.log_().neg_().log_().neg_().mul_(sigma)


def _row_logits(w: Workload, rows: int, g: torch.Generator, device: torch.device, top1=None) -> torch.Tensor:
    if w.logits_shape == "heavy-tailed":
        return _heavy_tailed_logits(rows, w.vocab_size, g, device)
    return _peaked_logits(rows, w.vocab_size, g, device, top1)


def _top1_override(w: Workload, rows: int, device: torch.device) -> torch.Tensor | None:
    """``[rows, 1]`` top-1 masses for ``row_entropy`` other than "natural", else None."""
    if w.row_entropy == "natural":
        return None
    g = _generator(w, _STREAM_ROW_ENTROPY, torch.device("cpu"))
    share = {"low": 0.0, "mixed": _MIXED_HIGH_SHARE, "high": 1.0}[w.row_entropy]
    high = torch.rand(rows, 1, generator=g, dtype=torch.float64) < share
    u = torch.rand(rows, 1, generator=g, dtype=torch.float64)
    top1 = torch.where(
        high, _HIGH_TOP1[0] + (_HIGH_TOP1[1] - _HIGH_TOP1[0]) * u, _LOW_TOP1[0] + (_LOW_TOP1[1] - _LOW_TOP1[0]) * u
    )
    return top1.to(device, torch.float32)


def vocab_mask(w: Workload, rows: int, device: torch.device, keep: torch.Tensor | None = None) -> torch.Tensor | None:
    """``[rows, V]`` bool, True where a token is masked to -inf; None without masking.

    Each row allows ``max(1, round((1 - f) V))`` tokens in ``_MASK_RANGES`` contiguous ranges at
    seeded random places (a grammar mask: token classes are contiguous id ranges), plus the
    ``keep`` token of each row (``[rows]``, the model's top choice, which a grammar-aware model
    rarely puts outside the grammar)."""
    f = w.masked_vocab_fraction
    if f == 0.0:
        return None
    V = w.vocab_size
    allowed = max(1, math.floor((1 - f) * V + 0.5))
    n = min(_MASK_RANGES, allowed)
    g = _generator(w, _STREAM_VOCAB_MASK, torch.device("cpu"))
    # range lengths: allowed split as evenly as possible; the masked tokens split at random
    # into the n + 1 gaps before, between and after the ranges.
    lengths = torch.full((rows, n), allowed // n, dtype=torch.int64)
    lengths[:, : allowed % n] += 1
    cuts = torch.randint(0, V - allowed + 1, (rows, n), generator=g).sort(dim=1).values
    gaps = torch.diff(cuts, dim=1, prepend=torch.zeros(rows, 1, dtype=torch.int64))
    starts = torch.cumsum(gaps, 1) + torch.cumsum(lengths, 1) - lengths
    ends = starts + lengths
    delta = torch.zeros(rows, V + 1, dtype=torch.int32)
    delta.scatter_add_(1, starts, torch.ones_like(starts, dtype=torch.int32))
    delta.scatter_add_(1, ends, torch.full_like(ends, -1, dtype=torch.int32))
    masked = delta.cumsum(1)[:, :V] == 0
    masked = masked.to(device)
    if keep is not None:
        masked[torch.arange(rows, device=device), keep] = False
    return masked


def _build_logits_and_drafts(w: Workload, lay: _Layout, device: torch.device):
    """Target logits ``[N, V]``, draft logits ``[R*K, V]`` (request-major) and tokens ``[R, K]``.

    Draft step ``i`` of request ``r`` is tested against target row ``c_r + i``, so its draft
    distribution is built from that row (from the bonus row ``c_r + n_r`` for unused steps
    ``i >= n_r``, which the stats kernel may still read but nothing verifies).
    """
    R, K, V = w.num_reqs, w.num_speculative_steps, w.vocab_size
    a = float(w.agreement)
    # Greedy requests keep raw logits (nothing divides them); others carry T.
    req_temp = torch.where(lay.is_greedy, 1.0, float(w.temperature)).to(device)  # [R]
    num_drafts = lay.num_drafts.to(device)
    cu = lay.cu_num_logits.to(device)
    row_temp = torch.repeat_interleave(req_temp, num_drafts + 1)  # [N]
    steps = torch.arange(K, device=device)
    target_row = (cu[:-1, None] + torch.minimum(steps, num_drafts[:, None])).flatten()  # [R*K]
    draft_temp = req_temp.repeat_interleave(K)[:, None]  # [R*K, 1]

    # Target: post-temperature, as the sampler receives it.
    N = int(cu[-1])
    raw = _row_logits(w, N, _generator(w, _STREAM_TARGET, device), device, _top1_override(w, N, device))
    if w.masked_vocab_fraction:
        raw.masked_fill_(vocab_mask(w, N, device, keep=raw.argmax(dim=1)), -math.inf)
    target_logits = raw.div_(row_temp[:, None]).to(w.target_dtype)
    del raw

    # Draft: q = a p + (1 - a) r at the request's temperature, with p the target row as
    # stored and r an independent LLM-like distribution. Stored pre-temperature
    # (T log q), in draft_dtype, as the sampler expects after vLLM #50910.
    log_a = math.log(a) if a > 0 else -math.inf
    log_1ma = math.log1p(-a) if a < 1 else -math.inf
    tested_rows = target_logits[target_row]  # [R*K, V]
    argmax = tested_rows.argmax(dim=1)  # first maximum, as the greedy sampler takes it
    log_p = tested_rows.float().log_softmax(dim=1)
    del tested_rows
    noise = _row_logits(w, R * K, _generator(w, _STREAM_DRAFT_NOISE, device), device)
    log_q = torch.logaddexp(log_p.add_(log_a), noise.div(draft_temp).log_softmax(dim=1).add_(log_1ma))
    draft_rows = log_q.mul_(draft_temp).to(w.draft_dtype)
    del log_q

    # Non-greedy drafts are drawn from exactly the distribution the sampler will see:
    # softmax(stored draft / T), after rounding to draft_dtype.
    # Inverse-CDF sampling: one uniform per row and a float64 running sum, several times faster
    # than torch.multinomial on CPU at V = 151936. right=True never lands on a zero-mass token.
    cdf = draft_rows.float().div_(draft_temp).softmax(dim=1).cumsum(dim=1, dtype=torch.float64)
    u = torch.rand(R * K, 1, generator=_generator(w, _STREAM_DRAFT_SAMPLE, device), device=device, dtype=torch.float64)
    sampled = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).clamp_(max=V - 1).view(R, K)
    del cdf

    # Greedy drafts: the target argmax with probability a, otherwise the noise distribution's
    # top token other than the argmax (a confidently wrong draft model).
    noise.scatter_(1, argmax[:, None], -math.inf)
    greedy = torch.where(lay.greedy_match.to(device).flatten(), argmax, noise.argmax(dim=1)).view(R, K)
    del noise

    tokens = torch.where(lay.is_greedy.to(device)[:, None], greedy, sampled)
    return target_logits, draft_rows, tokens


# %%
# Public builders
# ---------------


def make_inputs(w: Workload, device: str | torch.device = "cpu") -> dict:
    """Keyword arguments for ``rejection_sample(**make_inputs(w))``.

    Fresh tensors on every call (nothing is cached), so callers may mutate them.

    Parameters
    ----------
    w : Workload
        The spec.
    device : str or torch.device
        Where the tensors live. Layout and metadata do not depend on it; logit values and
        draft token ids do (see the module docstring).

    Returns
    -------
    dict
        ``target_logits`` : ``(N, V)``, ``w.target_dtype``; post-temperature (greedy rows raw).
        ``draft_logits`` : ``(max_num_reqs, K, V)``, ``w.draft_dtype``, pre-temperature, or
        ``None`` for one-hot drafts. Slots no request maps to are zero.
        ``draft_sampled`` : ``(N,)`` int64; anchor at ``c_r``, drafts at ``c_r + 1 .. c_r + n_r``,
        ``-1`` at placeholders.
        ``cu_num_logits`` : ``(R + 1,)`` int32. ``pos`` : ``(N,)`` int32.
        ``idx_mapping`` : ``(R,)`` int32. ``expanded_idx_mapping``, ``expanded_local_pos`` :
        ``(N,)`` int32. ``temperature`` : ``(max_num_reqs,)`` fp32, 0 for greedy.
        ``seed`` : ``(max_num_reqs,)`` int64, distinct.
        ``num_speculative_steps`` : ``K``. ``synthetic_conditional_rates`` : ``(K,)`` fp32
        ``agreement * 0.95**i`` in synthetic mode, else ``None``.
        ``use_fp64`` : False. ``use_block_verification`` : ``mode == "block"``.

    Notes
    -----
    Building needs transient device memory of a few times the draft rows' size on top of the
    outputs: about 12 GiB at ``R = 512, K = 4, V = 151936`` and 37 GiB at
    ``R = 512, K = 8, V = 262144`` (measured on an H200, where both take well under a second).

    Examples
    --------
    >>> inputs = make_inputs(Workload(num_reqs=2, num_speculative_steps=3, vocab_size=1000))
    >>> inputs["target_logits"].shape, inputs["draft_logits"].shape
    (torch.Size([8, 1000]), torch.Size([2, 3, 1000]))
    """
    device = torch.device(device)
    lay = _layout(w)
    R, K = w.num_reqs, w.num_speculative_steps
    M = lay.temperature.numel()
    target_logits, draft_rows, tokens = _build_logits_and_drafts(w, lay, device)

    draft_logits = None
    if w.draft == "logits":
        draft_logits = torch.zeros(M, K, w.vocab_size, dtype=w.draft_dtype, device=device)
        draft_logits[lay.idx_mapping.to(device)] = draft_rows.view(R, K, -1)
    del draft_rows

    # draft_sampled: row c_r + j holds the anchor (j = 0) or draft d_j = token of step j - 1.
    num_drafts = lay.num_drafts.to(device)
    req_of_row = torch.repeat_interleave(torch.arange(R, device=device), num_drafts + 1)
    cu = lay.cu_num_logits.to(device)
    local_pos = torch.arange(int(cu[-1]), device=device) - cu[:-1][req_of_row]
    step = (local_pos - 1).clamp_(min=0)
    draft_sampled = torch.where(local_pos == 0, lay.anchors.to(device)[req_of_row], tokens[req_of_row, step])
    draft_sampled[lay.is_placeholder.to(device)] = PLACEHOLDER_TOKEN_ID

    rates = None
    if w.mode == "synthetic":
        rates = (w.agreement * _SYNTHETIC_DECAY ** torch.arange(K, dtype=torch.float64)).to(torch.float32)
        rates = rates.to(device)

    idx_mapping = lay.idx_mapping.to(device)
    inputs = {
        "target_logits": target_logits,  # [N, V]
        "draft_logits": draft_logits,  # [max_num_reqs, K, V] or None
        "draft_sampled": draft_sampled.to(torch.int64),  # [N]
        "cu_num_logits": lay.cu_num_logits.to(device, torch.int32),  # [R + 1]
        "pos": lay.pos.to(device, torch.int32),  # [N]
        "idx_mapping": idx_mapping.to(torch.int32),  # [R]
        "expanded_idx_mapping": idx_mapping[req_of_row].to(torch.int32),  # [N]
        "expanded_local_pos": local_pos.to(torch.int32),  # [N]
        "temperature": lay.temperature.to(device),  # [max_num_reqs]
        "seed": lay.seed.to(device),  # [max_num_reqs]
        "num_speculative_steps": K,
        "synthetic_conditional_rates": rates,  # [K] or None
        "use_fp64": False,
        "use_block_verification": w.mode == "block",
    }
    inputs.update(path_inputs(w, lay, inputs, device))
    return inputs


# The input names path_inputs may add (none of them is an argument of specsample's samplers).
PATH_INPUT_NAMES = (
    "fly_window_size",
    "fly_entropy_threshold",
    "fly_entropy_top_k",
    "contexts",
    "watermarking",
    "watermark_key",
    "skip_masked_vocab_blocks",
    "draft_logits_cache_values",
    "draft_logits_row_mapping",
)


def base_inputs(inputs: dict) -> dict:
    """``inputs`` less the path inputs: the arguments every MRV2 launcher takes."""
    return {k: v for k, v in inputs.items() if k not in PATH_INPUT_NAMES}


def path_inputs(w: Workload, lay: _Layout, inputs: dict, device: torch.device) -> dict:
    """The keyword arguments of the sampler paths ``w`` turns on (none at the defaults):

    - FLy: ``fly_window_size``, ``fly_entropy_threshold``, ``fly_entropy_top_k`` (vLLM's defaults);
    - watermarking: ``contexts`` ``[N, 4]`` int64 (each row's previous 4 tokens: a seeded history
      before the anchor, then the anchor and the drafts, -1 placeholders included, as vLLM's
      request state holds them), ``watermarking`` ``[max_num_reqs]`` bool (every request),
      ``watermark_key``;
    - ``skip_masked_vocab_blocks``: True;
    - a sharded draft-logits cache: ``draft_logits_cache_values`` ``[R, K, V]`` (this rank's
      rows, requests at seeded rows) and ``draft_logits_row_mapping`` ``[max_num_reqs]`` int32
      (a request's row, -1 for the other ranks' slots). ``draft_logits`` stays the slot-indexed
      tensor, which the subjects without a cache read.
    """
    out: dict = {}
    if w.fly_window_size:
        out.update(
            fly_window_size=w.fly_window_size,
            fly_entropy_threshold=FLY_ENTROPY_THRESHOLD,
            fly_entropy_top_k=FLY_ENTROPY_TOP_K,
        )
    if w.watermark:
        out.update(
            contexts=_contexts(w, lay, inputs["draft_sampled"]).to(device),
            watermarking=torch.ones(lay.temperature.numel(), dtype=torch.bool, device=device),
            watermark_key=WATERMARK_KEY,
        )
    if w.skip_masked_vocab_blocks:
        out["skip_masked_vocab_blocks"] = True
    if w.draft_cache == "sharded":
        R = w.num_reqs
        g = _generator(w, _STREAM_SHARD_ROWS, torch.device("cpu"))
        rows = torch.randperm(R, generator=g)  # request b's row in this rank's cache
        mapping = torch.full((lay.temperature.numel(),), -1, dtype=torch.int32)
        mapping[lay.idx_mapping] = rows.to(torch.int32)
        values = torch.empty(R, *inputs["draft_logits"].shape[1:], dtype=w.draft_dtype, device=device)
        values[rows.to(device)] = inputs["draft_logits"][lay.idx_mapping.to(device)]
        out.update(draft_logits_cache_values=values, draft_logits_row_mapping=mapping.to(device))
    return out


def _contexts(w: Workload, lay: _Layout, draft_sampled: torch.Tensor) -> torch.Tensor:
    """``[N, WATERMARK_CONTEXT_WIDTH]`` int64: the tokens before each row's position."""
    C = WATERMARK_CONTEXT_WIDTH
    R = w.num_reqs
    g = _generator(w, _STREAM_CONTEXTS, torch.device("cpu"))
    history = torch.randint(0, w.vocab_size, (R, C), generator=g)
    tokens = draft_sampled.cpu()
    cu = lay.cu_num_logits
    req_of_row = torch.repeat_interleave(torch.arange(R), lay.num_drafts + 1)
    local = torch.arange(int(cu[-1])) - cu[:-1][req_of_row]
    # entry k of row (r, j) is the token at local position j - C + k: a draft row when >= 0
    # (the anchor at 0), else history[r, C + (j - C + k)].
    at = local[:, None] - C + torch.arange(C)[None, :]
    from_rows = tokens[(cu[:-1][req_of_row][:, None] + at.clamp(min=0))]
    from_history = history[req_of_row[:, None], (C + at).clamp(min=0, max=C - 1)]
    return torch.where(at >= 0, from_rows, from_history).to(torch.int64)


def bytes_required(w: Workload) -> int:
    """Minimal bytes an ideal sampler must move for ``w``.

    Only the layout is built (CPU, cheap); no logits are generated. With ``n_r`` drafts,
    ``m_r`` valid drafts before the first ``-1``, ``s_t``/``s_d`` the target/draft dtype
    sizes and ``g_r`` true for greedy requests::

        bytes = sum_r [ (m_r + 1) * V * s_t                    # target rows 0..m_r
                      + (not g_r and draft logits) * m_r * V * s_d   # draft rows 0..m_r-1
                      + min(m_r + 1, n_r) * 8                  # draft_sampled scanned
                      + needs_rng_r * (m_r + 1) * 4            # pos (RNG counters)
                      + (m_r + 1) * 8 ]                        # sampled tokens written
              + (R + 1) * 4 + R * 4 + R * (4 + 8)              # cu_num_logits, idx_mapping,
                                                               # temperature + seed per slot
              + R * 4                                          # num_sampled written
              + synthetic * K * 4                              # conditional rates

    Why each term:

    - Target rows ``0..m_r - 1`` verify drafts ``d_1..d_m``; row ``m_r`` is where the request
      ends in the best case (bonus row, or plain-target resample at a placeholder, spec 5.2).
      Rows after the first placeholder are never needed (spec 5.5, the saving POST leaves).
    - Draft rows ``0..m_r - 1``: the ratio test of each verified step, and the residual at a
      rejected step (one of these same rows). None for greedy requests or one-hot drafts,
      and none at a placeholder step, which resamples from the plain target.
    - ``draft_sampled``: the valid drafts, plus the first ``-1`` that stops the scan when there
      is one; the anchor is never read.
    - ``pos`` at rows ``0..m_r``: acceptance uniforms and the resample noise key. Greedy
      requests draw no random numbers unless in synthetic mode (``needs_rng_r``).
    - Outputs: ``sampled`` at its largest, ``m_r + 1`` tokens (the accepted count is only known
      after sampling), and ``num_sampled``.
    - ``expanded_idx_mapping``/``expanded_local_pos`` are not counted: a per-request sampler
      derives them from ``cu_num_logits`` and ``idx_mapping``.

    Acceptance outcomes are random, so this is the most a sampler that cannot predict them
    must read: rows after an early rejection cannot be skipped without knowing it in advance.
    """
    lay = _layout(w)
    R, K, V = w.num_reqs, w.num_speculative_steps, w.vocab_size
    s_t = torch.empty((), dtype=w.target_dtype).element_size()
    s_d = torch.empty((), dtype=w.draft_dtype).element_size()
    s_tok, s_i32, s_f32 = 8, 4, 4

    m = lay.num_valid
    non_greedy = ~lay.is_greedy
    has_draft_logits = w.draft == "logits"
    needs_rng = torch.ones_like(non_greedy) if w.mode == "synthetic" else non_greedy

    total = int(((m + 1) * V * s_t).sum())  # target rows 0..m_r
    if has_draft_logits:
        total += int((m * V * s_d)[non_greedy].sum())  # draft rows 0..m_r-1, non-greedy only
    total += int(torch.minimum(m + 1, lay.num_drafts).sum()) * s_tok  # draft_sampled scanned
    total += int((m + 1)[needs_rng].sum()) * s_i32  # pos: RNG counters
    total += int((m + 1).sum()) * s_tok  # sampled, at most m_r + 1 tokens each
    total += (R + 1) * s_i32 + R * s_i32  # cu_num_logits, idx_mapping
    total += R * (s_f32 + 8)  # temperature and seed of each request's slot
    total += R * s_i32  # num_sampled
    if w.mode == "synthetic":
        total += K * s_f32  # synthetic_conditional_rates
    return total


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
