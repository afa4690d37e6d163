"""Workload -> variant -> timed call: the measurements behind the asv suite and the CLI.

Each function builds the workload once per input copy (cold L2 rotates copies, see
:mod:`specsample.timing`), prepares every variant outside the timed region, and times on the
GPU timeline. Variants compared at one point are timed in one process with their samples
interleaved, so their ratio is not skewed by clock drift.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence

import torch

from . import variants
from .grid import STAGES
from .kernels import fast as fast_kernels
from .kernels import mrv2 as mrv2_kernels
from .timing import Sampler, Timing, TimingConfig, copies_for_cold_l2, measure_interleaved, sample_interleaved
from .workloads import Workload, bytes_required, make_inputs

# The eager reference syncs with the host per request and step: a few samples of one call
# each are enough to see it is orders of magnitude slower, and keep the sweep short.
EAGER_CONFIG = TimingConfig(calls_per_sample=1, num_samples=5, use_graph=False)


def _input_bytes(inputs: dict) -> int:
    return sum(x.numel() * x.element_size() for x in inputs.values() if isinstance(x, torch.Tensor))


def input_copies(w: Workload, l2: str, device: str = "cuda") -> list[dict]:
    """Independent copies of ``w``'s inputs; enough of them to defeat the L2 when ``l2="cold"``."""
    first = make_inputs(w, device=device)
    copies = [first]
    for _ in range(copies_for_cold_l2(_input_bytes(first), l2) - 1):
        copies.append({k: (x.clone() if isinstance(x, torch.Tensor) else x) for k, x in first.items()})
    return copies


def _rotating(config: TimingConfig, copies: int) -> TimingConfig:
    """``config`` with enough calls per sample to rotate through every input copy."""
    return TimingConfig(config.l2, max(config.calls_per_sample, copies), config.num_samples, config.use_graph)


def sampler_for(v: variants.Variant, w: Workload, copies: list[dict], config: TimingConfig) -> Sampler:
    """Prepare ``v`` on every input copy (outside any timing) and wrap it for sampling.

    A call with host syncs cannot be graph-captured: it is timed eagerly on one input set
    with :data:`EAGER_CONFIG`."""
    prepared = [v.prepare(w, inputs=inputs) for inputs in copies]
    if prepared[0].graph_capturable:
        return Sampler([p.call for p in prepared], _rotating(config, len(copies)))
    return Sampler([prepared[0].call], EAGER_CONFIG)


def measure_variants(
    names: Sequence[str], w: Workload, config: TimingConfig = TimingConfig()
) -> dict[str, Timing | str]:
    """Time each variant on ``w`` (interleaved); an unsupported variant maps to its reason."""
    copies = input_copies(w, config.l2)
    result: dict[str, Timing | str] = {}
    samplers: dict[str, Sampler] = {}
    for name in names:
        v = variants.get(name)
        reason = v.unsupported(w)
        if reason:
            result[name] = reason
        else:
            samplers[name] = sampler_for(v, w, copies, config)
    if samplers:
        result.update(sample_interleaved(samplers))
    for name, t in result.items():
        if isinstance(t, Timing):
            t.extra["bytes_required"] = bytes_required(w)
    return {name: result[name] for name in names}


# Variants whose kernels can be timed one by one: name -> Pipeline factory.
STAGE_VARIANTS = {
    "mrv2": mrv2_kernels.Pipeline,
    "mrv2-pre50939": functools.partial(mrv2_kernels.Pipeline, placeholder_fix=False),
    "fast": fast_kernels.Pipeline,
}


def stage_calls(pipes: Sequence[mrv2_kernels.Pipeline]) -> dict[str, list]:
    """Each kernel of these pipelines (one per input copy) as calls that can be timed alone.

    Runs every stage but the last once, so each stage finds the intermediates it reads and
    ``num_sampled`` holds tau. Every stage is then idempotent except the last (``insert``, or
    fast's resample, which inserts too: it turns tau into tau + 1): its calls restore
    ``num_sampled`` to tau first, so its timing includes one ``R``-element copy. Returns
    ``{stage name: [one call per pipeline]}`` in pipeline order.
    """
    for p in pipes:
        for _, stage in p.stages()[:-1]:
            stage()
    calls: dict[str, list] = {}
    for p in pipes:
        tau = p.num_sampled.clone()
        stages = p.stages()
        for i, (name, fn) in enumerate(stages):
            calls.setdefault(name, []).append(_restoring(p, tau, fn) if i == len(stages) - 1 else fn)
    return calls


def measure_stages(names: Sequence[str], w: Workload, config: TimingConfig = TimingConfig()) -> dict[tuple[str, str], Timing]:
    """Time each kernel of the pipeline on its own (:func:`stage_calls`), per variant,
    interleaving the variants."""
    copies = input_copies(w, config.l2)
    pipelines = {}
    for name in names:
        if name not in STAGE_VARIANTS:
            raise variants.NotSupported(f"per-kernel timing covers {tuple(STAGE_VARIANTS)}, not {name!r}")
        pipelines[name] = stage_calls([STAGE_VARIANTS[name](**inputs) for inputs in copies])
    torch.cuda.synchronize()
    cfg = _rotating(config, len(copies))
    out: dict[tuple[str, str], Timing] = {}
    for stage in STAGES:
        ops = {name: calls[stage] for name, calls in pipelines.items() if stage in calls}
        if ops:
            for name, t in measure_interleaved(ops, cfg).items():
                out[(name, stage)] = t
    return out


def _restoring(pipeline: mrv2_kernels.Pipeline, tau: torch.Tensor, last_stage):
    def call():
        pipeline.num_sampled.copy_(tau)
        last_stage()

    return call
