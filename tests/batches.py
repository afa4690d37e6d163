"""Batch surgery for tests: truncate requests at their first placeholder, split into chunks,
and build the spec's one-row-repeated trial batches (spec section 7)."""

from __future__ import annotations

import torch


def request_rows(inputs: dict) -> list[tuple[int, int]]:
    cu = inputs["cu_num_logits"].tolist()
    return list(zip(cu[:-1], cu[1:]))


def first_placeholder(inputs: dict) -> list[int]:
    """m_r: valid drafts before the first -1 (or n_r) per request."""
    tokens = inputs["draft_sampled"].tolist()
    out = []
    for start, end in request_rows(inputs):
        m = 0
        while m < end - start - 1 and tokens[start + 1 + m] >= 0:
            m += 1
        out.append(m)
    return out


def truncate_at_placeholders(inputs: dict) -> dict:
    """The same batch with each request cut to its m_r valid drafts (spec 5.4)."""
    keep = []
    cu = [0]
    for (start, _), m in zip(request_rows(inputs), first_placeholder(inputs)):
        keep.extend(range(start, start + m + 1))
        cu.append(cu[-1] + m + 1)
    idx = torch.tensor(keep, dtype=torch.long, device=inputs["target_logits"].device)
    out = dict(inputs)
    for name in ("target_logits", "draft_sampled", "pos", "expanded_idx_mapping", "expanded_local_pos"):
        out[name] = inputs[name][idx].contiguous()
    out["cu_num_logits"] = torch.tensor(cu, dtype=inputs["cu_num_logits"].dtype, device=idx.device)
    return out


def split_requests(inputs: dict, start_req: int, end_req: int) -> dict:
    """Requests [start_req, end_req) as their own batch; slots, seeds and pos unchanged."""
    cu = inputs["cu_num_logits"].tolist()
    lo, hi = cu[start_req], cu[end_req]
    out = dict(inputs)
    for name in ("target_logits", "draft_sampled", "pos", "expanded_idx_mapping", "expanded_local_pos"):
        out[name] = inputs[name][lo:hi]
    out["cu_num_logits"] = inputs["cu_num_logits"][start_req : end_req + 1] - lo
    out["idx_mapping"] = inputs["idx_mapping"][start_req:end_req]
    return out


def trial_batch(
    target_1d: torch.Tensor,
    draft_1d: torch.Tensor | None,
    k: int,
    temperature: float,
    trials: int,
    *,
    generator: torch.Generator,
    draft_tokens: torch.Tensor | None = None,
) -> dict:
    """``trials`` identical requests with K drafts each (spec 7, the input builder).

    ``target_1d`` is already divided by T; ``draft_1d`` is pre-temperature. Drafts are drawn
    from ``softmax(draft / T)`` (or ``softmax(target)`` for a one-hot draft) unless given.
    """
    device = target_1d.device
    v = target_1d.shape[0]
    n = trials * (k + 1)
    if draft_tokens is None:
        q = torch.softmax((draft_1d.float() / temperature) if draft_1d is not None else target_1d.float(), -1)
        if device.type == "cuda":
            # On the GPU box the trials are many (tens of thousands x V): draw them there, from a
            # device generator seeded by the caller's, instead of on one CPU core.
            g = torch.Generator(device).manual_seed(int(torch.randint(2**62, (1,), generator=generator)))
            draft_tokens = torch.multinomial(q.expand(trials, v), k, replacement=True, generator=g).cpu()
        else:
            draft_tokens = torch.multinomial(q.cpu().expand(trials, v), k, replacement=True, generator=generator)
    draft_sampled = torch.zeros(trials, k + 1, dtype=torch.int64)
    draft_sampled[:, 1:] = draft_tokens
    reqs = torch.arange(trials, dtype=torch.int32)
    return dict(
        target_logits=target_1d.expand(n, v).contiguous(),
        draft_logits=None if draft_1d is None else draft_1d.expand(trials, k, v).contiguous(),
        draft_sampled=draft_sampled.flatten().to(device),
        cu_num_logits=(torch.arange(trials + 1, dtype=torch.int32) * (k + 1)).to(device),
        pos=torch.arange(n, dtype=torch.int32, device=device),
        idx_mapping=reqs.to(device),
        expanded_idx_mapping=torch.repeat_interleave(reqs, k + 1).to(device),
        expanded_local_pos=torch.arange(k + 1, dtype=torch.int32).repeat(trials).to(device),
        temperature=torch.full((trials,), temperature, dtype=torch.float32, device=device),
        seed=torch.arange(trials, dtype=torch.int64, device=device),
        num_speculative_steps=k,
    )


def emitted(sampled: torch.Tensor, num_sampled: torch.Tensor) -> list[list[int]]:
    """The defined prefix of each request's output."""
    s, n = sampled.cpu().tolist(), num_sampled.cpu().tolist()
    return [row[:m] for row, m in zip(s, n)]
