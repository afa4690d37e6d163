"""End-to-end sampler benchmarks: every sampler sweep of every tier (``specsample.grid``).

Classes are generated, named ``<Tier><Sweep><Metric>`` (e.g. ``NightlyBatchLatency``,
``NightlyDensityDerived``, ``SmokeGridLatency``); ``specsample.grid.bench_regex(tier)`` selects
a tier. Every registered variant must appear in some sweep: a new variant without a benchmark
fails here, at import.
"""

from specsample import variants
from specsample.grid import sweeps

from .common import make_classes

_SAMPLER_SWEEPS = tuple(s for s in sweeps() if s.kind == "sampler")

_benchmarked = {v for s in _SAMPLER_SWEEPS for v in dict(s.axes)["variant"]}
_missing = set(variants.names()) - _benchmarked
if _missing:
    raise NotImplementedError(f"variants without a benchmark: {sorted(_missing)}")

globals().update(make_classes(_SAMPLER_SWEEPS, __name__))
