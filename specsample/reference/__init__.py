"""PyTorch references, and the random streams they reproduce bit for bit.

- :mod:`.mrv2`: the readable statement of MRV2's rejection sampler (``mrv2``, ``fast`` and the
  vLLM releases with the PR #50939 fix draw the same numbers).
- :mod:`.batched`: the same sampler and draws written for speed, batched over requests with no
  host syncs (CUDA-graph capturable); the ``torch-eager`` subject.
- :mod:`.philox`: Triton's Philox-4x32-10 and its int-to-float conversions in plain PyTorch.
"""

from . import batched, philox
from .mrv2 import gumbel_noise, nan_safe_argmax, rejection_sample

__all__ = ["rejection_sample", "gumbel_noise", "nan_safe_argmax", "batched", "philox"]
