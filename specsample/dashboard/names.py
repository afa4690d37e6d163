"""Readable names for asv benchmark names, wherever the pages show one (tables, notes, figure
titles): ``bench_sampler.NightlyBatchDerived.track_latency_us`` reads "Batch sweep (nightly) ·
latency (µs)".

asv's name (``<module>.<Tier><Sweep><Family>.<metric>``, benchmarks/common.py: make_classes)
stays in the figures' file names and in the pages' tooltips; a name that is not of that form is
shown as it is.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from ..schema import TIERS
from .specs import METRIC_LABELS, SWEEP_LABELS

_FAMILIES = ("Latency", "Derived")


def metric_label(metric: str) -> str:
    """``track_latency_us`` -> ``latency (µs)``; a metric not in :data:`METRIC_LABELS` as it is."""
    return dict(METRIC_LABELS).get(str(metric), str(metric))


def benchmark_label(name: str) -> str:
    """``bench_sampler.NightlyBatchDerived.track_latency_us`` -> ``Batch sweep (nightly) ·
    latency (µs)``."""
    parts = str(name).split(".")
    if len(parts) != 3 or not parts[0].startswith("bench_"):
        return str(name)
    _, cls, metric = parts
    tier = next((t for t in TIERS if cls.startswith(t.capitalize()) and len(cls) > len(t)), None)
    if tier is None:
        return str(name)
    sweep = cls[len(tier) :]
    for family in _FAMILIES:
        if sweep.endswith(family) and sweep != family:
            sweep = sweep.removesuffix(family)
    words = dict(SWEEP_LABELS).get(sweep) or " ".join(re.findall(r"[A-Z][a-z0-9]*|[^A-Z]+", sweep))
    return f"{words} sweep ({tier}) · {metric_label(metric)}"


def benchmark_labels(names: Iterable[str]) -> str:
    """Several benchmarks' labels, comma-separated."""
    return ", ".join(benchmark_label(n) for n in names)
