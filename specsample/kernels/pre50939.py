"""REPLICA FOR BENCHMARKING ONLY, NOT FOR PRODUCTION: the sampler before vLLM PR #50939.

It runs the same six kernels as :mod:`.mrv2` with ``PLACEHOLDER_FIX=False`` (spec 5.1-5.5):
no ``verifying`` short-circuit at the first ``-1``, cumulative log p does not skip placeholders,
the residual-mass kernel runs for every non-greedy row with local position 1..K-1, the
rejection kernel scans every block-verification step and stores the raw draft, and the
resample step builds the residual even at a placeholder. Where upstream read index ``-1`` out of
bounds, the replica clamps it to 0, so it is memory-safe while doing the same amount of work.
Its block-verification output on placeholder inputs is wrong (the bug the PR fixed): it can
accept drafts after a placeholder and emit ``-1``.
"""

from __future__ import annotations

import torch

from ..validation import check_inputs
from . import mrv2


def rejection_sample_pre50939(
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
    validate: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Pre-#50939 replica with the arguments and outputs of :func:`specsample.rejection_sample`."""
    if validate:
        check_inputs(
            target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping,
            expanded_idx_mapping, expanded_local_pos, temperature, seed, num_speculative_steps,
            synthetic_conditional_rates, use_block_verification,
        )  # fmt: skip
    return mrv2.launch(
        target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping,
        expanded_idx_mapping, expanded_local_pos, temperature, seed, num_speculative_steps,
        synthetic_conditional_rates, use_fp64, use_block_verification, placeholder_fix=False,
    )  # fmt: skip
