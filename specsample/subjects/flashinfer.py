"""FlashInfer's ``chain_speculative_sampling`` as a peer subject (optional dependency).

``flashinfer``         from logits: two softmaxes to probabilities, then its kernel. Standard
                       mode, draft logits, fixed K, no -1 placeholders.
``flashinfer-kernel``  the same kernel alone, from precomputed probabilities (not the same work:
                       it starts after the softmaxes).
"""

from __future__ import annotations

import functools
import importlib.metadata
import importlib.util

import torch

from .base import Capabilities, PreparedCall, Subject


def _unavailable() -> str | None:
    if importlib.util.find_spec("flashinfer") is None:
        return "flashinfer is not installed (pip install 'specsample[flashinfer]')"
    if not torch.cuda.is_available():
        return "flashinfer needs a CUDA device"
    return None


def _layout(inputs: dict) -> tuple[int, int, int]:
    r = inputs["idx_mapping"].shape[0]
    k = inputs["num_speculative_steps"]
    v = min(inputs["target_logits"].shape[1], inputs["draft_logits"].shape[2])
    return r, k, v


def _probs(inputs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits -> the probabilities FlashInfer takes: target [R, K+1, V], draft [R, K, V]."""
    r, k, v = _layout(inputs)
    target = inputs["target_logits"][:, :v].view(r, k + 1, v)
    draft = inputs["draft_logits"][inputs["idx_mapping"].long(), :, :v]
    temperature = inputs["temperature"][inputs["idx_mapping"].long()].view(r, 1, 1)
    target_probs = torch.softmax(target.float(), dim=-1)
    draft_probs = torch.softmax(draft.float() / temperature, dim=-1)  # drafts arrive pre-temperature
    return target_probs, draft_probs


def _finish(out: object) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = out[0] if isinstance(out, tuple) else out  # [R, K+1], -1 after the emitted tokens
    num_sampled = (tokens >= 0).sum(dim=1).to(torch.int32)
    return tokens.to(torch.int64), num_sampled


def _prepare(inputs: dict, *, kernel_only: bool) -> PreparedCall:
    import flashinfer.sampling as fs

    r, k, _ = _layout(inputs)
    draft_ids = inputs["draft_sampled"].view(r, k + 1)[:, 1:].to(torch.int32).contiguous()
    accepted = torch.empty(r, dtype=torch.int32, device=draft_ids.device)
    emitted = torch.empty(r, dtype=torch.int32, device=draft_ids.device)
    seed = int(inputs["seed"][0])
    if kernel_only:
        target_probs, draft_probs = _probs(inputs)

        def call():
            return fs.chain_speculative_sampling(
                draft_probs, draft_ids, target_probs, accepted, emitted, seed=seed, offset=0
            )
    else:

        def call():
            target_probs, draft_probs = _probs(inputs)
            return fs.chain_speculative_sampling(
                draft_probs, draft_ids, target_probs, accepted, emitted, seed=seed, offset=0
            )

    return PreparedCall(call, _finish)


def _provenance() -> dict:
    try:
        version = importlib.metadata.version("flashinfer-python")
    except importlib.metadata.PackageNotFoundError:
        version = None
    return {"kind": "peer", "package": "flashinfer-python", "version": version}


_CAPABILITIES = Capabilities(
    modes=("standard",), drafts=("logits",), placeholders=False, ragged=False, mixed_temperature=False
)

SUBJECTS = (
    Subject(
        "flashinfer",
        "FlashInfer chain_speculative_sampling from logits (softmaxes included)",
        _CAPABILITIES,
        functools.partial(_prepare, kernel_only=False),
        _unavailable,
        provenance=_provenance(),
    ),
    Subject(
        "flashinfer-kernel",
        "FlashInfer chain_speculative_sampling alone, from probabilities",
        _CAPABILITIES,
        functools.partial(_prepare, kernel_only=True),
        _unavailable,
        provenance=_provenance(),
    ),
)
