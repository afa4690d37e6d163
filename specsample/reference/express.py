"""Plain-PyTorch reference of the ``express`` sampler (:mod:`specsample.kernels.express`).

The verification is MRV2's (:mod:`.mrv2`: greedy, standard, block, synthetic, ``-1``
placeholders), with the same acceptance uniforms; the recovered / bonus token is drawn by
**two-level inverse-transform sampling** instead of a Gumbel-max over the whole row:

1. the vocabulary is cut into blocks of :data:`SAMPLE_BLOCK` entries (always the same cut);
2. each block ``b`` of the row to sample gets its mass ``m_b`` and one candidate token, drawn
   inside the block with probability ``r_x / m_b`` by the level-2 uniform of ``(row, b)``
   (a chunk of :data:`CHUNK` entries by its mass, then an entry of it);
3. the row's level-1 uniform picks block ``b`` with probability ``m_b / sum m``; its candidate is
   the token. ``P(x) = r_x / sum r``. (The kernels draw only the chosen block's candidate, after
   level 1; the same draw.)

``r`` is the distribution the spec resamples from (section 3.6): ``softmax(target)`` at the
bonus row or at a placeholder, ``max(p_tau p - q, 0)`` with draft logits (``p_tau = 1`` outside
block verification), ``p`` without the rejected draft for one-hot drafts.

Every draw equals the kernels', bit for bit (:func:`row_words`, :func:`block_uniform`), and so
does every quantity a draw is compared with, up to reduction order: the kernels sum entries in
fp32 over chunks of 32 and in fp64 beyond exactly where this module does (block sum-exps,
residual masses, block masses), and compare in fp64 (LSEs, cumulative log p, thresholds, prefix
sums), so a decision differs only when an fp32 ``exp`` or a 32-entry fp32 sum differs by an ulp
between implementations and that ulp moves a boundary across the uniform (of order one draw in
10**5 on a GPU, rarer on the CPU; see ``docs/performance-log.md``). Both levels pick with
:func:`pick`, whose tie and fallback rules are part of the stream's definition.

The random stream (Philox-4x32-10, :mod:`.philox`; key = the slot's int64 seed, ``pos`` = the
row's position as uint32):

- row words ``w0..w3`` = Philox(``pos, 0, 0, 0``): ``w0`` -> the acceptance uniform of the step
  tested on that row (mrv2's, ``tl.rand`` clamped to ``RAND32_MIN``); ``(w1, w2)`` -> the row's
  level-1 uniform ``((w1 << 21) | (w2 >> 11)) * 2**-53``;
- block words of block ``b`` = Philox(``pos, 1 + b, 0, 0``): ``(w0, w1)`` -> the level-2 uniform
  of that row and block, the same 53-bit construction.

Bytes read by the Triton pipeline (``s_t``/``s_d`` bytes per target/draft logit; ``m_r``
valid drafts before the first ``-1``; ``tau_r`` the accepted count; B = ``SAMPLE_BLOCK``):

- stats: rows ``0..m_r-1`` of non-greedy requests, target and draft (``V * (s_t + s_d)`` each,
  target only one-hot), and row 0's target alone when ``m_r = 0`` (``tau = 0`` for certain, and
  that row is the one to sample); rows ``0..min(m_r, n_r - 1)`` of greedy requests, target only;
- residual mass (block verification with draft logits): rows ``1..m_r-1``, ``V * (s_t + s_d)``;
- resample, one row per request whose block masses are not known yet: ``V * s_t`` for the bonus
  / placeholder row (``tau = m >= 1``) and a greedy request's bonus row, ``V * (s_t + s_d)`` for
  the draft-logits residual at a rejected row (standard ``tau < m``; block ``tau = 0``); nothing
  for a one-hot residual (stats partials), a block residual at ``tau >= 1`` (residual-mass
  partials) or row 0 of a non-greedy request with ``m_r = 0`` (stats partials), nor for a greedy
  rejection;
- insert: the chosen block again, ``B * s_t`` (``B * (s_t + s_d)`` for a draft residual), per
  non-greedy request;
- the serial kernels: ``O(R * K * V / B)`` partials and a few gathers.

Output convention: as :mod:`.mrv2`, ``sampled[r, :num_sampled[r]]`` is the result and this
reference fills the rest with ``-1``.
"""

from __future__ import annotations

import torch

from . import philox
from .mrv2 import PLACEHOLDER_TOKEN_ID, nan_safe_argmax

__all__ = ["SAMPLE_BLOCK", "rejection_sample", "pick", "row_words", "block_uniform", "row_uniform"]

#: Entries per vocabulary block of the two-level sampler (the kernels' ``SAMPLE_BLOCK``).
SAMPLE_BLOCK = 2048
#: Entries per chunk: sums over a chunk are fp32, sums of chunk sums fp64 (the kernels' ``CHUNK``).
CHUNK = 32
_NEG_INF = float("-inf")
_SCALE_53 = 2.0**-53


# ---- the random stream -----------------------------------------------------------------------


def row_words(seed: torch.Tensor, pos: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """Philox(seed; pos, 0, 0, 0): four uint32 words (in int64) per row. ``pos`` as int32."""
    return philox.randint4x(seed, pos.to(torch.int32))


def _bits53(hi: torch.Tensor, lo: torch.Tensor) -> torch.Tensor:
    """``((hi << 21) | (lo >> 11)) * 2**-53``: a uniform in ``[0, 1)`` from two uint32 words."""
    return ((hi << 21) | (lo >> 11)).to(torch.float64) * _SCALE_53


def row_uniform(seed: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
    """Level-1 uniform of a row (fp64): words 1 and 2 of its row words."""
    _, w1, w2, _ = row_words(seed, pos)
    return _bits53(w1, w2)


def block_uniform(seed: torch.Tensor, pos: torch.Tensor, blocks: torch.Tensor) -> torch.Tensor:
    """Level-2 uniforms (fp64): words 0 and 1 of Philox(seed; pos, 1 + b, 0, 0), broadcast over
    ``seed``, ``pos`` (as int32) and the block indices ``blocks``."""
    counter = (pos.to(torch.int32).to(torch.int64) & 0xFFFFFFFF) | ((blocks.to(torch.int64) + 1) << 32)
    w0, w1, _, _ = philox.randint4x(seed, counter)
    return _bits53(w0, w1)


# ---- the inverse CDF -------------------------------------------------------------------------


def pick(weights: torch.Tensor, u: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Inverse-CDF pick along the last dim of non-negative fp64 ``weights`` with uniforms ``u``.

    The index is the first whose prefix sum exceeds ``u * total`` **among positive weights**; if
    none does (``u * total`` at or above every prefix sum, which rounding can cause) the last
    positive weight; if there is none, 0. A zero weight is never picked: fp64 prefix sums of
    non-negative terms need not be monotone (each has its own rounding), so "prefix > threshold"
    alone could land on a zero-weight entry next to a boundary.

    Returns ``(index, total)``, both of shape ``weights.shape[:-1]``.
    """
    size = weights.shape[-1]
    k = torch.arange(size, device=weights.device)
    prefix = torch.cumsum(weights, dim=-1)
    total = weights.sum(dim=-1)
    positive = weights > 0.0
    hit = (prefix > (u * total)[..., None]) & positive
    first = torch.where(hit, k, size).min(dim=-1).values
    last = torch.where(positive, k, -1).max(dim=-1).values
    return torch.where(first < size, first, last.clamp(min=0)), total


# ---- block partials and LSEs (the kernels' stats) -------------------------------------------


def _finite(x: torch.Tensor) -> torch.Tensor:
    return torch.where(torch.isnan(x), _NEG_INF, x)


def _blocks(x: torch.Tensor, fill: float = _NEG_INF) -> torch.Tensor:
    """``[..., V]`` -> ``[..., nb, width]``, padded with ``fill``: ``width = SAMPLE_BLOCK``, or
    ``V`` rounded up to a whole chunk when one block holds the row (the kernels' padding past
    ``V`` changes no max, sum or pick; this only saves the work)."""
    v = x.shape[-1]
    width = SAMPLE_BLOCK if v > SAMPLE_BLOCK else -(-v // CHUNK) * CHUNK
    nb = -(-v // width)
    pad = nb * width - v
    if pad:
        x = torch.nn.functional.pad(x, (0, pad), value=fill)
    return x.reshape(*x.shape[:-1], nb, width)


def _chunked_sum(e: torch.Tensor) -> torch.Tensor:
    """Sums over the last dim (a multiple of CHUNK): fp32 within chunks, fp64 across them."""
    return e.reshape(*e.shape[:-1], -1, CHUNK).sum(dim=-1).double().sum(dim=-1)


def block_stats(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per sampling block of fp32 rows ``[rows, V]``: the max (fp32) and ``sum exp(x - max)``,
    chunked (a ``-inf`` entry, or a block of them, contributes 0)."""
    xb = _blocks(x)
    m = xb.max(dim=-1).values
    e = torch.where(xb == _NEG_INF, 0.0, torch.exp(xb - m[..., None]))
    return m, _chunked_sum(e)


def lse(m: torch.Tensor, s: torch.Tensor) -> torch.Tensor:
    """fp64 log-sum-exp from block partials: ``M + log sum_b s_b exp(m_b - M)``."""
    m = m.double()
    big = m.max(dim=-1).values
    w = torch.where(m == _NEG_INF, 0.0, s * torch.exp(m - big[..., None]))
    return big + torch.log(w.sum(dim=-1))


def _split(value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """fp64 -> fp32 (hi, lo), ``hi = fp32(value)``, ``lo = fp32(value - hi)``."""
    hi = value.float()
    return hi, (value - hi.double()).float()


def residual(
    x: torch.Tensor, y: torch.Tensor, target_lse: torch.Tensor, draft_lse: torch.Tensor, scale: torch.Tensor
) -> torch.Tensor:
    """``max(scale * p - q, 0)`` per entry in fp32, ``p = exp(x - L_t)``, ``q = exp(y - L_d)``,
    the fp64 LSEs (0-d) subtracted as fp32 hi + lo; NaN (an all ``-inf`` row) becomes 0."""
    t_hi, t_lo = _split(target_lse)
    d_hi, d_lo = _split(draft_lse)
    r = scale * torch.exp((x - t_hi) - t_lo) - torch.exp((y - d_hi) - d_lo)
    return torch.where(r > 0.0, r, 0.0)


def _sample_blocks(rb: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Level 2 for every block of one row's fp32 weights, blocked ``[nb, width]``, with the row's
    level-2 uniforms ``v [nb]``: (candidate token ids [nb], block masses [nb] fp64).

    Within a block: a chunk of CHUNK entries by :func:`pick` over the chunk masses (fp32 sums,
    then fp64), then an entry of that chunk by :func:`pick` with the uniform's remainder
    rescaled to the chunk, ``(v * total - mass before the chunk) / chunk mass``.
    """
    nb, width = rb.shape
    chunks = rb.reshape(nb, width // CHUNK, CHUNK)
    chunk_mass = chunks.sum(dim=-1).double()  # [nb, chunks]
    j, total = pick(chunk_mass, v)
    c = torch.arange(chunk_mass.shape[1], device=rb.device)
    before = torch.where(c < j[:, None], chunk_mass, 0.0).sum(dim=-1)
    mass_j = chunk_mass.gather(1, j[:, None])[:, 0]
    t = torch.where(mass_j > 0.0, (v * total - before) / mass_j, 0.0)
    inner = chunks[torch.arange(nb, device=rb.device), j].double()  # [nb, CHUNK]
    i, _ = pick(inner, t)
    return torch.arange(nb, device=rb.device) * SAMPLE_BLOCK + j * CHUNK + i, total


def _choose(weights: torch.Tensor, u: torch.Tensor) -> int:
    """Level 1: the block index picked by the row's level-1 uniform ``u``."""
    index, _ = pick(weights, u)
    return int(index)


def _log_mass_weights(log_mass: torch.Tensor) -> torch.Tensor:
    big = log_mass.max()
    return torch.where(log_mass == _NEG_INF, 0.0, torch.exp(log_mass - big))


# ---- the sampler -----------------------------------------------------------------------------


def rejection_sample(
    target_logits: torch.Tensor,
    draft_logits: torch.Tensor | None,
    draft_sampled: torch.Tensor,
    cu_num_logits: torch.Tensor,
    pos: torch.Tensor,
    idx_mapping: torch.Tensor,
    expanded_idx_mapping: torch.Tensor,
    expanded_local_pos: torch.Tensor,
    temperature: torch.Tensor,
    seed: torch.Tensor,
    num_speculative_steps: int,
    *,
    synthetic_conditional_rates: torch.Tensor | None = None,
    use_fp64: bool = False,
    use_block_verification: bool = False,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The ``express`` sampler; arguments and outputs as :func:`specsample.reference.mrv2.rejection_sample`.

    ``use_fp64`` is accepted and has no effect (every comparison is already fp64).
    """
    del expanded_idx_mapping, expanded_local_pos, use_fp64
    if synthetic_conditional_rates is not None and use_block_verification:
        raise ValueError("synthetic acceptance rates cannot be combined with block verification")
    device = target_logits.device
    num_reqs = idx_mapping.numel()
    k = num_speculative_steps
    vocab = target_logits.shape[-1]
    if draft_logits is not None:
        vocab = min(vocab, draft_logits.shape[-1])
    sampled = torch.full((num_reqs, k + 1), PLACEHOLDER_TOKEN_ID, dtype=torch.int64, device=device)
    num_sampled = torch.zeros(num_reqs, dtype=torch.int32, device=device)
    if num_reqs == 0:
        return sampled, num_sampled

    cu = cu_num_logits.tolist()
    slots = idx_mapping.tolist()
    drafts_host = draft_sampled.tolist()
    rates = synthetic_conditional_rates.float() if synthetic_conditional_rates is not None else None

    # Every draw of every row, keyed by (seed of the row's slot, pos): the acceptance uniforms
    # [N] (fp32), the level-1 uniforms [N] and the level-2 uniforms [N, nb] (fp64).
    num_rows = cu[-1]
    row_counts = torch.tensor([cu[r + 1] - cu[r] for r in range(num_reqs)], device=device)
    row_seed = seed.to(device)[torch.repeat_interleave(idx_mapping.to(device=device, dtype=torch.int64), row_counts)]
    row_pos = pos[:num_rows].to(device)
    w0, w1, w2, _ = row_words(row_seed, row_pos)
    accept_u = torch.clamp_min(philox.uint_to_uniform_float(w0), philox.RAND32_MIN)
    level1_u = _bits53(w1, w2)
    blocks = torch.arange(-(-vocab // SAMPLE_BLOCK), device=device)
    level2_u = block_uniform(row_seed[:, None], row_pos[:, None], blocks[None, :])

    for r in range(num_reqs):
        c, c_next = cu[r], cu[r + 1]
        n = c_next - c - 1
        slot = slots[r]
        # A 1-element fp32 device tensor: 1.0 / temp is then the IEEE fp32 reciprocal, the
        # kernels' div_rn(1, T), on any device.
        temp = temperature[slot].reshape(1).to(device=device, dtype=torch.float32)
        drafts = drafts_host[c + 1 : c + n + 1]  # drafts[i] = d_{i+1}, tested against row c + i
        m = next((i for i, d in enumerate(drafts) if d < 0), n)
        d = torch.tensor([max(t, 0) for t in drafts], dtype=torch.int64, device=device)
        target = _finite(target_logits[c:c_next, :vocab].float())  # [n + 1, V]
        u = accept_u[c:c_next]  # u[i]: the acceptance uniform of step i (row c + i)
        v = level2_u[c:c_next]  # v[i, b]: level-2 uniform of row c + i, block b

        if temp.item() == 0.0:
            tau, token = _greedy(target, drafts, u, rates, n)
            sampled[r, :tau] = d[:tau]
            sampled[r, tau] = token
            num_sampled[r] = tau + 1
            continue

        # ---- stats of the rows a non-greedy request reads (all rows here; the extra are unused)
        t_max, t_sum = block_stats(target)
        t_lse = lse(t_max, t_sum)  # [n + 1] fp64
        y = d_lse = None
        if draft_logits is not None and n > 0:
            # Pre-temperature draft logits, divided by T after the upcast (PR #50910): times the
            # IEEE fp32 reciprocal of T, as the kernels do (one rounding, reproducible on a GPU).
            y = _finite(draft_logits[slot, :n, :vocab].float() * (1.0 / temp))
            d_max, d_sum = block_stats(y)
            d_lse = lse(d_max, d_sum)
        steps = torch.arange(m, device=device)
        lp = target[steps, d[:m]].double() - t_lse[:m]  # log p(d_{i+1}) at row c + i
        lq = (y[steps, d[:m]].double() - d_lse[:m]) if y is not None else torch.zeros_like(lp)

        if use_block_verification:
            tau, cum_log_p, cand, mass = _block_verify(target, y, t_lse, d_lse, lp, lq, d, u, m, v)
        else:
            tau = _standard_verify(lp, lq, u, rates, m)
        sampled[r, :tau] = d[:tau]
        num_sampled[r] = tau + 1

        # ---- the token of row c + tau (spec 3.6, POST)
        rejected = drafts[tau] if tau < n else PLACEHOLDER_TOKEN_ID
        u_row = level1_u[c + tau]
        if rejected < 0:
            # bonus row, or a placeholder (never drawn): softmax(target)
            xb = _blocks(target[tau])
            bmax = xb.max(dim=-1).values
            weights = torch.where(xb == _NEG_INF, 0.0, torch.exp(xb - bmax[:, None]))
            cands, block_mass = _sample_blocks(weights, v[tau])
            log_mass = bmax.double() + torch.log(block_mass)
            token = cands[_choose(_log_mass_weights(log_mass), u_row)]
        elif y is not None:
            if use_block_verification and tau > 0:
                # the residual-mass pass drew each block's candidate of row tau already
                token = cand[tau][_choose(mass[tau], u_row)]
            else:
                one = torch.ones((), dtype=torch.float32, device=device)
                weights = residual(target[tau], y[tau], t_lse[tau], d_lse[tau], one)
                cands, block_mass = _sample_blocks(_blocks(weights, fill=0.0), v[tau])
                token = cands[_choose(_log_mass_weights(torch.log(block_mass)), u_row)]
        else:
            token = _one_hot_residual(target[tau], t_max[tau], t_sum[tau], rejected, u_row, v[tau])
        sampled[r, tau] = token
    return sampled, num_sampled


def _greedy(
    target: torch.Tensor, drafts: list[int], u: torch.Tensor, rates: torch.Tensor | None, n: int
) -> tuple[int, torch.Tensor]:
    """mrv2's greedy path: the first argmax at each row (NaN as -inf); at a placeholder the argmax
    is stored and the step rejected; the bonus row (all accepted) is a plain argmax."""
    argmax = nan_safe_argmax(target)
    tau = 0
    while tau < n:
        valid = drafts[tau] >= 0
        ok = bool(u[tau] < rates[tau]) if rates is not None else int(argmax[tau]) == drafts[tau]
        if not (ok and valid):
            break
        tau += 1
    return tau, argmax[tau]


def _standard_verify(lp: torch.Tensor, lq: torch.Tensor, u: torch.Tensor, rates: torch.Tensor | None, m: int) -> int:
    """Leviathan et al. over the ``m`` valid drafts, in fp64: accept iff ``log p > log u + log q``
    (strict); synthetic: iff ``u < rate`` (fp32). tau = the leading acceptances."""
    if rates is not None:
        accepted = u[:m] < rates[:m]
    else:
        accepted = lp > torch.log(u[:m].double()) + lq
    return int(torch.cumprod(accepted.to(torch.int32), dim=0).sum()) if m else 0


def _block_verify(target, y, t_lse, d_lse, lp, lq, d, u, m, v):
    """Block verification (Sun et al.) over the ``m`` valid drafts, in fp64.

    Returns ``tau = max{i + 1 : u_i <= h_i}`` (0 if none), ``cum_log_p [m]`` and, with draft
    logits, the residual-mass pass's per-block candidates and masses of rows ``1..m-1``
    (``{row: tensor [nb]}``).
    """
    device = target.device
    cum_log_p = torch.zeros(m, dtype=torch.float64, device=device)
    running = torch.zeros((), dtype=torch.float64, device=device)
    for i in range(m):
        running = torch.clamp_max(running + lp[i] - lq[i], 0.0)
        cum_log_p[i] = running
    pi = torch.exp(cum_log_p)
    cand, mass = {}, {}
    if y is not None:
        for j in range(1, m):
            # max(p_j M_b - M_s, 0) at row j, p_j = exp(cum_log_p[j - 1]) as fp32
            scale = torch.exp(cum_log_p[j - 1]).float()
            weights = residual(target[j], y[j], t_lse[j], d_lse[j], scale)
            cand[j], mass[j] = _sample_blocks(_blocks(weights, fill=0.0), v[j])
    tau = 0
    for i in range(m):
        if i < m - 1:
            if y is not None:
                z = mass[i + 1].sum()
            else:
                z = pi[i] * (1.0 - torch.exp(target[i + 1, d[i + 1]].double() - t_lse[i + 1]))
            denom = z + 1.0 - pi[i]
            h = z / denom if denom > 0.0 else torch.ones((), dtype=torch.float64, device=device)
        else:
            h = pi[i]  # end of the block: h = p_m
        if u[i].double() <= h:
            tau = i + 1
    return tau, cum_log_p, cand, mass


def _one_hot_residual(
    x: torch.Tensor, t_max: torch.Tensor, t_sum: torch.Tensor, rejected: int, u_row: torch.Tensor, v: torch.Tensor
) -> torch.Tensor:
    """p without the rejected draft: level 1 from the stats partials (d's own term removed from
    its block's sum-exp), then level 2 inside the chosen block only."""
    d_block = rejected // SAMPLE_BLOCK
    x_d = x[rejected]
    e_d = torch.where(x_d == _NEG_INF, 0.0, torch.exp(x_d - t_max[d_block])).double()
    s = t_sum.clone()
    s[d_block] = torch.clamp_min(s[d_block] - e_d, 0.0)
    m = t_max.double()
    w = torch.where(m == _NEG_INF, 0.0, s * torch.exp(m - m.max()))
    b = _choose(w, u_row)
    xb = _blocks(x)[b]
    r = torch.where(xb == _NEG_INF, 0.0, torch.exp(xb - xb.max()))
    offs = b * SAMPLE_BLOCK + torch.arange(xb.shape[0], device=x.device)
    r = torch.where(offs == rejected, 0.0, r)
    token, _ = _sample_blocks(r[None, :], v[b : b + 1])
    return token[0] + b * SAMPLE_BLOCK
