"""End-to-end sampler benchmarks: every sampler sweep of every tier (``specsample.tiers``).

Classes are generated, named ``<Tier><Sweep><Metric>`` (e.g. ``NightlyBatchLatency``,
``NightlyDensityDerived``, ``SmokeGridLatency``); ``specsample.tiers.bench_regex(tier)`` selects
a tier. Every one of specsample's own subjects must appear in some sweep: a new subject
without a benchmark fails here, at import.
"""

from specsample import subjects
from specsample.tiers import sweeps

from .common import make_classes

_SAMPLER_SWEEPS = tuple(s for s in sweeps() if s.kind == "sampler")

_benchmarked = {name for s in _SAMPLER_SWEEPS for name in s.subjects}
_missing = set(subjects.names()) - _benchmarked
if _missing:
    raise NotImplementedError(f"subjects without a benchmark: {sorted(_missing)}")

globals().update(make_classes(_SAMPLER_SWEEPS, __name__))
