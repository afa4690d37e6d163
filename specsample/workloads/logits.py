"""Logits and draft tokens, generated on the target device: LLM-like target rows, the draft
distribution mixed from them at the workload's agreement, the draft tokens drawn from it, and the
vocabulary masks of the masked-vocabulary path.
"""

from __future__ import annotations

import math

import torch

from .layout import (
    STREAM_DRAFT_NOISE,
    STREAM_DRAFT_SAMPLE,
    STREAM_ROW_ENTROPY,
    STREAM_TARGET,
    STREAM_VOCAB_MASK,
    Layout,
    generator,
)
from .spec import Workload

# Shape of one synthetic LLM next-token distribution (see _peaked_logits). Real LLM rows put
# most mass on a handful of tokens: top-1 between _TOP1_MIN and _TOP1_MAX, a few runners-up,
# and a long Gaussian bulk.
_NUM_HEAD_TOKENS = 4
_TOP1_MIN, _TOP1_MAX = 0.2, 0.9
_RUNNER_UP_SHARE_MIN, _RUNNER_UP_SHARE_MAX = 0.5, 0.9  # of the mass the top-1 leaves over
_BULK_SCALE = 2.0  # std of the bulk logits; the head sits ~15 above them, as in real models

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
    g = generator(w, STREAM_ROW_ENTROPY, torch.device("cpu"))
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
    g = generator(w, STREAM_VOCAB_MASK, torch.device("cpu"))
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


def build_logits_and_drafts(w: Workload, lay: Layout, device: torch.device):
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
    raw = _row_logits(w, N, generator(w, STREAM_TARGET, device), device, _top1_override(w, N, device))
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
    noise = _row_logits(w, R * K, generator(w, STREAM_DRAFT_NOISE, device), device)
    log_q = torch.logaddexp(log_p.add_(log_a), noise.div(draft_temp).log_softmax(dim=1).add_(log_1ma))
    draft_rows = log_q.mul_(draft_temp).to(w.draft_dtype)
    del log_q

    # Non-greedy drafts are drawn from exactly the distribution the sampler will see:
    # softmax(stored draft / T), after rounding to draft_dtype.
    # Inverse-CDF sampling: one uniform per row and a float64 running sum, several times faster
    # than torch.multinomial on CPU at V = 151936. right=True never lands on a zero-mass token.
    cdf = draft_rows.float().div_(draft_temp).softmax(dim=1).cumsum(dim=1, dtype=torch.float64)
    u = torch.rand(R * K, 1, generator=generator(w, STREAM_DRAFT_SAMPLE, device), device=device, dtype=torch.float64)
    sampled = torch.searchsorted(cdf, u * cdf[:, -1:], right=True).clamp_(max=V - 1).view(R, K)
    del cdf

    # Greedy drafts: the target argmax with probability a, otherwise the noise distribution's
    # top token other than the argmax (a confidently wrong draft model).
    noise.scatter_(1, argmax[:, None], -math.inf)
    greedy = torch.where(lay.greedy_match.to(device).flatten(), argmax, noise.argmax(dim=1)).view(R, K)
    del noise

    tokens = torch.where(lay.is_greedy.to(device)[:, None], greedy, sampled)
    return target_logits, draft_rows, tokens
