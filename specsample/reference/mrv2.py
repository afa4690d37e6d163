"""Plain-PyTorch reference of the post-#50939 MRV2 rejection sampler.

This is the readable statement of what the Triton pipeline in :mod:`specsample.kernels` computes
(``docs/algorithm.md``, ``docs/placeholders.md``). It loops over
requests, vectorises over draft steps and the vocabulary, and runs on CPU or CUDA. Every random
draw is bit-identical to the kernels' (see :mod:`specsample.reference.philox`), so on the same inputs both
make the same decisions except where an fp32 rounding difference flips a comparison that sits
within an ulp of its threshold (the kernels reduce in a different order and use GPU ``exp``).

Shapes
------
``R`` requests, ``K`` = ``num_speculative_steps``, ``N = sum_r (n_r + 1)`` logit rows, request
``r`` owning rows ``[c_r, c_{r+1})`` with ``n_r = c_{r+1} - c_r - 1 <= K`` drafts, and
``V = min(V_target, V_draft)`` (``V_target`` without draft logits).

Bytes read by the Triton pipeline (the bandwidth model for the benchmarks)
------------------------------------------------------------------------------
With ``s_t`` / ``s_d`` bytes per target / draft logit and ``N_s`` = rows with local position
``< K`` (every row except full-length requests' bonus rows):

- kernel 1 (stats): ``N_s * V * s_t`` target, plus ``N_s' * V * s_d`` draft where ``N_s'``
  counts those rows of non-greedy requests (draft logits only); placeholders do not help here;
- kernel 3 (residual mass; block verification, draft logits, non-greedy): ``V * (s_t + s_d)``
  per row with local position ``j`` in ``[1, K-1]`` whose tested draft
  ``draft_sampled[row + 1]`` is valid;
- kernels 2, 4 (serial): ``O(R * K * ceil(V / 8192))`` partials plus a few gathers, negligible;
- kernel 5 (resample): ``V * s_t`` per non-greedy request and per greedy request that accepted
  everything, plus ``V * s_d`` when the row is resampled from the draft-logits residual
  (non-greedy, draft logits, ``tau < n_r`` and ``d_{tau+1} >= 0``);
- writes: ``R * (K + 1) * 8`` bytes of tokens and ``R * 4`` of counts, plus small partials.

Output convention
-----------------
``sampled[r, :num_sampled[r]]`` is the result. The kernels leave ``sampled[r, num_sampled[r]:]``
uninitialised; this reference fills it with ``-1``. Compare only the first ``num_sampled[r]``
columns.
"""

from __future__ import annotations

import torch

from . import philox

__all__ = ["rejection_sample", "gumbel_noise", "nan_safe_argmax"]

PLACEHOLDER_TOKEN_ID = -1
_NEG_INF = float("-inf")
# Elements per batched noise evaluation in the resample phase (bounds Philox temporaries).
_RESAMPLE_CHUNK_ELEMS = 1 << 24


def nan_safe_argmax(x: torch.Tensor, dim: int = -1) -> torch.Tensor:
    """Index of the first maximum along ``dim``, with NaN treated as ``-inf``.

    ``torch.argmax`` returns the first maximal index but treats NaN as the maximum. The kernels
    map NaN block maxima to ``-inf`` so that the index always lies in ``[0, V)``; an all-NaN or
    all-``-inf`` row gives index 0.

    Parameters
    ----------
    x : Tensor
        Floating tensor, ``[..., V]``.

    Returns
    -------
    Tensor
        int64 indices, ``x.shape`` without ``dim``.
    """
    return torch.where(torch.isnan(x), _NEG_INF, x).argmax(dim=dim)


def gumbel_noise(gseed: torch.Tensor, vocab_size: int, *, use_fp64: bool = False) -> torch.Tensor:
    """Gumbel noise of resample rows, keyed by each row's ``gseed`` and the token id.

    Parameters
    ----------
    gseed : Tensor
        int64 tensor ``[...]`` of uint32 words ``tl.randint(seed, pos[t] as int32)``, one per
        resample row.
    vocab_size : int
        ``V``; token ids ``0..V-1`` are the int32 Philox offsets.
    use_fp64 : bool
        fp32 (default): ``u = max(tl.rand(gseed, v), RAND32_MIN)`` and the "flipped" form
        ``-log(-log1p(-u))``, all in fp32. fp64: ``u = rand64(gseed, v)`` and
        ``-log(-log(u))`` in fp64.

    Returns
    -------
    Tensor
        ``[..., V]``, fp32 or fp64.
    """
    tok = torch.arange(vocab_size, dtype=torch.int32, device=gseed.device)
    gseed = gseed[..., None]
    if use_fp64:
        u = philox.rand64(gseed, tok)
        return -torch.log(-torch.log(u))
    u = philox.rand_clamped(gseed, tok)
    # log1p keeps resolution in the winning tail u -> 0, where fp32 has it.
    return -torch.log(-torch.log1p(-u))


def _log_softmax_rows(x: torch.Tensor) -> torch.Tensor:
    """``x - logsumexp(x)`` along the last dim, in x's (fp32) dtype."""
    return x - torch.logsumexp(x, dim=-1, keepdim=True)


def _num_leading_true(mask: torch.Tensor) -> int:
    """Length of the all-True prefix of a 1-D bool tensor."""
    return int(torch.cumprod(mask.to(torch.int32), dim=0).sum().item())


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
    """Verify draft tokens against the target model and sample the recovered / bonus token.

    Parameters
    ----------
    target_logits : Tensor
        ``[N, V_target]`` fp32/bf16/fp16, already divided by the temperature (and otherwise
        processed). Rows may be strided; the last stride is 1.
    draft_logits : Tensor or None
        ``[max_num_reqs, K, V_draft]``, pre-temperature: divided by ``T`` after the fp32 upcast.
        ``None`` means a one-hot draft (``q(d) = 1``).
    draft_sampled : Tensor
        ``[N]`` int32/int64; ``draft_sampled[c_r + j]`` is input token ``x_j`` (``x_0`` = the
        anchor, never tested). ``-1`` is a placeholder.
    cu_num_logits : Tensor
        ``[R + 1]`` int32 row prefix sums.
    pos : Tensor
        ``[N]`` int, absolute positions; cast to int32 for the Philox counter.
    idx_mapping : Tensor
        ``[R]`` int32, request -> request-state slot.
    expanded_idx_mapping, expanded_local_pos : Tensor
        ``[N]`` int32 row -> slot and row -> local position. Accepted for signature parity with
        the kernels; the reference derives both from ``cu_num_logits`` and ``idx_mapping`` and
        assumes they agree.
    temperature : Tensor
        ``[max_num_reqs]`` fp32 per slot; ``0`` selects greedy for that request.
    seed : Tensor
        ``[max_num_reqs]`` int64 per-slot Philox seed.
    num_speculative_steps : int
        ``K``, the largest number of drafts per request.
    synthetic_conditional_rates : Tensor, optional
        ``[K]`` fp32: accept step ``i`` iff ``u_i < rate[i]`` (and the draft is valid).
        Not combinable with block verification.
    use_fp64 : bool
        fp64 Gumbel noise (and fp64 scores) in the resample step.
    use_block_verification : bool
        Sun et al. block verification for non-greedy requests.

    Returns
    -------
    sampled : Tensor
        ``[R, K + 1]`` int64: accepted drafts in columns ``0..tau-1``, the recovered or bonus
        token in column ``tau``, ``-1`` beyond (the kernels leave those uninitialised).
    num_sampled : Tensor
        ``[R]`` int32, ``tau + 1``.
    """
    del expanded_idx_mapping, expanded_local_pos  # implied by cu_num_logits / idx_mapping
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

    # Host copies of the small index tensors that drive control flow.
    cu = cu_num_logits.tolist()
    slots = idx_mapping.tolist()
    drafts_host = draft_sampled.tolist()
    rates = None
    if synthetic_conditional_rates is not None:
        rates = synthetic_conditional_rates.to(device=device, dtype=torch.float32)

    # One Philox word per row, keyed by (seed[slot], pos as int32). Its float form, clamped away
    # from 0, is the acceptance uniform of the step tested on that row; the word itself seeds the
    # Gumbel noise when that row is resampled. Both depend only on the request's seed and the
    # absolute position, never on the batch layout.
    num_rows = cu[-1]
    row_counts = torch.tensor([cu[r + 1] - cu[r] for r in range(num_reqs)], device=device)
    row_slot = torch.repeat_interleave(idx_mapping.to(device=device, dtype=torch.int64), row_counts)
    pos32 = pos[:num_rows].to(device=device, dtype=torch.int32)
    row_words = philox.randint(seed.to(device)[row_slot], pos32)  # [N] uint32 in int64
    row_u = torch.clamp_min(philox.uint_to_uniform_float(row_words), philox.RAND32_MIN)  # [N] fp32

    # Phase 1, per request: decide tau and build the residual logits rho of row c + tau.
    resample_reqs: list[int] = []
    resample_rows: list[int] = []
    resample_rho: list[torch.Tensor] = []
    for r in range(num_reqs):
        c, c_next = cu[r], cu[r + 1]
        n = c_next - c - 1
        slot = slots[r]
        # A 1-element device tensor, not a Python float: on CUDA, dividing by a CPU scalar
        # multiplies by its reciprocal, which is not the kernels' IEEE division.
        temp = temperature[slot].reshape(1).to(device=device, dtype=torch.float32)
        greedy = temp.item() == 0.0

        # drafts[i] = d_{i+1}, the draft that step i tests against row c + i.
        drafts = drafts_host[c + 1 : c + n + 1]
        m = next((i for i, d in enumerate(drafts) if d < 0), n)  # valid drafts before first -1
        drafts_dev = draft_sampled[c + 1 : c + n + 1].to(device=device, dtype=torch.int64)
        u = row_u[c : c + n]  # u[i] = acceptance uniform of step i
        target = target_logits[c:c_next, :vocab].float()  # [n + 1, V]

        if greedy:
            tau, row_token = _greedy(target, drafts_dev, u, rates, n)
            sampled[r, :tau] = drafts_dev[:tau]
            sampled[r, tau] = row_token  # argmax at the rejected slot, or of the bonus row
            num_sampled[r] = tau + 1
            continue

        target_logp = _log_softmax_rows(target)
        draft_logp = None
        if draft_logits is not None and n > 0:
            # Pre-temperature draft logits, divided by T after the upcast (PR #50910).
            draft_logp = _log_softmax_rows(draft_logits[slot, :n, :vocab].float() / temp)

        cum_log_p = None
        if use_block_verification:
            tau, cum_log_p = _block_verify(target_logp, draft_logp, drafts_dev, u, m)
        else:
            tau = _standard_verify(target_logp, draft_logp, drafts_dev, u, rates, m)
        sampled[r, :tau] = drafts_dev[:tau]
        num_sampled[r] = tau + 1

        # Row c + tau is the bonus row, or the row whose draft d_{tau+1} was rejected.
        rejected = drafts[tau] if tau < n else PLACEHOLDER_TOKEN_ID
        if rejected < 0:
            # Bonus row, or a placeholder: no draft was drawn here, so sample the plain target.
            # (A copy, so that the kept row does not pin this request's whole upcast block.)
            rho = target[tau].clone()
        elif draft_logp is not None:
            # log max(p_tau * p - q, 0), with p_tau the block prefix ratio (1 outside block mode).
            a = target_logp[tau]
            if cum_log_p is not None and tau > 0:
                a = a + cum_log_p[tau - 1]
            g = draft_logp[tau]
            ratio = torch.exp(g - a)
            rho = torch.where(ratio < 1.0, a + torch.log1p(-ratio), _NEG_INF)
        else:
            # One-hot residual: p with the rejected token removed (p_tau cancels in block mode).
            rho = target[tau].clone()
            rho[rejected] = _NEG_INF
        resample_reqs.append(r)
        resample_rows.append(c + tau)
        resample_rho.append(rho)

    # Phase 2, batched over the non-greedy requests: Gumbel-max over rho + noise(gseed, v).
    # Chunked so that the Philox temporaries stay small at production vocab sizes.
    chunk = max(1, _RESAMPLE_CHUNK_ELEMS // max(vocab, 1))
    for start in range(0, len(resample_reqs), chunk):
        reqs = torch.tensor(resample_reqs[start : start + chunk], device=device)
        rows = torch.tensor(resample_rows[start : start + chunk], device=device)
        rho = torch.stack(resample_rho[start : start + chunk])  # [chunk, V] fp32
        noise = gumbel_noise(row_words[rows], vocab, use_fp64=use_fp64)  # [chunk, V]
        score = (rho.double() if use_fp64 else rho) + noise
        sampled[reqs, num_sampled[reqs].long() - 1] = nan_safe_argmax(score)

    return sampled, num_sampled


def _greedy(
    target: torch.Tensor,
    drafts: torch.Tensor,
    u: torch.Tensor,
    rates: torch.Tensor | None,
    n: int,
) -> tuple[int, torch.Tensor]:
    """Greedy (T == 0) verification; returns ``tau`` and the token for column ``tau``.

    Greedy is exempt from the placeholder short-circuit: a ``-1`` step still computes the
    argmax, is rejected by the validity check, and stores the argmax. The bonus row (all
    accepted) is a plain argmax with no noise, so no step needs a resample.
    """
    argmax = nan_safe_argmax(target)  # [n + 1], one per row incl. the bonus row
    valid = drafts >= 0
    if rates is not None:
        accepted = valid & (u < rates[:n])
    else:
        accepted = valid & (argmax[:n] == drafts)
    tau = _num_leading_true(accepted)
    return tau, argmax[tau]


def _standard_verify(
    target_logp: torch.Tensor,
    draft_logp: torch.Tensor | None,
    drafts: torch.Tensor,
    u: torch.Tensor,
    rates: torch.Tensor | None,
    m: int,
) -> int:
    """Token-level (Leviathan) verification over the ``m`` valid drafts before the first -1.

    Accept step ``i`` iff ``log p(d) > log u_i + log q(d)`` (strict; ``log q = 0`` one-hot), or
    iff ``u_i < rate[i]`` in synthetic mode. ``tau`` is the number of leading acceptances.
    """
    if m == 0:
        return 0
    if rates is not None:
        return _num_leading_true(u[:m] < rates[:m])
    d = drafts[:m]
    steps = torch.arange(m, device=d.device)
    lp = target_logp[steps, d]
    rhs = torch.log(u[:m])
    if draft_logp is not None:
        rhs = rhs + draft_logp[steps, d]
    return _num_leading_true(lp > rhs)


def _block_verify(
    target_logp: torch.Tensor,
    draft_logp: torch.Tensor | None,
    drafts: torch.Tensor,
    u: torch.Tensor,
    m: int,
) -> tuple[int, torch.Tensor]:
    """Block verification (Sun et al., Alg. 2) over the ``m`` valid drafts before the first -1.

    Returns ``tau = max{i + 1 : u_i <= h_i}`` (0 if none) and ``cum_log_p`` ``[m]``, where
    ``cum_log_p[i] = log p_{i+1} = min(cum_log_p[i-1] + log p(d) - log q(d), 0)``. The block is
    truncated at the first placeholder, so the last valid draft gets the end-of-block threshold
    ``h = p_m``. (The kernel carries ``L`` through placeholders and keeps updating it after them;
    those later values are never read.)
    """
    device = target_logp.device
    cum_log_p = torch.zeros(m, dtype=torch.float32, device=device)
    if m == 0:
        return 0, cum_log_p
    d = drafts[:m]
    steps = torch.arange(m, device=device)
    lp = target_logp[steps, d]
    lq = draft_logp[steps, d] if draft_logp is not None else torch.zeros_like(lp)

    # Serial prefix scan with the min(., 0) clamp, in fp32, same association as the kernel.
    running = torch.zeros((), dtype=torch.float32, device=device)
    for i in range(m):
        running = torch.clamp_max(running + lp[i] - lq[i], 0.0)
        cum_log_p[i] = running
    pi = torch.exp(cum_log_p)  # [m], p_{i+1}

    # h_i for steps with a valid next draft (i < m - 1): Z_{i+2} / (Z_{i+2} + 1 - p_{i+1}).
    h = pi.clone()  # end of block: h = p_m
    if m > 1:
        nxt = torch.arange(1, m, device=device)  # rows c + i + 1, and draft steps i + 1
        pi_b = pi[:-1]
        if draft_logp is not None:
            # Residual mass sum_x max(p_{i+1} * M_b(x) - M_s(x), 0) of row c + i + 1.
            resid = pi_b[:, None] * torch.exp(target_logp[nxt]) - torch.exp(draft_logp[nxt])
            z = torch.clamp_min(resid, 0.0).sum(dim=-1)
        else:
            # One-hot closed form: p_{i+1} * (1 - M_b(d_{i+2})).
            z = pi_b * (1.0 - torch.exp(target_logp[nxt, d[1:]]))
        denom = z + 1.0 - pi_b
        h[:-1] = torch.where(denom > 0.0, z / denom, torch.ones_like(z))

    passed = (u[:m] <= h).nonzero()
    tau = int(passed.max().item()) + 1 if passed.numel() else 0
    return tau, cum_log_p
