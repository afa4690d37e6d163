"""specsample: benchmark and track speculative-decoding rejection-sampling kernels."""

from .sampler import rejection_sample

__all__ = ["rejection_sample"]
__version__ = "0.1.0"
