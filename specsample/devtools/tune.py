"""``specsample tune``: a sampler's candidate configurations, timed on a GPU beside mrv2.

The sampler is ``fast`` (the default) or ``express`` (``--sampler express``). For each workload
it builds one ``Pipeline`` of that sampler per candidate ``Config``
(:class:`specsample.kernels.fast.Config` or :class:`specsample.kernels.express.Config`; and
mrv2's pipeline as the reference), runs each once
(so every stage finds its intermediates), then times, all interleaved in one measurement (cold
L2, CUDA-graph replay; :mod:`specsample.timing`): the whole call of every candidate, and each
kernel alone for mrv2 and the candidates named by ``--stages`` (on pipelines of their own,
:func:`specsample.measure.stage_calls`: a stage timed on a pipeline that already ran insert
would read tau + 1). It prints one line per workload, and each whole call's bandwidth fraction
(``bytes_required`` over the median, over the copy bandwidth measured once at the start: the
nightly tier's ``track_bandwidth_fraction``), and writes every median to JSON. This is how
``fast.default_config`` (and express's) is chosen (by hand, from these numbers); the runs and
what was decided from them are recorded in ``docs/performance-log.md``.

The sampler's own configurations are always timed: fast's ``large``, ``small`` and ``tiny``, or
express's ``large`` and ``small``. Other candidates are a named copy of one of them with some
fields replaced: ``--candidate w8=large:stats_warps=8``, or with ``--sampler express``
``--candidate b8=small:stats_blocks=8`` (``NAME=BASE:FIELD=VALUE,...``).
``--before MODULE`` also times another module of the same sampler (an earlier commit's, or a
kernel variant's) in its own default configuration, under the name ``before``; ``--before
NAME=MODULE`` under ``NAME``, so that several variants are timed in one interleaved measurement
(repeatable).
"""

from __future__ import annotations

import dataclasses
import functools
import importlib
import json
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import ModuleType

import torch

from ..kernels import express, fast, mrv2
from ..measure import input_copies, stage_calls
from ..timing import TimingConfig, copy_bandwidth, measure_interleaved
from ..workloads import Workload, bytes_required

BASE = dict(num_speculative_steps=4, vocab_size=151936)
WORKLOADS = {
    # small batches: one partial wave, latency chains
    "R1-standard-phi0": Workload(num_reqs=1, mode="standard", **BASE),
    "R1-standard-phi0.5": Workload(num_reqs=1, mode="standard", placeholder_density=0.5, **BASE),
    "R1-block-phi0.5": Workload(num_reqs=1, mode="block", placeholder_density=0.5, **BASE),
    "R1-greedy-phi0.5": Workload(num_reqs=1, mode="greedy", placeholder_density=0.5, **BASE),
    "R8-standard-phi0": Workload(num_reqs=8, mode="standard", **BASE),
    "R8-standard-phi0.5": Workload(num_reqs=8, mode="standard", placeholder_density=0.5, **BASE),
    "R8-greedy-phi0.5": Workload(num_reqs=8, mode="greedy", placeholder_density=0.5, **BASE),
    "R8-block-phi0.5": Workload(num_reqs=8, mode="block", placeholder_density=0.5, **BASE),
    "R16-block-phi0": Workload(num_reqs=16, mode="block", **BASE),
    "R32-standard-phi0": Workload(num_reqs=32, mode="standard", **BASE),
    "R32-block-phi0.5": Workload(num_reqs=32, mode="block", placeholder_density=0.5, **BASE),
    # where programs that only exit start to cost
    "R32-standard-phi1": Workload(num_reqs=32, mode="standard", placeholder_density=1.0, **BASE),
    "R64-standard-phi1": Workload(num_reqs=64, mode="standard", placeholder_density=1.0, **BASE),
    # the Peers point where express is closest to FlashInfer
    "R32-V32000-standard-phi0": Workload(num_reqs=32, mode="standard", num_speculative_steps=4, vocab_size=32000),
    # the base point and its placeholder densities (the goals' points, devtools/goals.json)
    "base-block-phi0": Workload(num_reqs=128, mode="block", **BASE),
    "base-block-phi0.5": Workload(num_reqs=128, mode="block", placeholder_density=0.5, **BASE),
    "base-block-phi1": Workload(num_reqs=128, mode="block", placeholder_density=1.0, **BASE),
    "base-standard-phi0": Workload(num_reqs=128, mode="standard", **BASE),
    "base-standard-phi0.5": Workload(num_reqs=128, mode="standard", placeholder_density=0.5, **BASE),
    "base-standard-phi1": Workload(num_reqs=128, mode="standard", placeholder_density=1.0, **BASE),
    "base-greedy-phi0": Workload(num_reqs=128, mode="greedy", **BASE),
    "base-greedy-phi1": Workload(num_reqs=128, mode="greedy", placeholder_density=1.0, **BASE),
    # one-hot drafts at the base point: the phi=1 / phi=0 ratios of one-hot drafts
    "base-standard-onehot-phi0": Workload(num_reqs=128, mode="standard", draft="one-hot", **BASE),
    "base-standard-onehot-phi1": Workload(
        num_reqs=128, mode="standard", draft="one-hot", placeholder_density=1.0, **BASE
    ),
    "base-block-onehot-phi0": Workload(num_reqs=128, mode="block", draft="one-hot", **BASE),
    "base-block-onehot-phi1": Workload(num_reqs=128, mode="block", draft="one-hot", placeholder_density=1.0, **BASE),
    "base-greedy-onehot-phi0": Workload(num_reqs=128, mode="greedy", draft="one-hot", **BASE),
    "base-greedy-onehot-phi1": Workload(num_reqs=128, mode="greedy", draft="one-hot", placeholder_density=1.0, **BASE),
    "V32000-block-phi0": Workload(num_reqs=128, mode="block", num_speculative_steps=4, vocab_size=32000),
    "R512-standard-phi0.5": Workload(num_reqs=512, mode="standard", placeholder_density=0.5, **BASE),
    "R512-standard-phi1": Workload(num_reqs=512, mode="standard", placeholder_density=1.0, **BASE),
}

# --sampler: the kernel module (its Pipeline takes config=) and its base candidates
SAMPLERS: dict[str, tuple[ModuleType, dict]] = {
    "fast": (fast, fast.NAMED_CONFIGS),
    "express": (express, express.NAMED_CONFIGS),
}
# Names that are not candidates: the reference, and the --before modules' default name.
RESERVED = ("mrv2", "before")
# Candidates whose kernels are also timed alone unless --stages says otherwise ("before" when given).
DEFAULT_STAGE_CANDIDATES = ("large", "small", "before")
TIMING = TimingConfig(l2="cold", calls_per_sample=10, num_samples=15)


@dataclasses.dataclass(frozen=True)
class Options:
    """What one ``specsample tune`` run measures."""

    workloads: tuple[str, ...] = tuple(WORKLOADS)
    candidates: dict = dataclasses.field(default_factory=lambda: dict(fast.NAMED_CONFIGS))  # name -> Config
    stage_candidates: tuple[str, ...] = DEFAULT_STAGE_CANDIDATES
    # other modules of the sampler (--before), by name: each one's Pipeline in its own defaults
    modules: dict = dataclasses.field(default_factory=dict)
    sampler: str = "fast"  # a key of SAMPLERS: whose Pipeline the candidates configure

    @property
    def module(self) -> ModuleType:
        return SAMPLERS[self.sampler][0]


def parse_candidate(text: str, bases: dict = fast.NAMED_CONFIGS) -> tuple[str, object]:
    """``NAME=BASE:FIELD=VALUE,...`` -> (NAME, BASE's config with those fields replaced);
    ``bases`` are the sampler's named configurations (``fast.NAMED_CONFIGS`` by default, or
    ``express.NAMED_CONFIGS``): always timed, and the bases of ``--candidate``.

    ``ValueError`` says what is wrong: the form, an unknown base or field, a bad value."""
    try:
        name, rest = text.split("=", 1)
        base, _, fields = rest.partition(":")
        changes = dict(kv.split("=", 1) for kv in fields.split(",") if kv)
    except ValueError:
        raise ValueError(f"expected NAME=BASE:FIELD=VALUE,..., got {text!r}") from None
    if base not in bases:
        raise ValueError(f"{text!r}: base must be one of {sorted(bases)}, got {base!r}")
    config = bases[base]
    types = {f.name: type(getattr(config, f.name)) for f in dataclasses.fields(config)}
    unknown = sorted(set(changes) - set(types))
    if unknown:
        raise ValueError(f"{text!r}: unknown Config fields {unknown}; known: {sorted(types)}")
    try:
        values = {k: _parse_value(types[k], v) for k, v in changes.items()}
        return name, dataclasses.replace(config, **values)
    except ValueError as e:
        raise ValueError(f"{text!r}: {e}") from None


def _parse_value(kind: type, text: str):
    return text.lower() in ("1", "true", "yes") if kind is bool else kind(text)


def options(
    workloads: Sequence[str] | None = None,
    candidates: Sequence[str] = (),
    stages: str | None = None,
    before: str | Sequence[str] | None = None,
    sampler: str = "fast",
) -> Options:
    """The command line's options, checked: ``ValueError`` names the one that is wrong.

    ``candidates`` are ``--candidate`` texts (:func:`parse_candidate`, on ``sampler``'s
    configurations), ``stages`` the comma-separated ``--stages``, ``before`` one or more
    ``[NAME=]MODULE`` to import (``--before``; NAME ``before`` when not given), ``sampler`` a key
    of :data:`SAMPLERS` (``--sampler``)."""
    if sampler not in SAMPLERS:
        raise ValueError(f"--sampler: expected one of {sorted(SAMPLERS)}, got {sampler!r}")
    unknown = sorted(set(workloads or ()) - set(WORKLOADS))
    if unknown:
        raise ValueError(f"--workload: unknown {unknown}; known: {', '.join(WORKLOADS)}")
    bases = SAMPLERS[sampler][1]
    chosen = dict(bases)
    for text in candidates:
        name, config = parse_candidate(text, bases)
        if name in chosen or name in RESERVED:
            raise ValueError(f"--candidate {name}: the name is taken")
        chosen[name] = config
    modules = {}
    for text in [before] if isinstance(before, str) else before or ():
        name, _, path = text.rpartition("=")
        name = name or "before"
        if name in chosen or name in modules or name == "mrv2":
            raise ValueError(f"--before {text}: the name {name!r} is taken")
        try:
            module = importlib.import_module(path)
        except ImportError as exc:
            raise ValueError(f"--before {text}: {exc}") from None
        if not hasattr(module, "Pipeline"):
            raise ValueError(f"--before {text}: the module has no Pipeline")
        modules[name] = module
    stage_candidates = DEFAULT_STAGE_CANDIDATES
    if stages is not None:
        stage_candidates = tuple(s for s in stages.split(",") if s)
        unknown = sorted(set(stage_candidates) - set(chosen) - set(modules) - {"before"})
        if unknown:
            raise ValueError(f"--stages: unknown candidates {unknown}")
    return Options(tuple(workloads or WORKLOADS), chosen, stage_candidates, modules, sampler)


def tune_workload(name: str, w: Workload, opts: Options, log: Callable[[str], None] = print) -> dict[str, float]:
    """Median us per call of ``label:call`` (every candidate) and ``label:stage`` (mrv2 and the
    stage candidates), all interleaved in one measurement."""
    copies = input_copies(w, "cold")
    factories = {"mrv2": mrv2.Pipeline}
    factories.update({k: functools.partial(opts.module.Pipeline, config=c) for k, c in opts.candidates.items()})
    factories.update({k: m.Pipeline for k, m in opts.modules.items()})  # each in its own default_config
    ops = {}
    for label, factory in factories.items():
        pipes = [factory(**inputs) for inputs in copies]
        for p in pipes:
            p.run()
        ops[f"{label}:call"] = [p.run for p in pipes]
        if label == "mrv2" or label in opts.stage_candidates:
            # Kernels alone, on pipelines of their own (measure.stage_calls)
            for stage, calls in stage_calls([factory(**inputs) for inputs in copies]).items():
                ops[f"{label}:{stage}"] = calls
    torch.cuda.synchronize()
    # enough calls per sample to rotate through every input copy
    cfg = dataclasses.replace(TIMING, calls_per_sample=max(TIMING.calls_per_sample, len(copies)))
    out = {label: t.median * 1e6 for label, t in measure_interleaved(ops, cfg).items()}
    calls = {k.split(":")[0]: v for k, v in out.items() if k.endswith(":call")}
    best_us, best = min((v, k) for k, v in calls.items() if k != "mrv2")
    log(
        f"{name}: "
        + "  ".join(f"{k} {v:.1f}" for k, v in calls.items())
        + f"  | best {best} {best_us:.1f} us ({calls['mrv2'] / best_us:.2f}x mrv2)"
    )
    for label in ("mrv2", *(c for c in opts.stage_candidates if c in factories)):
        stages = {k.split(":")[1]: v for k, v in out.items() if k.startswith(label + ":") and not k.endswith(":call")}
        log(f"    {label} stages: " + "  ".join(f"{k} {v:.1f}" for k, v in stages.items()))
    return out


def bandwidth_fractions(medians: dict[str, float], required: int, bandwidth: float) -> dict[str, float]:
    """Each whole call's bandwidth fraction from :func:`tune_workload`'s medians (``label:call``
    in us): ``required`` bytes (:func:`specsample.workloads.bytes_required`) per median, over
    ``bandwidth`` (bytes/s, read plus written)."""
    return {k.split(":")[0]: required / (us * 1e-6) / bandwidth for k, us in medians.items() if k.endswith(":call")}


def run(opts: Options, out: Path, log: Callable[[str], None] = print) -> dict:
    """Tune every workload of ``opts`` in turn; ``out`` is rewritten after each (a run cut short
    keeps what it measured). Needs a CUDA GPU."""
    bandwidth = copy_bandwidth()
    log(f"specsample tune: copy bandwidth {bandwidth / 1e12:.2f} TB/s (read + written)")
    results = {
        "device": torch.cuda.get_device_name(),
        "sampler": opts.sampler,
        "unit": "us per call, median, cold L2",
        "copy_bandwidth_gbps": bandwidth / 1e9,
        "bytes_required": {name: bytes_required(WORKLOADS[name]) for name in opts.workloads},
        "candidates": {k: dataclasses.asdict(v) for k, v in opts.candidates.items()},
        "modules": {k: m.__name__ for k, m in opts.modules.items()},
        "workloads": {},
    }
    start = time.monotonic()
    for name in opts.workloads:
        results["workloads"][name] = tune_workload(name, WORKLOADS[name], opts, log)
        fractions = bandwidth_fractions(results["workloads"][name], results["bytes_required"][name], bandwidth)
        log("    bandwidth fraction: " + "  ".join(f"{k} {v:.3f}" for k, v in fractions.items()))
        out.write_text(json.dumps(results, indent=1))
    log(f"specsample tune: {len(opts.workloads)} workloads in {time.monotonic() - start:.0f} s -> {out}")
    return results
