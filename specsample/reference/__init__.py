"""PyTorch references, and the random streams they reproduce bit for bit.

- :mod:`.mrv2`: the readable statement of MRV2's rejection sampler (``mrv2``, ``fast`` and the
  vLLM releases with the PR #50939 fix draw the same numbers).
- :mod:`.philox`: Triton's Philox-4x32-10 and its int-to-float conversions in plain PyTorch.
"""

from . import philox
from .mrv2 import gumbel_noise, nan_safe_argmax, rejection_sample

__all__ = ["rejection_sample", "gumbel_noise", "nan_safe_argmax", "philox"]
