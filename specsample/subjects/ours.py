"""specsample's own samplers as subjects.

=================  ============================================================================
``mrv2``           the Triton sampler, ``specsample.rejection_sample`` (post-PR-#50939).
``fast``           the same algorithm and random numbers with less work
                   (:mod:`specsample.kernels.fast`).
``mrv2-pre50939``  REPLICA FOR BENCHMARKING ONLY of the sampler before PR #50939
                   (:mod:`specsample.kernels.pre50939`); wrong on block-verification
                   placeholders, by design.
``torch-eager``    the same algorithm and random numbers in vectorized PyTorch
                   (:mod:`specsample.reference.batched`): batched ops over all requests, no
                   host syncs, CUDA-graph capturable. (The name is kept: results key on it.)
``mrv2-vllm``      ``mrv2`` without its one deliberate difference from vLLM's kernels (NaN logits
                   mapped to -inf on load) and at vLLM's 4 warps: the replica whose work is vLLM
                   0.28-0.30's (docs/performance-log.md, replica fidelity).
``express``        mrv2's verification and acceptance uniforms with its own random stream for the
                   recovered / bonus token (two-level inverse-transform sampling, no per-token
                   noise; :mod:`specsample.kernels.express`, reference
                   :mod:`specsample.reference.express`): "same semantics, other stream".
                   Has vLLM's masked-block skip (``skip_masked_vocab_blocks``), the one vLLM
                   path among our samplers.
=================  ============================================================================
"""

from __future__ import annotations

import functools

from ..kernels import express, fast, mrv2, pre50939
from ..reference import batched
from ..validation import check_inputs
from .base import Capabilities, PreparedCall, Subject, identity


# mrv2's Pipeline options that make its work vLLM 0.28-0.30's exactly: no NaN -> -inf mapping
# on load (specsample's documented NaN semantics; 4-6% at R >= 32 on the H200) and vLLM's 4 warps
# for the stats and residual-mass kernels (docs/performance-log.md, replica fidelity).
MRV2_AS_VLLM = {"nan_guard": False, "block_warps": 4}


def _sampler_call(inputs: dict, launch, path_inputs: tuple[str, ...] = ()) -> PreparedCall:
    # path_inputs: the inputs of the sampler paths the launcher takes (Capabilities.paths),
    # passed to it and not to the check, which knows the arguments every sampler takes
    check_inputs(**{k: v for k, v in inputs.items() if k not in path_inputs})  # once here, not timed
    return PreparedCall(functools.partial(launch, **inputs), identity)


def _torch_call(inputs: dict) -> PreparedCall:
    # Checked once here, as the kernels' inputs are; no Triton device needed (any torch device).
    check_inputs(**inputs, require_triton_device=False)
    return PreparedCall(functools.partial(batched.rejection_sample, **inputs), identity, graph_capturable=True)


def _provenance(module) -> dict:
    return {"kind": "ours", "module": module.__name__}


SUBJECTS = (
    Subject(
        "mrv2",
        "Triton MRV2 sampler, post-PR-#50939 (specsample.rejection_sample)",
        Capabilities(),
        functools.partial(_sampler_call, launch=mrv2.launch),
        provenance=_provenance(mrv2),
        pipeline=mrv2.Pipeline,
    ),
    Subject(
        "fast",
        "Triton sampler, mrv2's algorithm and random numbers with less work",
        Capabilities(),
        functools.partial(_sampler_call, launch=fast.launch),
        provenance=_provenance(fast),
        pipeline=fast.Pipeline,
    ),
    Subject(
        "mrv2-pre50939",
        "REPLICA FOR BENCHMARKING ONLY: the sampler before PR #50939",
        Capabilities(),
        functools.partial(_sampler_call, launch=pre50939.launch),
        provenance=_provenance(pre50939),
        pipeline=pre50939.Pipeline,
    ),
    Subject(
        "mrv2-vllm",
        "mrv2 less its one deliberate difference (NaN logits as -inf), at vLLM's 4 warps: vLLM 0.28-0.30's work",
        Capabilities(),
        functools.partial(_sampler_call, launch=functools.partial(mrv2.launch, **MRV2_AS_VLLM)),
        provenance=_provenance(mrv2),
        pipeline=functools.partial(mrv2.Pipeline, **MRV2_AS_VLLM),
    ),
    Subject(
        "torch-eager",
        "vectorized PyTorch (batched ops, CUDA-graph capturable)",
        Capabilities(),
        _torch_call,
        needs_cuda=False,
        provenance=_provenance(batched),
    ),
    Subject(
        "express",
        "Triton sampler, mrv2's verification with its own stream: two-level inverse-CDF resampling",
        Capabilities(paths=("skip_masked_vocab_blocks",)),
        functools.partial(_sampler_call, launch=express.launch, path_inputs=("skip_masked_vocab_blocks",)),
        provenance=_provenance(express),
        pipeline=express.Pipeline,
    ),
)
