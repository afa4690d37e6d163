"""Shared pieces of the asv suite: metric mixins and the class factory.

Every benchmark class is generated from a :class:`specsample.grid.Sweep` (one place declares
the grid) by combining a metric mixin with the sweep's ``params``:

* :class:`Latency` -- ``time_sample``: one end-to-end sampler call on the GPU timeline (CUDA
  graph replay, cold L2), measured *in the benchmark process* and reported through asv's timer
  hook (:class:`specsample.timing.GpuClock`), so asv keeps its samples and confidence interval.
* :class:`Derived` -- ``track_*``: latency, achieved-bandwidth fraction and the ratio to
  ``mrv2``. ``setup_cache`` measures the whole sweep once per class in one CUDA context, with
  the variants of each point interleaved (so ratios are immune to clock drift); the per-point
  ``track_*`` processes then only read numbers, with no CUDA context of their own.
* :class:`Stages` -- ``track_stage_us``: each kernel of the pipeline timed on its own.
* :class:`SmokeLatency` -- the CPU smoke tier: host wall time of one call under the Triton
  interpreter, to prove the suite imports and runs end to end on a machine without a GPU.

Cost model (why the split): asv starts one process per parameter combination; each pays a CUDA
context and a Triton cache load. ``setup`` runs in every one of them, ``setup_cache`` once per
class -- so nothing heavy may sit in a ``setup`` that ``track_*`` methods share.
"""

from __future__ import annotations

import os

import torch

from specsample import timing, variants
from specsample.grid import Sweep, workload_of
from specsample.measure import EAGER_CONFIG, input_copies, measure_stages, measure_variants

GPU_CLOCK = timing.GpuClock()
NIGHTLY_TIMING = timing.TimingConfig(l2="cold", calls_per_sample=10, num_samples=20)


def _needs_cuda() -> None:
    if not torch.cuda.is_available():
        raise NotImplementedError("needs a CUDA GPU")


def _point(names: list[str], params: tuple) -> dict:
    return dict(zip(names, params))


def _group_key(point: dict, drop: tuple[str, ...]) -> tuple:
    return tuple((k, v) for k, v in point.items() if k not in drop)


class Latency:
    """``time_sample``: seconds per call on the GPU timeline (cold L2, CUDA graph replay)."""

    timer = GPU_CLOCK
    number = 1  # one graph replay (calls_per_sample calls) per asv sample
    repeat = (10, 20, 2.0)  # 10 to 20 samples, at most 2 s
    warmup_time = 0.0  # setup already ran, compiled and replayed the graph
    rounds = 1
    timeout = 300

    def setup(self, *params):
        _needs_cuda()
        point = _point(self.param_names, params)
        w = workload_of(point)
        v = variants.get(point["variant"])
        v.check(w)  # NotSupported is a NotImplementedError: asv records a skip
        copies = input_copies(w, NIGHTLY_TIMING.l2)
        prepared = [v.prepare(w, inputs=inputs) for inputs in copies]
        if prepared[0].graph_capturable:
            cfg = timing.TimingConfig(NIGHTLY_TIMING.l2, max(NIGHTLY_TIMING.calls_per_sample, len(copies)))
            self.sampler = timing.Sampler([p.call for p in prepared], cfg)
        else:
            self.sampler = timing.Sampler([prepared[0].call], EAGER_CONFIG)

    def time_sample(self, *params):
        GPU_CLOCK.advance(self.sampler.sample())


class Derived:
    """Numbers derived from one interleaved measurement of every variant at each point."""

    timeout = 900  # setup_cache measures the whole sweep

    def setup_cache(self):
        if not torch.cuda.is_available():
            return None
        copy_bw = timing.copy_bandwidth()
        out = {"copy_bandwidth": copy_bw, "points": {}}
        names = self.param_names
        groups: dict[tuple, list[str]] = {}
        for point in self.sweep.points():
            groups.setdefault(_group_key(point, ("variant",)), []).append(point["variant"])
        for key, variant_names in groups.items():
            w = workload_of(dict(key, variant=variant_names[0]))
            for name, t in measure_variants(variant_names, w, NIGHTLY_TIMING).items():
                point_key = tuple(dict(key, variant=name)[n] for n in names)
                if isinstance(t, timing.Timing):
                    out["points"][point_key] = {"median": t.median, "bytes": t.extra["bytes_required"]}
        return out

    def setup(self, cache, *params):
        if cache is None:
            raise NotImplementedError("needs a CUDA GPU")
        if tuple(params) not in cache["points"]:
            raise NotImplementedError("variant does not support this point")

    def track_latency_us(self, cache, *params):
        return cache["points"][tuple(params)]["median"] * 1e6

    track_latency_us.unit = "us"

    def track_bandwidth_fraction(self, cache, *params):
        """Bytes the algorithm must move / latency / measured device copy bandwidth."""
        p = cache["points"][tuple(params)]
        return p["bytes"] / p["median"] / cache["copy_bandwidth"]

    track_bandwidth_fraction.unit = "fraction of copy bandwidth"

    def track_ratio_to_mrv2(self, cache, *params):
        """This variant's latency over mrv2's at the same point, measured interleaved."""
        point = _point(self.param_names, params)
        if point["variant"] == "mrv2":
            raise NotImplementedError("mrv2 is the denominator")
        base = tuple(dict(point, variant="mrv2")[n] for n in self.param_names)
        if base not in cache["points"]:
            raise NotImplementedError("mrv2 not measured at this point")
        return cache["points"][tuple(params)]["median"] / cache["points"][base]["median"]

    track_ratio_to_mrv2.unit = "ratio"


class Stages:
    """``track_stage_us``: each pipeline kernel timed alone (cold L2, graph replay)."""

    timeout = 900

    def setup_cache(self):
        if not torch.cuda.is_available():
            return None
        groups: dict[tuple, list[str]] = {}
        for point in self.sweep.points():
            key = _group_key(point, ("variant", "stage"))
            if point["variant"] not in groups.setdefault(key, []):
                groups[key].append(point["variant"])
        out = {}
        for key, variant_names in groups.items():
            w = workload_of(dict(key, variant=variant_names[0]))
            for (name, stage), t in measure_stages(variant_names, w, NIGHTLY_TIMING).items():
                out[tuple(dict(key, variant=name, stage=stage)[n] for n in self.param_names)] = t.median
        return out

    def setup(self, cache, *params):
        if cache is None:
            raise NotImplementedError("needs a CUDA GPU")
        if tuple(params) not in cache:
            raise NotImplementedError("this mode or draft kind does not launch this kernel")

    def track_stage_us(self, cache, *params):
        return cache[tuple(params)] * 1e6

    track_stage_us.unit = "us"


class SmokeLatency:
    """CPU smoke tier: host wall time of one call (interpreter on CPU, compiled on CUDA)."""

    number = 1
    repeat = (1, 2, 30.0)
    warmup_time = 0.0
    rounds = 1
    timeout = 300

    def setup(self, *params):
        device = "cuda" if torch.cuda.is_available() else "cpu"
        if device == "cpu" and os.environ.get("TRITON_INTERPRET") != "1":
            raise NotImplementedError("no CUDA and TRITON_INTERPRET is not 1")
        point = _point(self.param_names, params)
        w = workload_of(point)
        self.prepared = variants.get(point["variant"]).prepare(w, device=device)

    def time_sample(self, *params):
        self.prepared.call()
        if torch.cuda.is_available():
            torch.cuda.synchronize()


def make_classes(sweeps: tuple[Sweep, ...], module: str) -> dict[str, type]:
    """One asv class per (sweep, metric family), named ``<Tier><Sweep><Metric>``."""
    classes = {}
    for sweep in sweeps:
        if sweep.kind == "stages":
            families = {"": Stages}
        elif sweep.tier == "smoke":
            families = {"Latency": SmokeLatency}
        else:
            families = {"Latency": Latency, "Derived": Derived}
        for suffix, mixin in families.items():
            name = sweep.class_name + suffix
            attrs = {
                "__module__": module,
                "__doc__": f"{sweep.tier} tier, {sweep.name} sweep: {mixin.__doc__}",
                "sweep": sweep,
                "params": sweep.params,
                "param_names": sweep.param_names,
            }
            classes[name] = type(name, (mixin,), attrs)
    return classes
