"""The sweep grid: which points each benchmark tier measures, declared as data.

Every asv class in ``benchmarks/`` is generated from a :class:`Sweep` here, so the grid is
read in one place. All sampler sweeps share :data:`PARAM_NAMES`; an axis a sweep does not
vary holds its base value, so every result row carries every parameter (one tidy column each).

Tiers:

* ``smoke``   a few tiny points that run on a CPU under the Triton interpreter (CI).
* ``quick``   about 60 points around the base point, for sign-off of a kernel change.
* ``nightly`` one-axis sweeps around the base point (R=128, K=4, V=151936, phi=0.5, trailing
  placeholders), full placeholder-density sweeps per mode and draft kind, the peers, and the
  per-kernel breakdown.
* ``full``    the cartesian grid of spec section 8 (hours; for a dedicated box).

Append-only: results key on tier, sweep and parameter values.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

from .workloads import Workload

PARAM_NAMES = ("variant", "mode", "draft", "num_reqs", "K", "vocab_size", "phi", "pattern")
STAGES = ("stats", "cum_log_p", "residual_mass", "rejection", "resample", "insert")
TIERS = ("smoke", "quick", "nightly", "full")

# The base point of the nightly one-axis sweeps (issue: R=128, K=4, V=151936, phi=0.5).
BASE = {
    "variant": ("mrv2", "mrv2-pre50939", "fast"),
    "mode": ("greedy", "standard", "block"),
    "draft": ("logits",),
    "num_reqs": (128,),
    "K": (4,),
    "vocab_size": (151936,),
    "phi": (0.5,),
    "pattern": ("trailing",),
}


@dataclass(frozen=True)
class Sweep:
    """One benchmark class: a name and the values of every parameter axis."""

    tier: str
    name: str
    axes: tuple[tuple[str, tuple], ...]
    kind: str = "sampler"  # "sampler" (end to end) or "stages" (per-kernel breakdown)
    latency: bool = True  # also an asv-statistics time_ class (replays the sweep's measurement)

    @property
    def class_name(self) -> str:
        return self.tier.capitalize() + self.name

    @property
    def param_names(self) -> list[str]:
        return [name for name, _ in self.axes]

    @property
    def params(self) -> list[list]:
        return [list(values) for _, values in self.axes]

    def points(self) -> list[dict]:
        """Every parameter combination, in asv's ``itertools.product`` order."""
        names = self.param_names
        return [dict(zip(names, combo)) for combo in itertools.product(*self.params)]


def workload_of(point: dict) -> Workload:
    """The workload a parameter combination measures (seed 0, the builder's defaults)."""
    phi = float(point["phi"])
    pattern = "all" if phi == 1.0 else point["pattern"]
    return Workload(
        num_reqs=int(point["num_reqs"]),
        num_speculative_steps=int(point["K"]),
        vocab_size=int(point["vocab_size"]),
        placeholder_density=phi,
        placeholder_pattern=pattern,
        mode=point["mode"],
        draft=point["draft"],
    )


def _sweep(tier: str, name: str, kind: str = "sampler", latency: bool = True, **overrides: tuple) -> Sweep:
    axes = dict(BASE, **overrides)
    if kind == "stages":
        axes["stage"] = STAGES
    return Sweep(tier, name, tuple(axes.items()), kind, latency and kind == "sampler")


_PEERS = ("mrv2", "mrv2-pre50939", "fast", "torch-eager", "flashinfer", "flashinfer-kernel")
_DENSITIES = (0.0, 0.25, 0.5, 0.75, 1.0)

SWEEPS: tuple[Sweep, ...] = (
    # ---- smoke: CPU interpreter, tiny shapes
    _sweep("smoke", "Grid", num_reqs=(2,), K=(2,), vocab_size=(300,), mode=("greedy", "block"),
           phi=(0.0, 0.5)),
    # ---- quick: ~60 points for sign-off
    _sweep("quick", "Density", phi=(0.0, 0.5, 1.0), draft=("logits", "one-hot")),
    _sweep("quick", "Shape", num_reqs=(8, 512), vocab_size=(32000, 262144)),
    # ---- nightly: one-axis sweeps around the base point, density sweeps per mode, peers.
    # Latency (asv statistics over the replayed samples) for the one-axis sweeps and the
    # placeholder extremes; every sweep is measured once per run, variants interleaved.
    _sweep("nightly", "Batch", num_reqs=(1, 8, 32, 128, 256, 512)),
    _sweep("nightly", "Steps", K=(1, 3, 4, 7, 8)),
    _sweep("nightly", "Vocab", vocab_size=(32000, 128256, 151936, 155264, 262144)),
    _sweep("nightly", "Placeholders", phi=(0.0, 1.0)),
    _sweep("nightly", "Density", latency=False, phi=_DENSITIES, pattern=("trailing", "random"),
           draft=("logits", "one-hot")),
    _sweep("nightly", "Peers", latency=False, variant=_PEERS, mode=("standard",), phi=(0.0,),
           num_reqs=(1, 32, 128, 512), vocab_size=(32000, 151936)),
    _sweep("nightly", "Stages", kind="stages", phi=(0.0, 0.5, 1.0), draft=("logits", "one-hot")),
    # ---- full: the cartesian grid of spec section 8
    _sweep("full", "Grid", latency=False, num_reqs=(1, 8, 32, 128, 256, 512), K=(1, 4, 8),
           vocab_size=(32000, 151936, 262144), phi=(0.0, 0.5, 1.0), draft=("logits", "one-hot")),
    _sweep("full", "Stages", kind="stages", num_reqs=(8, 128, 512), phi=_DENSITIES,
           draft=("logits", "one-hot")),
)  # fmt: skip


def sweeps(tier: str | None = None) -> tuple[Sweep, ...]:
    if tier is not None and tier not in TIERS:
        raise ValueError(f"tier: expected one of {TIERS}, got {tier!r}")
    return tuple(s for s in SWEEPS if tier is None or s.tier == tier)


def bench_regex(tier: str) -> str:
    """The ``asv run --bench`` pattern that selects one tier."""
    sweeps(tier)  # validates
    return rf"^bench_\w+\.{tier.capitalize()}[A-Z]"
