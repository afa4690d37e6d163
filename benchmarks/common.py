"""Shared pieces of the asv suite: metric mixins and the class factory.

Every benchmark class is generated from a :class:`specsample.grid.Sweep` (one place declares
the grid) by combining a metric mixin with the sweep's ``params``:

* :class:`Latency` -- ``time_sample``: one end-to-end sampler call on the GPU timeline (CUDA
  graph replay, cold L2), measured *in the benchmark process* and reported through asv's timer
  hook (:class:`specsample.timing.GpuClock`), so asv keeps its samples and confidence interval.
* :class:`Derived` -- ``track_*``: latency, achieved-bandwidth fraction and the ratio to
  ``mrv2``. The whole sweep is measured once per class and run, in one CUDA context, with the
  variants of each point interleaved (so ratios are immune to clock drift); every other
  ``track_*`` process only reads those numbers (:func:`shared_measurement`).
* :class:`Stages` -- ``track_stage_us``: each kernel of the pipeline timed on its own.
* :class:`SmokeLatency` -- the CPU smoke tier: host wall time of one call under the Triton
  interpreter, to prove the suite imports and runs end to end on a machine without a GPU.

Cost model (why the split), measured on the H200: asv starts one process per parameter
combination; a ``time_sample`` point costs about 2-2.6 s (CUDA context, Triton cache load,
workload build, graph capture, samples), a ``track_*`` point that reads a shared measurement
about 0.02 s. So the tiers keep ``Latency`` classes to the points whose history matters most
and measure the wide sweeps through ``Derived``.

Why not asv's ``setup_cache``: asv keys that cache by the defining function's module and line,
so every generated class inheriting one ``setup_cache`` would share one cache (seen: the second
class's points all came back skipped). :func:`shared_measurement` keys by class name instead,
in a scratch directory private to one asv run.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import pickle
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from asv_runner.benchmarks.mark import SkipNotImplemented

from specsample import timing, variants
from specsample.grid import Sweep, workload_of
from specsample.measure import input_copies, measure_stages, measure_variants, sampler_for

GPU_CLOCK = timing.GpuClock()
NIGHTLY_TIMING = timing.TimingConfig(l2="cold", calls_per_sample=10, num_samples=20)


def _needs_cuda() -> None:
    if not torch.cuda.is_available():
        raise NotImplementedError("needs a CUDA GPU")


def _point(names: list[str], params: tuple) -> dict:
    return dict(zip(names, params))


def _group_key(point: dict, drop: tuple[str, ...]) -> tuple:
    return tuple((k, v) for k, v in point.items() if k not in drop)


def _run_scratch() -> Path:
    """A directory private to this asv run: SPECSAMPLE_RUN_ID (set by ``specsample bench``),
    else the pid of asv's forkserver, the common parent of this run's benchmark processes."""
    run_id = os.environ.get("SPECSAMPLE_RUN_ID") or f"forkserver-{os.getppid()}"
    path = Path(tempfile.gettempdir()) / f"specsample-run-{run_id}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def shared_measurement(key: str, measure: Callable[[], object]) -> object:
    """``measure()`` once per ``key`` and asv run; later callers (other processes) read it."""
    path = _run_scratch() / f"{key}.pkl"
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        with contextlib.suppress(FileNotFoundError):
            return pickle.loads(path.read_bytes())
        value = measure()
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(value))
        os.replace(tmp, path)
        return value


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
        self.sampler = sampler_for(v, w, input_copies(w, NIGHTLY_TIMING.l2), NIGHTLY_TIMING)

    def time_sample(self, *params):
        GPU_CLOCK.advance(self.sampler.sample())


class Derived:
    """Numbers derived from one interleaved measurement of every variant at each point."""

    timeout = 900  # the first point of a class measures the whole sweep

    def setup(self, *params):
        _needs_cuda()
        self.cache = shared_measurement(type(self).__name__, self.measure_sweep)
        if tuple(params) not in self.cache["points"]:
            raise NotImplementedError("variant does not support this point")

    def measure_sweep(self) -> dict:
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

    def track_latency_us(self, *params):
        return self.cache["points"][tuple(params)]["median"] * 1e6

    track_latency_us.unit = "us"

    def track_bandwidth_fraction(self, *params):
        """Bytes the algorithm must move / latency / measured device copy bandwidth."""
        p = self.cache["points"][tuple(params)]
        return p["bytes"] / p["median"] / self.cache["copy_bandwidth"]

    track_bandwidth_fraction.unit = "fraction of copy bandwidth"

    def track_ratio_to_mrv2(self, *params):
        """This variant's latency over mrv2's at the same point, measured interleaved."""
        point = _point(self.param_names, params)
        base = tuple(dict(point, variant="mrv2")[n] for n in self.param_names)
        # A skip raised in the body must be SkipNotImplemented: asv-runner records a plain
        # NotImplementedError here as a failure (only setup turns it into a skip).
        if point["variant"] == "mrv2" or base not in self.cache["points"]:
            raise SkipNotImplemented("the ratio needs mrv2 measured beside another variant")
        return self.cache["points"][tuple(params)]["median"] / self.cache["points"][base]["median"]

    track_ratio_to_mrv2.unit = "ratio"


class Stages:
    """``track_stage_us``: each pipeline kernel timed alone (cold L2, graph replay)."""

    timeout = 900

    def setup(self, *params):
        _needs_cuda()
        self.cache = shared_measurement(type(self).__name__, self.measure_sweep)
        if tuple(params) not in self.cache:
            raise NotImplementedError("this mode or draft kind does not launch this kernel")

    def measure_sweep(self) -> dict:
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

    def track_stage_us(self, *params):
        return self.cache[tuple(params)] * 1e6

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
        elif sweep.latency:
            families = {"Latency": Latency, "Derived": Derived}
        else:
            families = {"Derived": Derived}
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
