"""The tiers: which points each benchmark tier measures, declared as data.

Every asv class in ``benchmarks/`` is generated from a :class:`Sweep` here, so the grid is
read in one place. A sweep's axes are the canonical point axes of :mod:`specsample.schema`
(an axis a sweep does not vary holds its base value, so every result row carries every axis);
asv sees them under their asv parameter names (:func:`specsample.schema.asv_name`).

Tiers:

* ``smoke``    a few tiny points that run on a CPU under the Triton interpreter (CI).
* ``quick``    about 60 points around the base point, for sign-off of a kernel change.
* ``nightly``  one-axis sweeps around the base point (R=128, K=4, V=151936, phi=0.5, trailing
  placeholders), full placeholder-density sweeps per mode and draft kind, the peers, the
  per-kernel breakdown, and :data:`NIGHTLY_VLLM` beside our subjects (the releases that were
  the newest before it stay on the Vllm sweep's axis, retired); :data:`FIDELITY` (the
  release mrv2 replicates, and ``mrv2-vllm``) in every sampler sweep but the peers.
* ``releases`` every MRV2 release of vLLM (:data:`MRV2_RELEASES`) beside our subjects and
  ``mrv2-vllm``: density x mode x draft kind at the base point (trailing placeholders), and
  one-axis sweeps of R, K and V.
* ``full``     the cartesian grid of spec section 8 (hours; for a dedicated box).

Append-only: results key on tier, sweep and parameter values. No torch here.
"""

from __future__ import annotations

import itertools
import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from .schema import BASE_POINT, PATH_DEFAULTS, STAGE_AXIS, STAGES, TIERS, asv_name, release_key

# Every vLLM release on the package index with Model Runner V2's rejection sampler
# (vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py first ships in 0.22.0).
# Append-only: a new release is added here, and the releases tier measures it from then on.
MRV2_RELEASES = (
    "0.22.0",
    "0.22.1",
    "0.23.0",
    "0.24.0",
    "0.25.0",
    "0.25.1",
    "0.26.0",
    "0.27.0",
    "0.27.1",
    "0.28.0",
    "0.29.0",
    "0.30.0",
    "0.31.0",
    "0.32.0",
    "0.33.0",
    "0.34.0",
)
# Releases that `specsample nightly` found on the index since (append-only; see discovery.py).
# They are appended to MRV2_RELEASES, so every subject axis built from it only grows.
DISCOVERED_RELEASES_ENV = "SPECSAMPLE_DISCOVERED_RELEASES"
DISCOVERED_RELEASES_FILE = Path(__file__).resolve().parents[1] / "results" / "discovered_releases.json"


def discovered_releases_path() -> Path:
    return Path(os.environ.get(DISCOVERED_RELEASES_ENV) or DISCOVERED_RELEASES_FILE)


def load_discovered(path: Path, known: tuple[str, ...]) -> tuple[str, ...]:
    """The releases in ``path`` (``{"releases": ["0.35.0", ...]}``, in the order found), those
    already in ``known`` left out; () without the file. A malformed file is a ``ValueError``
    naming it: the tiers must not silently lose a release they measured."""
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return ()
    except (OSError, ValueError) as exc:
        raise ValueError(f"{path}: unreadable discovered releases ({exc})") from None
    releases = data.get("releases") if isinstance(data, dict) else None
    if not isinstance(releases, list) or not all(
        isinstance(r, str) and re.fullmatch(r"\d+\.\d+\.\d+(?:\.post\d+)?", r) for r in releases
    ):
        raise ValueError(f'{path}: expected {{"releases": ["X.Y.Z", ...]}}')
    return tuple(r for r in dict.fromkeys(releases) if r not in known)


MRV2_RELEASES = (*MRV2_RELEASES, *load_discovered(discovered_releases_path(), MRV2_RELEASES))
NEWEST_RELEASE = f"vllm=={max(MRV2_RELEASES, key=release_key)}"

# vLLM subjects beside ours in the nightly tier: the newest release, and the main branch of the
# checkout named by --vllm-repo / $SPECSAMPLE_VLLM_REPO (skipped, with that reason, without one).
NIGHTLY_VLLM = (NEWEST_RELEASE, "vllm@main")

OURS = ("mrv2", "mrv2-pre50939", "fast", "express")
# The newest release whose draws mrv2 reproduces ("same draws" at every point it runs; 0.31.0
# moved the resample noise to a hash), and mrv2 without its one deliberate difference: both in
# every nightly sampler sweep but the peers, so that the replica's fidelity is measured at every
# nightly point.
REPLICATED_RELEASE = "vllm==0.30.0"
FIDELITY = ("mrv2-vllm", REPLICATED_RELEASE)

# The base point of the nightly one-axis sweeps, one value per axis (sweeps override axes).
BASE = {"subject": OURS, **{axis: (value,) for axis, value in BASE_POINT.items()}}
BASE["mode"] = ("greedy", "standard", "block")
_NIGHTLY = {"subject": (*OURS, *FIDELITY)}  # appended after OURS: asv keeps every earlier value


@dataclass(frozen=True)
class Sweep:
    """One benchmark class: a name and the values of every axis (canonical names)."""

    tier: str
    name: str
    axes: tuple[tuple[str, tuple], ...]
    kind: str = "sampler"  # "sampler" (end to end) or "stages" (per-kernel breakdown)
    latency: bool = True  # also an asv-statistics time_ class (replays the sweep's measurement)
    timeout: int = 900  # seconds asv allows the first point, which measures the whole sweep
    max_crashes: int = 2  # crashes of a subject in one mode and draft kind before its other points there are not run
    retired: tuple[str, ...] = ()  # subjects on the axis for their history only: not measured

    @property
    def class_name(self) -> str:
        return self.tier.capitalize() + self.name

    @property
    def axis_names(self) -> list[str]:
        """Canonical axis names, in asv's parameter order."""
        return [name for name, _ in self.axes]

    @property
    def param_names(self) -> list[str]:
        """The asv parameter names (append-only spellings) of :attr:`axis_names`."""
        return [asv_name(name) for name in self.axis_names]

    @property
    def params(self) -> list[list]:
        return [list(values) for _, values in self.axes]

    @property
    def subjects(self) -> tuple[str, ...]:
        """The subjects measured: the subject axis less :attr:`retired`."""
        return tuple(s for s in dict(self.axes)["subject"] if s not in self.retired)

    def points(self) -> list[dict]:
        """Every combination as a canonical point, in asv's ``itertools.product`` order."""
        names = self.axis_names
        return [dict(zip(names, combo)) for combo in itertools.product(*self.params)]

    def point_of(self, params: tuple) -> dict:
        """The canonical point of one asv parameter combination."""
        return dict(zip(self.axis_names, params))


def _sweep(
    tier: str,
    name: str,
    kind: str = "sampler",
    latency: bool = True,
    timeout: int = 900,
    max_crashes: int = 2,
    retired: tuple[str, ...] = (),
    **overrides: tuple,
) -> Sweep:
    axes = dict(BASE, **overrides)
    if kind == "stages":
        axes[STAGE_AXIS] = STAGES
    return Sweep(tier, name, tuple(axes.items()), kind, latency and kind == "sampler", timeout, max_crashes, retired)


# The nightly Vllm sweep's subject axis is append-only (asv keeps a point's history only while its
# value stays on the axis): the newest release when the sweep began and vllm@main, the fidelity
# pair, then each release since. What is on it but not in NIGHTLY_VLLM or FIDELITY (a release
# that was the newest) is retired: kept on the axis for its history, not measured (the releases
# tier measures it).
_NIGHTLY_SINCE = "0.33.0"
_VLLM_AXIS = (
    f"vllm=={_NIGHTLY_SINCE}",
    "vllm@main",
    *FIDELITY,
    *(f"vllm=={r}" for r in MRV2_RELEASES[MRV2_RELEASES.index(_NIGHTLY_SINCE) + 1 :]),
)
_VLLM_RETIRED = tuple(s for s in _VLLM_AXIS if s not in (*NIGHTLY_VLLM, *FIDELITY))

# The path sweeps (docs/paths.md): vLLM's newer sampler paths as axes. Their subject axis is
# append-only like the Vllm sweep's: the newest release when they began, vllm@main, then each
# release since; the ones no longer newest are retired. Placeholders off: a FLy window needs
# real drafts after the deferred one.
_PATHS_SINCE = "0.34.0"
_PATHS_VLLM_AXIS = (
    f"vllm=={_PATHS_SINCE}",
    "vllm@main",
    *(f"vllm=={r}" for r in MRV2_RELEASES[MRV2_RELEASES.index(_PATHS_SINCE) + 1 :]),
)
_PATHS_RETIRED = tuple(s for s in _PATHS_VLLM_AXIS if s not in NIGHTLY_VLLM)


def _path_sweep(tier: str, name: str, **overrides) -> Sweep:
    """A sweep over path axes: every path axis at its default unless overridden, after the
    point axes, placeholders off."""
    paths = {axis: (value,) for axis, value in PATH_DEFAULTS.items()}
    paths.update({k: v for k, v in overrides.items() if k in paths})
    rest = {k: v for k, v in overrides.items() if k not in paths}
    rest.setdefault("placeholder_density", (0.0,))
    sweep = _sweep(tier, name, **rest)
    return Sweep(
        sweep.tier,
        sweep.name,
        (*sweep.axes, *paths.items()),
        sweep.kind,
        sweep.latency,
        sweep.timeout,
        sweep.max_crashes,
        sweep.retired,
    )


_PEERS = ("mrv2", "mrv2-pre50939", "fast", "torch-eager", "flashinfer", "flashinfer-kernel", "express")
_DENSITIES = (0.0, 0.25, 0.5, 0.75, 1.0)
# mrv2-vllm: mrv2 without its one deliberate difference (NaN logits as -inf), vLLM's 4 warps
_RELEASE_SUBJECTS = (*OURS, "mrv2-vllm", *(f"vllm=={r}" for r in MRV2_RELEASES))

SWEEPS: tuple[Sweep, ...] = (
    # ---- smoke: CPU interpreter, tiny shapes
    _sweep(
        "smoke",
        "Grid",
        num_reqs=(2,),
        num_speculative_steps=(2,),
        vocab_size=(300,),
        mode=("greedy", "block"),
        placeholder_density=(0.0, 0.5),
    ),
    # ---- quick: ~60 points for sign-off
    _sweep("quick", "Density", placeholder_density=(0.0, 0.5, 1.0), draft=("logits", "one-hot")),
    _sweep("quick", "Shape", num_reqs=(8, 512), vocab_size=(32000, 262144)),
    # ---- nightly: one-axis sweeps around the base point, density sweeps per mode, peers.
    # Latency (asv statistics over the replayed samples) for the one-axis sweeps and the
    # placeholder extremes; every sweep is measured once per run, subjects interleaved.
    _sweep("nightly", "Batch", num_reqs=(1, 8, 32, 128, 256, 512), **_NIGHTLY),
    _sweep("nightly", "Steps", num_speculative_steps=(1, 3, 4, 7, 8), **_NIGHTLY),
    _sweep("nightly", "Vocab", vocab_size=(32000, 128256, 151936, 155264, 262144), **_NIGHTLY),
    _sweep("nightly", "Placeholders", placeholder_density=(0.0, 1.0), **_NIGHTLY),
    _sweep(
        "nightly",
        "Density",
        **_NIGHTLY,
        latency=False,
        placeholder_density=_DENSITIES,
        placeholder_pattern=("trailing", "random"),
        draft=("logits", "one-hot"),
    ),
    _sweep(
        "nightly",
        "Peers",
        latency=False,
        subject=_PEERS,
        mode=("standard",),
        placeholder_density=(0.0,),
        num_reqs=(1, 32, 128, 512),
        vocab_size=(32000, 151936),
    ),
    _sweep("nightly", "Stages", kind="stages", placeholder_density=(0.0, 0.5, 1.0), draft=("logits", "one-hot")),
    _sweep(
        "nightly",
        "Vllm",
        retired=_VLLM_RETIRED,
        subject=(*OURS, *_VLLM_AXIS),
        placeholder_density=_DENSITIES,
    ),
    # ---- releases: every MRV2 release beside ours, measured in one run
    # Releases fault where request 0's first draft is -1 (0.22-0.24: standard; 0.25-0.27.1: block):
    # one crash per mode, draft kind and sweep is recorded and the rest there is not run, since
    # every crash costs a fresh worker (about 10 s on the H200).
    _sweep(
        "releases",
        "Density",
        timeout=3600,
        max_crashes=1,
        subject=_RELEASE_SUBJECTS,
        placeholder_density=_DENSITIES,
        draft=("logits", "one-hot"),
    ),
    _sweep("releases", "Shape", timeout=3600, max_crashes=1, subject=_RELEASE_SUBJECTS, num_reqs=(1, 8, 32, 128, 512)),
    _sweep(
        "releases", "Steps", timeout=3600, max_crashes=1, subject=_RELEASE_SUBJECTS, num_speculative_steps=(1, 4, 7)
    ),
    _sweep(
        "releases", "Vocab", timeout=3600, max_crashes=1, subject=_RELEASE_SUBJECTS, vocab_size=(32000, 128256, 151936)
    ),
    # ---- paths: vLLM's newer sampler paths (docs/paths.md). Ours run the data-only axes and
    # every path at its default (the baseline of each path); a subject without a path is skipped
    # there with that reason.
    _path_sweep(
        "nightly",
        "PathsFly",
        subject=(*OURS, *_PATHS_VLLM_AXIS),
        retired=_PATHS_RETIRED,
        mode=("greedy", "standard"),
        fly_window_size=(0, 2, 4),
        row_entropy=("low", "mixed", "high"),
    ),
    _path_sweep(
        "nightly",
        "PathsWatermark",
        subject=(*OURS, *_PATHS_VLLM_AXIS),
        retired=_PATHS_RETIRED,
        mode=("standard",),
        draft=("logits", "one-hot"),
        watermark=(False, True),
    ),
    _path_sweep(
        "nightly",
        "PathsMasked",
        subject=(*OURS, *_PATHS_VLLM_AXIS),
        retired=_PATHS_RETIRED,
        mode=("standard",),
        masked_vocab_fraction=(0.0, 0.5, 0.9, 0.99),
        skip_masked_vocab_blocks=(False, True),
    ),
    _path_sweep(
        "nightly",
        "PathsCache",
        subject=(*OURS, *_PATHS_VLLM_AXIS),
        retired=_PATHS_RETIRED,
        mode=("standard", "block"),
        draft_cache=("replicated", "sharded"),
    ),
    _path_sweep(
        "nightly",
        "PathsLogits",
        subject=(*OURS, *_PATHS_VLLM_AXIS),
        retired=_PATHS_RETIRED,
        logits_shape=("gaussian", "heavy-tailed"),
    ),
    # Every release at each path on and off: which release has which path, and its latency.
    _path_sweep(
        "releases",
        "PathsFly",
        timeout=3600,
        max_crashes=1,
        subject=_RELEASE_SUBJECTS,
        mode=("standard",),
        fly_window_size=(0, 2),
        row_entropy=("mixed",),
    ),
    _path_sweep(
        "releases",
        "PathsWatermark",
        timeout=3600,
        max_crashes=1,
        subject=_RELEASE_SUBJECTS,
        mode=("standard",),
        watermark=(False, True),
    ),
    _path_sweep(
        "releases",
        "PathsMasked",
        timeout=3600,
        max_crashes=1,
        subject=_RELEASE_SUBJECTS,
        mode=("standard",),
        masked_vocab_fraction=(0.0, 0.9),
        skip_masked_vocab_blocks=(False, True),
    ),
    _path_sweep(
        "releases",
        "PathsCache",
        timeout=3600,
        max_crashes=1,
        subject=_RELEASE_SUBJECTS,
        mode=("standard",),
        draft_cache=("replicated", "sharded"),
    ),
    # ---- full: the cartesian grid of spec section 8
    _sweep(
        "full",
        "Grid",
        latency=False,
        num_reqs=(1, 8, 32, 128, 256, 512),
        num_speculative_steps=(1, 4, 8),
        vocab_size=(32000, 151936, 262144),
        placeholder_density=(0.0, 0.5, 1.0),
        draft=("logits", "one-hot"),
    ),
    _sweep(
        "full",
        "Stages",
        kind="stages",
        num_reqs=(8, 128, 512),
        placeholder_density=_DENSITIES,
        draft=("logits", "one-hot"),
    ),
)


def sweeps(tier: str | None = None) -> tuple[Sweep, ...]:
    if tier is not None and tier not in TIERS:
        raise ValueError(f"tier: expected one of {TIERS}, got {tier!r}")
    return tuple(s for s in SWEEPS if tier is None or s.tier == tier)


def bench_regex(tier: str) -> str:
    """The ``asv run --bench`` pattern that selects one tier."""
    sweeps(tier)  # validates
    return rf"^bench_\w+\.{tier.capitalize()}[A-Z]"
