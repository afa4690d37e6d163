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


def rejection_sample_pre50939(*args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """Pre-#50939 replica, with the arguments, validation and outputs of
    :func:`specsample.rejection_sample` (see there)."""
    from ..sampler import bind_arguments, checked_launch

    return checked_launch(bind_arguments(args, kwargs), placeholder_fix=False)
