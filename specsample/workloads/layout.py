"""The layout and metadata of a workload's batch, drawn on the CPU so they are identical on every
device (draft counts, placeholder positions, greedy requests, slots, ``pos``, ``temperature``,
``seed``, anchors), and the seeded generators every kind of randomness draws from.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import torch

from .spec import Workload

# Absolute positions: each request starts at a random context length in this range.
_POS_MIN, _POS_MAX = 16, 8192

# One generator per kind of randomness (:mod:`specsample.workloads`: determinism). Append-only.
STREAM_NUM_DRAFTS = 1
STREAM_GREEDY = 2
STREAM_PLACEHOLDERS = 3
STREAM_SLOTS = 4
STREAM_POS = 5
STREAM_SEEDS = 6
STREAM_ANCHORS = 7
STREAM_GREEDY_MATCH = 8
STREAM_TARGET = 9
STREAM_DRAFT_NOISE = 10
STREAM_DRAFT_SAMPLE = 11
STREAM_ROW_ENTROPY = 12
STREAM_VOCAB_MASK = 13
STREAM_CONTEXTS = 14
STREAM_SHARD_ROWS = 15


def generator(w: Workload, stream: int, device: torch.device) -> torch.Generator:
    # seed < 2**32 and stream < 2**8, so every (seed, stream) pair gets its own state.
    return torch.Generator(device=device).manual_seed((w.seed << 8) | stream)


@dataclass(frozen=True)
class Layout:
    """A workload's batch layout and metadata (CPU tensors; ``N = sum_r (n_r + 1)`` rows)."""

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


def build_layout(w: Workload) -> Layout:
    cpu = torch.device("cpu")
    R, K = w.num_reqs, w.num_speculative_steps
    M = w.max_num_reqs if w.max_num_reqs is not None else R

    num_drafts = _num_drafts(w, generator(w, STREAM_NUM_DRAFTS, cpu))
    cu = torch.zeros(R + 1, dtype=torch.int64)
    cu[1:] = torch.cumsum(num_drafts + 1, 0)
    N = int(cu[-1])
    req_of_row = torch.repeat_interleave(torch.arange(R), num_drafts + 1)
    local_pos = torch.arange(N) - cu[:-1][req_of_row]

    is_placeholder = _placeholder_mask(w, num_drafts, req_of_row, local_pos, generator(w, STREAM_PLACEHOLDERS, cpu))
    # m_r: the first placeholder's local position minus one, or n_r when there is none.
    first_hit = torch.where(is_placeholder, local_pos - 1, num_drafts[req_of_row])
    num_valid = torch.full((R,), K, dtype=torch.int64).scatter_reduce(0, req_of_row, first_hit, "amin")

    g = generator(w, STREAM_GREEDY, cpu)
    num_greedy = R if w.mode == "greedy" else math.floor(w.greedy_fraction * R + 0.5)
    is_greedy = torch.zeros(R, dtype=torch.bool)
    is_greedy[torch.randperm(R, generator=g)[:num_greedy]] = True

    g = generator(w, STREAM_SLOTS, cpu)
    idx_mapping = torch.randperm(M, generator=g)[:R] if M > R else torch.arange(R)

    g = generator(w, STREAM_POS, cpu)
    start = torch.randint(_POS_MIN, _POS_MAX, (R,), generator=g)
    pos = start[req_of_row] + local_pos

    temperature = torch.full((M,), float(w.temperature), dtype=torch.float32)
    temperature[idx_mapping[is_greedy]] = 0.0

    # Distinct seeds in [0, 2**31): sorted draws plus 0..M-1 cannot collide; then shuffle.
    # Kept below 2**31 so that a kernel truncating the Philox key to 32 bits still sees
    # distinct keys.
    g = generator(w, STREAM_SEEDS, cpu)
    draws = torch.randint(0, 2**31 - M, (M,), generator=g).sort().values + torch.arange(M)
    seed = draws[torch.randperm(M, generator=g)]

    g = generator(w, STREAM_ANCHORS, cpu)
    anchors = torch.randint(0, w.vocab_size, (R,), generator=g)

    g = generator(w, STREAM_GREEDY_MATCH, cpu)
    greedy_match = torch.rand((R, K), generator=g, dtype=torch.float64) < w.agreement

    return Layout(
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
