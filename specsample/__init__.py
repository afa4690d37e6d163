"""specsample: benchmark and track speculative-decoding rejection-sampling kernels.

``import specsample`` loads no torch and no Triton: the samplers are imported on first use
(``specsample.rejection_sample``), so the results frame and the dashboards stay light.
"""

__all__ = ["rejection_sample", "rejection_sample_fast", "rejection_sample_express"]
__version__ = "0.2.0"


def __getattr__(name: str):
    if name in __all__:
        from . import sampler

        return getattr(sampler, name)
    raise AttributeError(f"module 'specsample' has no attribute {name!r}")
