"""Plain-PyTorch statement of FLy's deferred verification, as vLLM's sampler applies it (0.33.0 on).

FLy lets a verifier *defer* a rejection: where the target is unsure (its top-k entropy is at
least a threshold), a draft the ratio test rejects is kept on probation, and accepted after all
if the next ``W`` drafts pass the ordinary test. The rules, per request with ``n`` drafts,
stepping ``i = 0 .. n - 1`` (``native[i]``: draft ``i + 1`` passes the ordinary test on its
row, i.e. greedy: it is the target argmax; standard: ``log p(d) > log u_i + log q(d)``):

- no deferral open: a native acceptance extends the accepted prefix to ``i + 1``; a native
  rejection opens a deferral at ``i`` only if the draft is deferrable (a real token, ``p(d) > 0``
  and, with draft logits, ``q(d) > 0``), the window fits (``i + W < n``) and the row's top-k
  entropy is at least the threshold; otherwise verification stops;
- a deferral open at ``j``: each step must be a native acceptance, or verification stops and the
  accepted prefix stays ``j`` (the deferred draft is rejected after all); at ``i = j + W`` the
  window is confirmed and the prefix becomes ``i + 1`` (the deferred draft and its window are
  accepted), and verification goes on (a later rejection may open another deferral);
- a ``-1`` placeholder is never accepted and never deferrable, so nothing at or after it is
  accepted: placeholder truncation holds on this path as on the others;
- FLy runs in standard and greedy verification only (block and synthetic modes reject it).

``W = 0`` is the ordinary rule (the prefix of native acceptances). The ordinary test reads the
acceptance uniform of each row: ``u`` from MRV2's Philox stream keyed by (seed, position),
which every vLLM release with FLy uses (:mod:`specsample.reference.mrv2`). A decision within
:data:`MARGIN` of its threshold (the test, or the entropy against the threshold) may round the
other way in a kernel; :func:`fly_outcomes` marks such requests ambiguous.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import philox

# Decisions closer than this to their threshold (log-ratio test, entropy) are not judged: fp32
# kernels reduce in another order and may round them the other way.
MARGIN = 1e-4


def top_k_entropy(target_logits: torch.Tensor, top_k: int) -> torch.Tensor:
    """``[N]`` fp32: ``-sum p log p`` over each row's ``top_k`` most likely tokens, ``p`` the
    row's full softmax (``target_logits`` ``[N, V]``, already divided by the temperature)."""
    if top_k <= 0:
        raise ValueError(f"top_k must be > 0, got {top_k}")
    logp = target_logits.float().log_softmax(dim=-1)
    top = logp.topk(min(top_k, logp.shape[-1]), dim=-1).values
    p = top.exp()
    return -torch.where(p > 0, p * top, torch.zeros_like(p)).sum(dim=-1)


def fly_prefix(native: list[bool], deferrable: list[bool], high_entropy: list[bool], window: int) -> tuple[int, int]:
    """The accepted prefix length under FLy's rules (module docstring) and how many of its drafts
    were accepted by a confirmed deferral (natively rejected, then confirmed by their window)."""
    n = len(native)
    tau, deferred, pending = 0, 0, -1
    for i in range(n):
        if pending >= 0:
            if not native[i]:
                break
            if i - pending == window:
                tau, pending = i + 1, -1
                deferred += 1
        elif native[i]:
            tau = i + 1
        elif window > 0 and deferrable[i] and i + window < n and high_entropy[i]:
            pending = i
        else:
            break
    return tau, deferred


@dataclass(frozen=True)
class Outcome:
    """One request under FLy: its accepted prefix, the confirmed deferrals in it, and whether a
    decision it rests on is within :data:`MARGIN` of its threshold."""

    tau: int
    deferred: int
    ambiguous: bool
    native: tuple[bool, ...]


def fly_outcomes(inputs: dict, window: int, threshold: float, top_k: int) -> list[Outcome]:
    """Each request's :class:`Outcome` on ``inputs`` (the keyword arguments of
    ``rejection_sample``, standard or greedy mode)."""
    target = inputs["target_logits"]
    draft_logits = inputs.get("draft_logits")
    V = target.shape[1] if draft_logits is None else min(target.shape[1], draft_logits.shape[-1])
    cu = inputs["cu_num_logits"].tolist()
    slots = inputs["idx_mapping"].tolist()
    tokens = inputs["draft_sampled"].tolist()
    temperature = inputs["temperature"].float().cpu()
    seed = inputs["seed"].cpu()
    row_counts = torch.tensor([cu[r + 1] - cu[r] for r in range(len(slots))])
    row_slot = torch.repeat_interleave(torch.tensor(slots, dtype=torch.int64), row_counts)
    u = philox.uint_to_uniform_float(philox.randint(seed[row_slot], inputs["pos"][: cu[-1]].cpu().to(torch.int32)))
    log_u = torch.clamp_min(u, philox.RAND32_MIN).double().log()
    entropy = top_k_entropy(target[: cu[-1], :V], top_k).double().cpu()

    out = []
    for r, slot in enumerate(slots):
        c, n = cu[r], cu[r + 1] - cu[r] - 1
        drafts = tokens[c + 1 : c + n + 1]
        rows = target[c : c + n, :V].float().cpu()
        temp = float(temperature[slot])
        native, deferrable, high, ambiguous = [], [], [], False
        if temp == 0.0:
            argmax = rows.argmax(dim=-1).tolist() if n else []
            for i, d in enumerate(drafts):
                valid = d >= 0
                native.append(valid and argmax[i] == d)
                deferrable.append(valid and bool(rows[i, d] > float("-inf")))
        else:
            logp = rows.double().log_softmax(dim=-1)
            logq = None
            if draft_logits is not None and n:
                logq = (draft_logits[slot, :n, :V].float().cpu() / temp).double().log_softmax(dim=-1)
            for i, d in enumerate(drafts):
                if d < 0:
                    native.append(False)
                    deferrable.append(False)
                    continue
                lp = float(logp[i, d])
                lq = float(logq[i, d]) if logq is not None else 0.0
                rhs = float(log_u[c + i]) + lq
                native.append(lp > rhs)
                deferrable.append(lp > float("-inf") and lq > float("-inf"))
                if abs(lp - rhs) < MARGIN and lp > float("-inf"):
                    ambiguous = True
        for i in range(n):
            e = float(entropy[c + i])
            high.append(e >= threshold)
            if abs(e - threshold) < MARGIN:
                ambiguous = True
        tau, deferred = fly_prefix(native, deferrable, high, window)
        out.append(Outcome(tau, deferred, ambiguous, tuple(native)))
    return out
