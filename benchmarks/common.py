"""Shared pieces of the asv suite: metric mixins and the class factory.

Every benchmark class is generated from a :class:`specsample.tiers.Sweep` (one place declares
the grid) by combining a metric mixin with the sweep's ``params``:

* :class:`Latency` -- ``time_sample``: per-call seconds of one end-to-end sampler call on the
  GPU timeline (CUDA graph replay, cold L2). The point is not measured in its own asv process:
  its real samples, taken in the sweep's one shared measurement (below), are replayed to asv
  through its timer hook (:class:`specsample.timing.GpuClock`), one stored sample per call of
  the body, so asv's samples, median and confidence interval are those GPU-timeline samples.
* :class:`Derived` -- ``track_*``: latency, achieved-bandwidth fraction and the ratio to
  ``mrv2``, read from the same shared measurement.
* :class:`Stages` -- ``track_stage_us``: each kernel of the pipeline timed on its own.
* :class:`SmokeLatency` -- the CPU smoke tier: host wall time of one call under the Triton
  interpreter, to prove the suite imports and runs end to end on a machine without a GPU.

What is measured where, and why. asv starts one process per parameter combination. Measuring a
point in its own process costs about 2-2.6 s on the H200 (CUDA context, Triton cache load,
workload build, graph capture, samples: the old ``Latency`` design), and puts the variants of a
point in different processes minutes apart, so GPU clock drift skews their ratio (a false
+5.7% seen between two variants whose interleaved ratio is 0.998). So each sweep is measured
*once per asv run*, in one process and one CUDA context, with all variants of each point
interleaved (:func:`measure_sweep`, :func:`specsample.measure.measure_variants`): the first
process of the sweep's ``Latency`` or ``Derived`` class to take the lock measures, and every
other process of either class only reads the stored result (:func:`shared_measurement`, keyed
by the sweep, so the two classes of one sweep share one measurement; two asv invocations, e.g.
one selecting a sweep's ``Latency`` class and a later one its ``Derived`` class, measure it
twice). A ``track_*`` point that reads it costs about 0.02 s on the H200; a replayed
``time_sample`` point does no GPU work either, but its cost is not yet measured on the H200.
The stored result keeps, per point, the raw per-call samples in the order they were taken,
their median, the bytes the algorithm must move and how the samples were taken (method, L2
mode, calls per sample, input copies).

Why not asv's ``setup_cache``: asv keys that cache by the defining function's module and line,
so every generated class inheriting one ``setup_cache`` would share one cache (seen: the second
class's points all came back skipped). :func:`shared_measurement` keys by sweep instead, in a
scratch directory private to one asv run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import pickle
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import torch
from filelock import FileLock
from asv_runner.benchmarks.mark import SkipNotImplemented

from specsample import subjects, timing, worker
from specsample.schema import axis_name
from specsample.tiers import Sweep
from specsample.workloads import workload_of as _workload_of

GPU_CLOCK = timing.GpuClock()
NIGHTLY_TIMING = timing.TimingConfig(l2="cold", calls_per_sample=10, num_samples=20)


def _needs_cuda() -> None:
    if not torch.cuda.is_available():
        raise NotImplementedError("needs a CUDA GPU")


def _point(names: list[str], params: tuple) -> dict:
    return dict(zip(names, params))


def _group_key(point: dict, drop: tuple[str, ...]) -> tuple:
    return tuple((k, v) for k, v in point.items() if k not in drop)


def _process_start(pid: int) -> str:
    """When ``pid`` started (clock ticks since boot; Linux), so a reused pid names a new run."""
    with contextlib.suppress(OSError, IndexError):
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    return "0"


def _run_scratch() -> Path:
    """A directory private to this asv run: SPECSAMPLE_RUN_ID (set by ``specsample bench``),
    else the pid and start time of asv's forkserver, the common parent of this run's benchmark
    processes (the start time keeps a later run whose forkserver reuses the pid from reading
    this run's measurements)."""
    ppid = os.getppid()
    run_id = os.environ.get("SPECSAMPLE_RUN_ID") or f"forkserver-{ppid}-{_process_start(ppid)}"
    path = Path(tempfile.gettempdir()) / f"specsample-run-{run_id}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def shared_measurement(key: str, measure: Callable[[], object]) -> object:
    """``measure()`` once per ``key`` and asv run; later callers (other processes) read it.

    If ``measure()`` raises (e.g. NotImplementedError without a GPU), nothing is stored and the
    exception propagates, so a caller's ``setup`` turns it into an asv skip."""
    path = _run_scratch() / f"{key}.pkl"
    with FileLock(str(path.with_suffix(".lock"))):
        with contextlib.suppress(FileNotFoundError):
            return pickle.loads(path.read_bytes())
        value = measure()
        tmp = path.with_suffix(".tmp")
        tmp.write_bytes(pickle.dumps(value))
        os.replace(tmp, path)
        return value


def _canonical(point: dict) -> dict:
    """A point under asv's parameter names -> the same point under the canonical axis names."""
    return {axis_name(k): v for k, v in point.items()}


def workload_of(point: dict):
    """The workload of a point given under asv's parameter names."""
    return _workload_of(_canonical(point))


def _progress(line: str) -> None:
    """Progress of a long measurement: stderr, and the run's progress file, which
    ``specsample bench`` prints as it grows (asv shows a benchmark's output only at its end)."""
    print(line, file=sys.stderr, flush=True)
    with contextlib.suppress(OSError), open(_run_scratch() / "progress.log", "a") as fh:
        fh.write(line + "\n")


def _units(sweep: Sweep, drop: tuple[str, ...]) -> list[worker.Unit]:
    """One worker unit per point of ``sweep`` less the ``drop`` axes, its subjects interleaved."""
    groups: dict[tuple, list[str]] = {}
    for point in sweep.points():
        if point["subject"] in sweep.retired:
            continue  # on the axis for its history; asv skips the point
        key = tuple((k, v) for k, v in point.items() if k not in drop)
        if point["subject"] not in groups.setdefault(key, []):
            groups[key].append(point["subject"])
    kind = "stages" if sweep.kind == "stages" else "sampler"
    return [
        worker.Unit(f"{sweep.class_name}/{i}", dict(key), tuple(names), kind)
        for i, (key, names) in enumerate(groups.items())
    ]


def _write_outcomes(sweep: Sweep, units: list[worker.Unit], outcome: worker.Outcome, copy_bandwidth: float) -> None:
    """The sweep's per-point outcomes, its subjects' provenance and the copy bandwidth its
    bandwidth fractions are divided by, for ``specsample bench`` to keep beside the results
    (``results/<machine>/<sha8>.outcomes``)."""
    points = []
    for unit in units:
        for subject, record in outcome.records[unit.key].items():
            points.append(
                {
                    "tier": sweep.tier,
                    "sweep": sweep.name,
                    "point": unit.point,
                    "subject": subject,
                    "status": record["status"],
                    "semantics": record.get("semantics"),
                    "reason": record.get("reason") or record.get("semantics_detail") or None,
                    "gpu": record.get("gpu"),
                    "acceptance_rate": record.get("acceptance_rate"),
                    "deferral_rate": record.get("deferral_rate"),
                }
            )
    sweeps = [{"tier": sweep.tier, "sweep": sweep.name, "copy_bandwidth_gbps": copy_bandwidth / 1e9}]
    data = {"subjects": outcome.provenance, "points": points, "sweeps": sweeps}
    (_run_scratch() / f"{sweep.class_name}.outcomes.json").write_text(json.dumps(data, default=str))


def _job_options(sweep: Sweep) -> worker.JobOptions:
    """How the sweep is measured: NIGHTLY_TIMING, on the GPUs ``specsample bench --gpus`` named
    ($SPECSAMPLE_GPUS, comma-separated indices; one worker per GPU over a deterministic shard)."""
    gpus = tuple(g for g in os.environ.get("SPECSAMPLE_GPUS", "").split(",") if g) or None
    return worker.JobOptions(
        l2=NIGHTLY_TIMING.l2,
        calls_per_sample=NIGHTLY_TIMING.calls_per_sample,
        num_samples=NIGHTLY_TIMING.num_samples,
        gpus=gpus,
        max_crashes=sweep.max_crashes,
    )


def measure_sweep(sweep: Sweep) -> dict:
    """Every point of ``sweep``, all subjects of a point interleaved, in worker processes
    (:mod:`specsample.worker`: a subject that faults or hangs costs only its own points).

    ``{"copy_bandwidth": bytes/s, "points": {params tuple: record}}``: a worker record
    (``status`` "ok" with the samples, "failed" or "crashed" with the reason; a point whose
    subject cannot run its workload is absent, and asv skips it)."""
    _needs_cuda()
    out = {"copy_bandwidth": timing.copy_bandwidth(), "points": {}}
    units = _units(sweep, ("subject",))
    outcome = worker.run_units(units, _job_options(sweep), log=_progress)
    names = sweep.axis_names
    for unit in units:
        for subject, record in outcome.records[unit.key].items():
            if record["status"] != "skipped":
                out["points"][tuple(dict(unit.point, subject=subject)[n] for n in names)] = record
    _write_outcomes(sweep, units, outcome, out["copy_bandwidth"])
    return out


_MEASURED: dict[str, dict] = {}


def sweep_measurement(sweep: Sweep) -> dict:
    """The sweep's one measurement in this asv run, shared by its Latency and Derived classes."""
    _MEASURED[sweep.class_name] = shared_measurement(sweep.class_name, lambda: measure_sweep(sweep))
    return _MEASURED[sweep.class_name]


class Replay:
    """Hands out one point's stored samples once each, in the order they were measured."""

    def __init__(self, samples: list[float]) -> None:
        self.samples = list(samples)
        self.taken = 0

    def next(self) -> float:
        if self.taken >= len(self.samples):
            raise RuntimeError(
                f"asv asked for sample {self.taken + 1} of a point measured {len(self.samples)} "
                "times; refusing to repeat samples (were number, repeat or warmup_time "
                "overridden with -a?)"
            )
        self.taken += 1
        return self.samples[self.taken - 1]


def _claim_replay(key: str, params: tuple) -> None:
    """Fail if this asv run already replayed this point: asv ``rounds`` > 1 (each round is a
    new process) would otherwise hand asv the same samples again as if they were new ones.
    Fail, too, for a point whose subject failed or crashed: asv records it as failed."""
    record = _MEASURED.get(key, {}).get("points", {}).get(tuple(params), {})
    if record.get("status", "ok") != "ok":
        raise RuntimeError(f"{record['status']}: {record.get('reason')}")
    claims = _run_scratch() / f"{key}.replayed"
    claims.mkdir(exist_ok=True)
    name = hashlib.sha256(repr(tuple(params)).encode()).hexdigest()[:24]
    try:
        (claims / name).open("x").close()
    except FileExistsError:
        raise RuntimeError(
            f"{key} {params}: already replayed in this asv run (rounds > 1?); its stored samples would be counted twice"
        ) from None


class Latency:
    """``time_sample``: seconds per call on the GPU timeline (cold L2, CUDA graph replay),
    the sweep's stored samples for this point replayed to asv one per call."""

    timer = GPU_CLOCK
    # asv_runner's TimeBenchmark with these: no calibration (number != 0), no warm-up
    # (warmup_time == 0), and exactly ``repeat`` timed calls of the body, one per sample
    # (min_repeat == max_repeat == repeat); one process per point (rounds == 1).
    number = 1
    repeat = NIGHTLY_TIMING.num_samples  # set per point in setup: the number of stored samples
    warmup_time = 0.0
    rounds = 1
    timeout = 900  # the first point of a sweep (Latency or Derived) measures the whole sweep

    def setup(self, *params):
        # asv re-runs setup before every sample (redo_setup) and then reads the timer: from
        # zero, the clock's difference over one call is the stored sample exactly.
        GPU_CLOCK.now = 0.0
        if getattr(self, "replay_of", None) == params:
            return  # the same point: keep the replay position
        point = sweep_measurement(self.sweep)["points"].get(tuple(params))
        if point is None:
            raise NotImplementedError("variant does not support this point")
        _claim_replay(self.sweep.class_name, params)
        self.point = point
        self.replay = Replay(point["samples"])
        self.repeat = len(point["samples"])  # asv re-reads repeat after setup
        self.replay_of = params

    def time_sample(self, *params):
        GPU_CLOCK.advance(self.replay.next())


class Derived:
    """Numbers derived from one interleaved measurement of every variant at each point."""

    timeout = 900  # the first point of a sweep (Latency or Derived) measures the whole sweep

    def setup(self, *params):
        self.cache = sweep_measurement(self.sweep)
        if tuple(params) not in self.cache["points"]:
            raise NotImplementedError("variant does not support this point")

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
        """``{params tuple: seconds}`` per (subject, stage); a subject that failed or crashed
        maps to its reason (a string), so ``track_stage_us`` fails there instead of skipping."""
        units = _units(self.sweep, ("subject", "stage"))
        outcome = worker.run_units(units, _job_options(self.sweep), log=_progress)
        out = {}
        for unit in units:
            for subject, record in outcome.records[unit.key].items():
                for stage in self.sweep.params[self.sweep.axis_names.index("stage")]:
                    key = tuple(dict(unit.point, subject=subject, stage=stage)[n] for n in self.sweep.axis_names)
                    if record["status"] == "ok" and stage in record["stages"]:
                        out[key] = record["stages"][stage]["median"]
                    elif record["status"] in ("failed", "crashed"):
                        out[key] = f"{record['status']}: {record['reason']}"
        _write_outcomes(self.sweep, units, outcome)
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
            # specsample bench --tier smoke sets it; a bare asv run without a GPU must too
            raise NotImplementedError("no CUDA and TRITON_INTERPRET is not 1")
        point = _point(self.param_names, params)
        w = workload_of(point)
        self.prepared = subjects.get(point["variant"]).prepare(w, device=device)

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
                # the first point of a sweep measures all of it (the releases tier's take longer)
                "timeout": sweep.timeout,
            }
            classes[name] = type(name, (mixin,), attrs)
    return classes
