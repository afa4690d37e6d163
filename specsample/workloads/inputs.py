"""The keyword arguments of ``rejection_sample`` for a workload (:func:`make_inputs`), and the
extra arguments of the sampler paths it turns on (:func:`path_inputs`).
"""

from __future__ import annotations

import torch

from ..schema import PLACEHOLDER_TOKEN_ID
from .layout import STREAM_CONTEXTS, STREAM_SHARD_ROWS, Layout, build_layout, generator
from .logits import build_logits_and_drafts
from .spec import Workload

# Synthetic mode accepts step i with probability agreement * _SYNTHETIC_DECAY**i: a fixed,
# decreasing conditional rate, comparable to the standard-mode rate at the same agreement.
_SYNTHETIC_DECAY = 0.95

# watermarking: vLLM's default context width, and a fixed 64-bit key.
WATERMARK_CONTEXT_WIDTH = 4
WATERMARK_KEY = 0x5EC5A3D1E0C0FFEE
# FLy: vLLM's defaults for the threshold and the top-k of its entropy.
FLY_ENTROPY_THRESHOLD = 0.3
FLY_ENTROPY_TOP_K = 3


def make_inputs(w: Workload, device: str | torch.device = "cpu") -> dict:
    """Keyword arguments for ``rejection_sample(**make_inputs(w))``.

    Fresh tensors on every call (nothing is cached), so callers may mutate them.

    Parameters
    ----------
    w : Workload
        The spec.
    device : str or torch.device
        Where the tensors live. Layout and metadata do not depend on it; logit values and
        draft token ids do (see :mod:`specsample.workloads`).

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
    lay = build_layout(w)
    R, K = w.num_reqs, w.num_speculative_steps
    M = lay.temperature.numel()
    target_logits, draft_rows, tokens = build_logits_and_drafts(w, lay, device)

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


def path_inputs(w: Workload, lay: Layout, inputs: dict, device: torch.device) -> dict:
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
        g = generator(w, STREAM_SHARD_ROWS, torch.device("cpu"))
        rows = torch.randperm(R, generator=g)  # request b's row in this rank's cache
        mapping = torch.full((lay.temperature.numel(),), -1, dtype=torch.int32)
        mapping[lay.idx_mapping] = rows.to(torch.int32)
        values = torch.empty(R, *inputs["draft_logits"].shape[1:], dtype=w.draft_dtype, device=device)
        values[rows.to(device)] = inputs["draft_logits"][lay.idx_mapping.to(device)]
        out.update(draft_logits_cache_values=values, draft_logits_row_mapping=mapping.to(device))
    return out


def _contexts(w: Workload, lay: Layout, draft_sampled: torch.Tensor) -> torch.Tensor:
    """``[N, WATERMARK_CONTEXT_WIDTH]`` int64: the tokens before each row's position."""
    C = WATERMARK_CONTEXT_WIDTH
    R = w.num_reqs
    g = generator(w, STREAM_CONTEXTS, torch.device("cpu"))
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
