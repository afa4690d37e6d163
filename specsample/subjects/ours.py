"""specsample's own samplers as subjects.

=================  ============================================================================
``mrv2``           the Triton sampler, ``specsample.rejection_sample`` (post-PR-#50939).
``fast``           the same algorithm and random numbers with less work
                   (:mod:`specsample.kernels.fast`).
``mrv2-pre50939``  REPLICA FOR BENCHMARKING ONLY of the sampler before PR #50939
                   (:mod:`specsample.kernels.pre50939`); wrong on block-verification
                   placeholders, by design.
``torch-eager``    the PyTorch reference (:mod:`specsample.reference`) on the GPU: a loop over
                   requests, not CUDA-graph capturable (host syncs).
=================  ============================================================================
"""

from __future__ import annotations

import functools

from .. import reference
from ..kernels import fast, mrv2, pre50939
from ..validation import check_inputs
from .base import Capabilities, PreparedCall, Subject, identity


# TEST-ONLY: iterations of the planted slowdown in mrv2's residual-mass kernel (the Pipeline's
# ballast_iters argument) for mrv2 and mrv2-pre50939. 0 here, always: sign-off validation
# (specsample signoff-validate) makes throw-away commits that change only this number.
PLANTED_BALLAST_ITERS = 0


def _sampler_call(inputs: dict, launch) -> PreparedCall:
    check_inputs(**inputs)  # once here, so the timed call skips the host read-back
    return PreparedCall(functools.partial(launch, **inputs), identity)


def _provenance(module) -> dict:
    return {"kind": "ours", "module": module.__name__}


SUBJECTS = (
    Subject("mrv2", "Triton MRV2 sampler, post-PR-#50939 (specsample.rejection_sample)",
            Capabilities(), functools.partial(_sampler_call, launch=functools.partial(mrv2.launch, ballast_iters=PLANTED_BALLAST_ITERS)),
            provenance=_provenance(mrv2), pipeline=functools.partial(mrv2.Pipeline, ballast_iters=PLANTED_BALLAST_ITERS)),
    Subject("fast", "Triton sampler, mrv2's algorithm and random numbers with less work",
            Capabilities(), functools.partial(_sampler_call, launch=fast.launch),
            provenance=_provenance(fast), pipeline=fast.Pipeline),
    Subject("mrv2-pre50939", "REPLICA FOR BENCHMARKING ONLY: the sampler before PR #50939",
            Capabilities(), functools.partial(_sampler_call, launch=functools.partial(pre50939.launch, ballast_iters=PLANTED_BALLAST_ITERS)),
            provenance=_provenance(pre50939), pipeline=functools.partial(pre50939.Pipeline, ballast_iters=PLANTED_BALLAST_ITERS)),
    Subject("torch-eager", "PyTorch reference on the GPU (eager, host syncs)", Capabilities(),
            lambda inputs: PreparedCall(functools.partial(reference.rejection_sample, **inputs), identity,
                                        graph_capturable=False),
            needs_cuda=False, provenance={"kind": "ours", "module": reference.mrv2.__name__}),
)  # fmt: skip
