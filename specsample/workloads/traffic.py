"""The traffic an ideal sampler needs for a workload (:func:`bytes_required`, spec section 5.5):
the yardstick of the achieved-bandwidth metric."""

from __future__ import annotations

import torch

from .layout import build_layout
from .spec import Workload


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
    lay = build_layout(w)
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
