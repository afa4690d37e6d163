"""Vectorized PyTorch rejection sampler: mrv2's algorithm and random draws, batched over requests.

This is how a PyTorch user would write the post-#50939 MRV2 sampler for speed: every step is a
batched tensor op over all requests at once, with no Python loop over requests, no host
synchronisation (no ``.item()``, ``.tolist()``, ``nonzero()`` or boolean-mask indexing) and no
output shape that depends on the data, so the call can be captured in a CUDA graph. It is the
``torch-eager`` subject. :mod:`specsample.reference.mrv2` stays the readable statement of the
algorithm (a loop over requests); this module computes the same thing and draws the same Philox
numbers (``docs/algorithm.md``, ``docs/placeholders.md``), so
on the same inputs both emit the same tokens except where an fp32 rounding difference flips a
comparison that sits within an ulp of its threshold (reductions over differently shaped tensors
may round differently, most of all on the GPU).

Layout
------
Drafts are padded to ``[R, K]`` (``-1`` past ``n_r``) and request ``r``'s rows to ``[R, K + 1]``
row indices ``c_r + min(j, n_r)`` (every index in range; steps past ``n_r`` are masked out).
Per-row statistics (nan-safe argmax, ``logsumexp``) are computed once over the ``[N, V]`` target
rows and the ``[R, K, V]`` draft rows, then gathered. Everything is computed for every request
whatever its mode, and ``torch.where`` picks the greedy or non-greedy result per request.

Loops that remain, none over requests and none data-dependent (their trip counts depend on
shapes only):

- the block-verification prefix scan ``L_i = min(L_{i-1} + log p(d) - log q(d), 0)``: ``K``
  steps, each a batched op over ``R``. A closed form (``S_i - max(0, max_{k<=i} S_k)`` with
  ``S`` a ``cumsum``) exists in exact arithmetic but associates differently in fp32, and mrv2's
  kernel runs the serial recursion;
- fixed-size chunks over rows (``_ROW_CHUNK_ELEMS`` elements per ``[rows, V]`` temporary) and,
  for the Gumbel noise, over the vocabulary (``_NOISE_CHUNK_ELEMS`` Philox elements per chunk).
  They bound the temporaries: at ``R = 512, K = 4, V = 151936`` the call needs about 1 GB of
  memory beyond its inputs (1.0-1.1 GiB peak RSS measured on CPU, standard and block).

Cost
----
Unfused, so bandwidth-bound on its temporaries: standard mode with draft logits at
``R = 512, K = 4, V = 151936`` runs about 3300 kernels moving about 155 GB (the inputs are
2.2 GB), three quarters of it the int64 Philox of the ``R x V`` Gumbel noise; at ``R = 1``
about 390 kernels, so launch-bound even inside a CUDA graph. (Counted with a dispatch mode on
meta tensors; greedy requests pay for the noise too, since skipping it would need a host read.)

Philox in int64 tensor ops
--------------------------
:func:`_philox` is Philox-4x32-10 as in :mod:`specsample.reference.philox` (Triton 3.6's key
derivation and counters), written for speed: a 32 x 32 -> 64 bit product is one int64
multiply whose two's-complement wrap-around keeps the low 64 bits of the unsigned product
(``hi = (p >> 32) & mask``, ``lo = p & mask``); words that are only XORed into a masked
result are left unmasked; the key schedule stays ``[R, 1]`` and the counter ``[V]`` until they
meet. That is about 10 full-size int64 ops per round, against about 26 in the readable module.
Bit equality with :mod:`specsample.reference.philox` is tested (``tests/test_batched.py``).

Output convention
-----------------
As :func:`specsample.reference.mrv2.rejection_sample`: ``sampled [R, K + 1]`` int64, ``-1``
beyond ``num_sampled [R]`` int32.
"""

from __future__ import annotations

import torch

from .philox import RAND32_MIN

__all__ = ["rejection_sample"]

PLACEHOLDER_TOKEN_ID = -1
_NEG_INF = float("-inf")
_POS_INF = float("inf")

# Elements per [rows, V] temporary in the statistics, residual-mass and resample passes
# (128 MiB in fp32), and per Philox chunk of the Gumbel noise (32 MiB per int64 temporary; about
# seven are alive at once). Fixed sizes: the chunk loops depend on shapes only.
_ROW_CHUNK_ELEMS = 1 << 25
_NOISE_CHUNK_ELEMS = 1 << 22

_MASK32 = 0xFFFFFFFF
_PHILOX_ROUND_A = 0xD2511F53
_PHILOX_ROUND_B = 0xCD9E8D57
_PHILOX_KEY_A = 0x9E3779B9
_PHILOX_KEY_B = 0xBB67AE85
_N_ROUNDS = 10
# Triton's uint32 -> [0, 1) scale; a Python float operand of an fp32 op is rounded to fp32,
# giving float32(4.6566127342e-10) = 2**-31 * (1 - 2**-24) as in the readable module.
_RAND32_SCALE = 4.6566127342e-10
_TWO_POW_32 = 4294967296.0
_TWO_POW_MINUS_64 = 2.0**-64
_FLOAT64_TINY = torch.finfo(torch.float64).tiny


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
    """Verify draft tokens and sample the recovered / bonus token, batched over requests.

    Same arguments, semantics and outputs as :func:`specsample.reference.mrv2.rejection_sample`
    (see there). All tensors must be on one device; nothing is read back to the host, so the
    call is CUDA-graph capturable. ``expanded_idx_mapping`` and ``expanded_local_pos`` are
    accepted for signature parity and derived from ``cu_num_logits`` / ``idx_mapping``.
    """
    del expanded_idx_mapping, expanded_local_pos  # implied by cu_num_logits / idx_mapping
    if synthetic_conditional_rates is not None and use_block_verification:
        raise ValueError("synthetic acceptance rates cannot be combined with block verification")

    device = target_logits.device
    i64 = torch.int64
    num_reqs = idx_mapping.shape[0]
    k = num_speculative_steps
    vocab = target_logits.shape[-1]
    if draft_logits is not None:
        vocab = min(vocab, draft_logits.shape[-1])
    if num_reqs == 0:
        return (
            torch.full((0, k + 1), PLACEHOLDER_TOKEN_ID, dtype=i64, device=device),
            torch.zeros(0, dtype=torch.int32, device=device),
        )
    target = target_logits[:, :vocab]

    # ---- layout: [R, K + 1] row indices and [R, K] padded drafts
    cu = cu_num_logits.to(device=device, dtype=i64)
    start = cu[:-1]
    n = cu[1:] - start - 1  # [R] drafts per request
    cols = torch.arange(k + 1, device=device)
    steps = cols[:k]
    rows = start[:, None] + torch.minimum(cols, n[:, None])  # [R, K+1]; past n_r: the bonus row
    in_request = steps < n[:, None]  # [R, K]
    # drafts[r, i] = d_{i+1}, tested against row c_r + i; -1 past n_r (index kept in range).
    draft_src = start[:, None] + 1 + torch.minimum(steps, n[:, None] - 1)
    drafts = torch.where(in_request, draft_sampled.to(i64)[draft_src], PLACEHOLDER_TOKEN_ID)
    valid = drafts >= 0
    before_placeholder = torch.cumprod(valid.to(torch.int32), dim=1).bool()  # steps i < m_r
    num_valid = before_placeholder.sum(dim=1)  # m_r
    draft_ids = drafts.clamp_min(0)

    slot = idx_mapping.to(device=device, dtype=i64)
    temp = temperature.to(device)[slot].to(torch.float32)  # [R]
    greedy = temp == 0.0
    # Divisor for the draft logits; greedy requests never read the result.
    temp_div = torch.where(greedy, torch.ones_like(temp), temp)

    # ---- one Philox word per row, keyed by (seed[slot], pos as int32): the acceptance uniform
    # of the step tested on that row, and the Gumbel key of the row when it is resampled.
    counters = pos.to(device)[rows].to(torch.int32).to(i64) & _MASK32
    (row_words,) = _philox(seed.to(device)[slot].to(i64)[:, None], counters)  # [R, K+1]
    u = _uniform(row_words)[:, :k]  # [R, K]

    # ---- per-row target statistics, gathered to the padded layout
    row_argmax, row_lse = _target_row_stats(target)  # [N]
    argmax = row_argmax[rows]  # [R, K+1]
    lp = target[rows[:, :k], draft_ids].float() - row_lse[rows[:, :k]]  # log p(d), [R, K]

    draft_lse = lq = None
    if draft_logits is not None:
        draft_lse = _draft_row_lse(draft_logits, slot, temp_div, k, vocab)  # [R, K]
        q_logit = draft_logits[slot[:, None], steps[None, :], draft_ids].float()
        lq = q_logit / temp_div[:, None] - draft_lse  # log q(d), [R, K]

    rates = None
    if synthetic_conditional_rates is not None:
        rates = synthetic_conditional_rates.to(device=device, dtype=torch.float32)[None, :k]

    # ---- greedy: accept while the draft is valid and equals the row argmax (or u < rate)
    test_greedy = (u < rates) if rates is not None else (argmax[:, :k] == drafts)
    tau_greedy = _num_leading_true(valid & test_greedy)

    # ---- non-greedy: token-level or block verification over the m_r valid drafts
    cum_log_p = None
    if use_block_verification:
        tau_sampled, cum_log_p = _block_verify(
            target,
            draft_logits,
            rows,
            slot,
            temp_div,
            row_lse,
            draft_lse,
            lp,
            lq,
            u,
            num_valid,
            before_placeholder,
            vocab,
        )
    else:
        if rates is not None:
            accept = u < rates
        else:
            rhs = torch.log(u)
            if lq is not None:
                rhs = rhs + lq
            accept = lp > rhs
        tau_sampled = _num_leading_true(before_placeholder & accept)
    tau = torch.where(greedy, tau_greedy, tau_sampled)  # [R]

    # ---- the token in column tau: the greedy argmax, or a Gumbel-max resample of row c + tau
    tau_col = tau[:, None]
    drafts_pad = torch.cat([drafts, torch.full_like(drafts[:, :1], PLACEHOLDER_TOKEN_ID)], dim=1)
    resample_row = rows.gather(1, tau_col).squeeze(1)  # [R]
    rejected = drafts_pad.gather(1, tau_col).squeeze(1)  # the rejected draft, or -1
    gseed = row_words.gather(1, tau_col).squeeze(1)
    sampled_token = _resample(
        target,
        draft_logits,
        resample_row,
        rejected,
        ~greedy & (rejected >= 0),
        gseed,
        slot,
        tau,
        temp_div,
        row_lse,
        draft_lse,
        cum_log_p,
        vocab,
        k,
        use_fp64,
    )
    token = torch.where(greedy, row_argmax[resample_row], sampled_token)

    sampled = torch.where(cols < tau_col, drafts_pad, PLACEHOLDER_TOKEN_ID)
    sampled.scatter_(1, tau_col, token[:, None])
    return sampled, (tau + 1).to(torch.int32)


# %%
# Verification
# ------------


def _num_leading_true(mask: torch.Tensor) -> torch.Tensor:
    """Length of the all-True prefix of each row of a 2-D bool tensor (int64)."""
    return torch.cumprod(mask.to(torch.int32), dim=1).sum(dim=1)


def _block_verify(
    target, draft_logits, rows, slot, temp_div, row_lse, draft_lse, lp, lq, u, num_valid, before_placeholder, vocab
):
    """Block verification (Sun et al., Alg. 2) of every request over its valid drafts.

    Returns ``tau [R]`` (``max{i + 1 : u_i <= h_i, i < m}``, 0 if none) and
    ``cum_log_p [R, K]`` (``log p_{i+1}``; entries at ``i >= m`` are never read).
    """
    k = lp.shape[1]
    lq0 = lq if lq is not None else torch.zeros_like(lp)
    # Serial prefix scan with the min(., 0) clamp, in fp32 and in mrv2's association.
    running = torch.zeros_like(lp[:, 0])
    cum = []
    for i in range(k):
        running = torch.clamp_max(running + lp[:, i] - lq0[:, i], 0.0)
        cum.append(running)
    cum_log_p = torch.stack(cum, dim=1)
    pi = torch.exp(cum_log_p)  # p_{i+1}

    # h_i = Z_{i+2} / (Z_{i+2} + 1 - p_{i+1}) while a valid next draft exists (i < m - 1);
    # p_m at the end of the block.
    h = pi
    if k > 1:
        pi_b = pi[:, :-1]
        if draft_logits is not None:
            z = _residual_mass(target, draft_logits, rows, slot, temp_div, row_lse, draft_lse, pi_b, vocab)
        else:
            z = pi_b * (1.0 - torch.exp(lp[:, 1:]))  # one-hot: p_{i+1} * (1 - M_b(d_{i+2}))
        denom = z + 1.0 - pi_b
        h_next = torch.where(denom > 0.0, z / denom, torch.ones_like(z))
        has_next = torch.arange(k - 1, device=lp.device) < (num_valid - 1)[:, None]
        h = torch.cat([torch.where(has_next, h_next, pi_b), pi[:, -1:]], dim=1)

    passed = (u <= h) & before_placeholder
    steps1 = torch.arange(1, k + 1, device=lp.device)
    tau = torch.where(passed, steps1, 0).amax(dim=1)
    return tau, cum_log_p


# %%
# Passes over [rows, V]
# ---------------------


def _target_row_stats(target: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Nan-safe argmax (int64) and fp32 ``logsumexp`` of every target row, ``[N]`` each."""
    num_rows, vocab = target.shape
    argmax = torch.empty(num_rows, dtype=torch.int64, device=target.device)
    lse = torch.empty(num_rows, dtype=torch.float32, device=target.device)
    step = max(1, _ROW_CHUNK_ELEMS // max(vocab, 1))
    for lo in range(0, num_rows, step):
        x = target[lo : lo + step]
        # NaN -> -inf (argmax would take NaN as the maximum); infinities kept. An upcast does
        # not change the argmax, so it runs in the logits' own dtype.
        argmax[lo : lo + step] = torch.nan_to_num(x, nan=_NEG_INF, posinf=_POS_INF, neginf=_NEG_INF).argmax(dim=-1)
        lse[lo : lo + step] = torch.logsumexp(x.float(), dim=-1)
    return argmax, lse


def _draft_rows(draft_logits, slot, steps, temp_div, vocab) -> torch.Tensor:
    """``draft_logits[slot, steps, :V]`` upcast, then divided by T (PR #50910), fp32."""
    x = draft_logits[slot, steps, :vocab].float()  # a gathered copy: safe to modify in place
    return x.div_(temp_div.reshape(temp_div.shape + (1,) * (x.dim() - temp_div.dim())))


def _draft_row_lse(draft_logits, slot, temp_div, k, vocab) -> torch.Tensor:
    """fp32 ``logsumexp`` of every request's ``K`` tempered draft rows, ``[R, K]``."""
    num_reqs = slot.shape[0]
    out = torch.empty(num_reqs, k, dtype=torch.float32, device=slot.device)
    step = max(1, _ROW_CHUNK_ELEMS // max(k * vocab, 1))
    for lo in range(0, num_reqs, step):
        s = slice(lo, lo + step)
        x = _draft_rows(draft_logits, slot[s], slice(None), temp_div[s], vocab)  # [r, K, V]
        out[s] = torch.logsumexp(x, dim=-1)
    return out


def _residual_mass(target, draft_logits, rows, slot, temp_div, row_lse, draft_lse, pi_b, vocab):
    """``Z[r, i] = sum_x max(p_{i+1} * M_b(x) - M_s(x), 0)`` on row ``c_r + i + 1``, ``[R, K-1]``.

    ``M_b = exp(target - lse)`` and ``M_s = exp(draft / T - lse_d)``, elementwise in the
    readable reference's order.
    """
    num_reqs, km1 = pi_b.shape
    out = torch.empty(num_reqs, km1, dtype=torch.float32, device=pi_b.device)
    step = max(1, _ROW_CHUNK_ELEMS // max(km1 * vocab, 1))
    for lo in range(0, num_reqs, step):
        s = slice(lo, lo + step)
        nxt = rows[s, 1 : km1 + 1]  # [r, K-1] rows c + i + 1
        mb = target[nxt].float()  # a gathered copy
        mb.sub_(row_lse[nxt][..., None]).exp_().mul_(pi_b[s, :, None])
        ms = _draft_rows(draft_logits, slot[s], slice(1, km1 + 1), temp_div[s], vocab)
        ms.sub_(draft_lse[s, 1:, None]).exp_()
        out[s] = mb.sub_(ms).clamp_min_(0.0).sum(dim=-1)
    return out


def _resample(
    target,
    draft_logits,
    resample_row,
    rejected,
    residual,
    gseed,
    slot,
    tau,
    temp_div,
    row_lse,
    draft_lse,
    cum_log_p,
    vocab,
    k,
    use_fp64,
):
    """Gumbel-max sample of each request's row ``c + tau``, ``[R]`` int64.

    ``rho`` is the plain target row at the bonus row or a placeholder (``residual`` False), and
    otherwise the residual: ``log max(p_tau * p - q, 0)`` with draft logits (``p_tau`` the
    block prefix ratio, 1 outside block mode), or the target without the rejected token one-hot.
    """
    num_reqs = resample_row.shape[0]
    out = torch.empty(num_reqs, dtype=torch.int64, device=resample_row.device)
    tau_q = tau.clamp_max(k - 1)  # the draft step of a rejected row (tau < n <= K there)
    lse_q = None if draft_lse is None else draft_lse.gather(1, tau_q[:, None])
    prefix = None
    if cum_log_p is not None:
        prev = cum_log_p.gather(1, (tau - 1).clamp_min(0)[:, None])
        prefix = (tau > 0)[:, None], prev
    step = max(1, _ROW_CHUNK_ELEMS // max(vocab, 1))
    for lo in range(0, num_reqs, step):
        s = slice(lo, lo + step)
        row = resample_row[s]
        plain = target[row].float()  # [r, V], a gathered copy
        res = residual[s, None]
        if draft_logits is not None:
            a = plain - row_lse[row][:, None]  # log p
            if prefix is not None:
                a = torch.where(prefix[0][s], a + prefix[1][s], a)
            ratio = _draft_rows(draft_logits, slot[s], tau_q[s], temp_div[s], vocab)
            ratio.sub_(lse_q[s]).sub_(a).exp_()  # exp(log q - a)
            rho = torch.neg(ratio).log1p_().add_(a).masked_fill_(~(ratio < 1.0), _NEG_INF)
            rho = torch.where(res, rho, plain)
        else:
            idx = rejected[s].clamp_min(0)[:, None]
            rho = plain.scatter_(1, idx, torch.where(res, _NEG_INF, plain.gather(1, idx)))
        rho = torch.nan_to_num_(rho, nan=_NEG_INF, posinf=_POS_INF, neginf=_NEG_INF)
        out[s] = _gumbel_argmax(rho, gseed[s], use_fp64)
    return out


# %%
# Random numbers
# --------------


def _xor_masked(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor) -> torch.Tensor:
    """``(a ^ b ^ c) & 0xFFFFFFFF``, combining the smaller operands first."""
    a, b, c = sorted((a, b, c), key=torch.Tensor.numel)
    return ((a ^ b) ^ c).bitwise_and_(_MASK32)


def _philox(seed: torch.Tensor, counter: torch.Tensor, num_words: int = 1) -> tuple[torch.Tensor, ...]:
    """Words ``0..num_words-1`` (``<= 2``) of ``tl.randint4x(seed, counter)``, uint32 in int64.

    ``seed`` int64 as in :func:`specsample.reference.philox.philox4x32` (sign-extended; a
    uint32 value held in int64 has high key word 0); ``counter`` uint32 values in int64 for a
    32-bit offset (counter words 1..3 are 0). The two broadcast against each other.
    """
    k0 = seed & _MASK32
    k1 = (seed >> 32) & _MASK32
    zero = torch.zeros((), dtype=torch.int64, device=counter.device)
    c0, c1, c2, c3 = counter, zero, zero, zero
    for rnd in range(_N_ROUNDS):
        # int64 products wrap modulo 2**64, so they hold the unsigned product's low 64 bits;
        # c1 and c3 keep junk above bit 31, which only ever meets an XOR that is masked.
        pb = c2 * _PHILOX_ROUND_B
        w0 = _xor_masked(pb >> 32, c1, k0)
        if rnd == _N_ROUNDS - 1:
            break
        pa = c0 * _PHILOX_ROUND_A
        c0, c1, c2, c3 = w0, pb, _xor_masked(pa >> 32, c3, k1), pa
        k0 = (k0 + _PHILOX_KEY_A) & _MASK32
        k1 = (k1 + _PHILOX_KEY_B) & _MASK32
    if num_words == 1:
        return (w0,)
    return w0, pb & _MASK32


def _uniform(words: torch.Tensor) -> torch.Tensor:
    """``max(tl.rand, RAND32_MIN)`` from uint32 words: fold the int32 bit pattern, scale."""
    x = words.to(torch.int32)  # bit pattern (wraps modulo 2**32)
    x = x ^ (x >> 31)  # negative x -> -x - 1
    return torch.clamp_min(x.to(torch.float32) * _RAND32_SCALE, RAND32_MIN)


def _gumbel_argmax(rho: torch.Tensor, gseed: torch.Tensor, use_fp64: bool) -> torch.Tensor:
    """``argmax_v(rho[:, v] + gumbel(gseed, v))``, first index on ties, over vocabulary chunks.

    ``rho`` ``[r, V]`` fp32 without NaN. fp32: ``-log(-log1p(-u))`` with ``u = rand`` clamped;
    fp64: ``-log(-log(u))`` with ``u = rand64`` and the score in fp64, where ``u == 1`` can
    make a NaN score, mapped to ``-inf`` as nan_safe_argmax does.
    """
    num_rows, vocab = rho.shape
    key = gseed[:, None]
    width = max(1, _NOISE_CHUNK_ELEMS // max(num_rows, 1))
    best_val = best_idx = None
    for lo in range(0, vocab, width):
        hi = min(vocab, lo + width)
        tokens = torch.arange(lo, hi, dtype=torch.int64, device=rho.device)
        if use_fp64:
            w0, w1 = _philox(key, tokens, 2)
            x = w1.to(torch.float64) * _TWO_POW_32 + w0.to(torch.float64)  # word 1 is the high half
            u = torch.clamp_min(x * _TWO_POW_MINUS_64, _FLOAT64_TINY)
            score = rho[:, lo:hi].double() - u.log_().neg_().log_()  # rho + (-log(-log u))
            score = torch.nan_to_num_(score, nan=_NEG_INF, posinf=_POS_INF, neginf=_NEG_INF)
        else:
            (w0,) = _philox(key, tokens)
            u = _uniform(w0)
            score = rho[:, lo:hi] - u.neg_().log1p_().neg_().log_()  # rho + (-log(-log1p(-u)))
        idx = score.argmax(dim=1)
        val = score.gather(1, idx[:, None]).squeeze(1)
        if best_val is None:
            best_val, best_idx = val, idx
        else:
            better = val > best_val  # strict: an equal later maximum keeps the first index
            best_val = torch.where(better, val, best_val)
            best_idx = torch.where(better, idx + lo, best_idx)
    return best_idx
