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

import functools

import torch

from . import mrv2

# The replica's pipeline: mrv2's, every kernel specialised with PLACEHOLDER_FIX=False.
Pipeline = functools.partial(mrv2.Pipeline, placeholder_fix=False)


def launch(*args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """Allocate and run one replica :data:`Pipeline` (the arguments of ``mrv2.launch``)."""
    return mrv2.launch(*args, placeholder_fix=False, **kwargs)
