"""Kernel latency on the GPU timeline.

Method (``docs/measurement.md``), chosen on purpose and recorded with every result:

* **Warm-up past JIT**: every call is run eagerly twice before capture, so Triton compiles (or
  loads from its cache) outside the measurement.
* **CUDA graph replay**: ``calls_per_sample`` back-to-back calls are captured into one graph;
  one replay is timed with one CUDA event pair and divided by the count. This removes launch
  overhead, as a serving engine that captures its sampler sees it. Calls that cannot be
  captured (host syncs) are timed the same way without the graph, and the result says
  ``"events"`` instead of ``"cuda-graph"``.
* **Cold L2** (default): the calls rotate over several independent copies of the inputs whose
  total size is at least ``2 x L2``, so each call finds its logits evicted, as in production
  where the LM head has just written other data. **Warm L2** repeats one input set.
* **Median of samples**, with the raw per-call samples kept for quantiles and significance
  tests. Clocks are not locked on the GPU box: compare ratios measured in one process, with
  the calls being compared interleaved, the order reversed every round (:func:`interleave`).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

import torch

L2_MODES = ("cold", "warm")


@dataclass(frozen=True)
class TimingConfig:
    """How a latency is measured. The defaults are the nightly tier's."""

    l2: str = "cold"
    calls_per_sample: int = 10  # captured calls per graph replay (one event pair)
    num_samples: int = 20
    use_graph: bool = True

    def __post_init__(self) -> None:
        if self.l2 not in L2_MODES:
            raise ValueError(f"l2: expected one of {L2_MODES}, got {self.l2!r}")
        if self.calls_per_sample < 1 or self.num_samples < 1:
            raise ValueError("calls_per_sample and num_samples: expected >= 1")


@dataclass
class Timing:
    """Per-call GPU seconds of one measured call, and how they were taken."""

    samples: list[float]
    method: str  # "cuda-graph", "events" or "host"
    l2: str
    calls_per_sample: int
    input_copies: int
    extra: dict = field(default_factory=dict)

    @property
    def median(self) -> float:
        return statistics.median(self.samples)


def copies_for_cold_l2(bytes_per_copy: int, l2: str, *, max_copies: int = 16) -> int:
    """Input copies to rotate so that together they are at least twice the L2 size."""
    if l2 == "warm":
        return 1
    l2_bytes = torch.cuda.get_device_properties(torch.cuda.current_device()).L2_cache_size
    need = -(-2 * l2_bytes // max(bytes_per_copy, 1))
    return max(1, min(max_copies, need))


class Sampler:
    """Times ``calls_per_sample`` calls (rotating over ``calls``) per sample."""

    def __init__(self, calls: Sequence[Callable[[], object]], config: TimingConfig) -> None:
        self.calls = list(calls)
        self.config = config
        self.start = torch.cuda.Event(enable_timing=True)
        self.end = torch.cuda.Event(enable_timing=True)
        for call in self.calls:  # JIT compile / cache load, outside any measurement
            call()
            call()
        torch.cuda.synchronize()
        self.graph = None
        self.capture_error = None
        if config.use_graph:
            try:
                self.graph = self._capture()
            except Exception as exc:  # e.g. a peer library that syncs: fall back to events
                self.capture_error = f"{type(exc).__name__}: {exc}"
                torch.cuda.synchronize()

    def _capture(self) -> torch.cuda.CUDAGraph:
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for call in self.calls:  # allocator warm-up on the capture stream
                call()
        torch.cuda.current_stream().wait_stream(stream)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            self._issue()
        graph.replay()  # first replay uploads the graph
        torch.cuda.synchronize()
        return graph

    def _issue(self) -> None:
        n = len(self.calls)
        for i in range(self.config.calls_per_sample):
            self.calls[i % n]()

    def sample(self) -> float:
        """Per-call seconds of one timed replay (blocks until the GPU is done)."""
        self.start.record()
        if self.graph is not None:
            self.graph.replay()
        else:
            self._issue()
        self.end.record()
        self.end.synchronize()
        return self.start.elapsed_time(self.end) * 1e-3 / self.config.calls_per_sample

    @property
    def method(self) -> str:
        return "cuda-graph" if self.graph is not None else "events"

    def timing(self, samples: list[float]) -> Timing:
        extra = {"capture_error": self.capture_error} if self.capture_error else {}
        return Timing(samples, self.method, self.config.l2, self.config.calls_per_sample, len(self.calls), extra)


class HostSampler:
    """Host wall-clock seconds per eager call: a CPU stand-in for :class:`Sampler`.

    For smoke runs under the Triton interpreter, where there is no GPU timeline. The numbers say
    nothing about GPU latency; the result says ``"host"``.
    """

    method = "host"

    def __init__(self, calls: Sequence[Callable[[], object]], config: TimingConfig, warmup: int = 1) -> None:
        self.calls = list(calls)
        self.config = config
        for _ in range(warmup):
            for call in self.calls:
                call()

    def sample(self) -> float:
        start = time.perf_counter()
        for i in range(self.config.calls_per_sample):
            self.calls[i % len(self.calls)]()
        return (time.perf_counter() - start) / self.config.calls_per_sample

    def timing(self, samples: list[float]) -> Timing:
        return Timing(samples, self.method, self.config.l2, self.config.calls_per_sample, len(self.calls))


def measure(calls: Sequence[Callable[[], object]], config: TimingConfig = TimingConfig()) -> Timing:
    """Time one operation whose ``calls`` each run it on their own input copy."""
    sampler = Sampler(calls, config)
    return sampler.timing([sampler.sample() for _ in range(config.num_samples)])


def measure_interleaved(
    operations: dict[str, Sequence[Callable[[], object]]], config: TimingConfig = TimingConfig()
) -> dict[str, Timing]:
    """Time several operations in one process, alternating their samples to cancel drift."""
    return sample_interleaved({name: Sampler(calls, config) for name, calls in operations.items()})


def interleave(samplers: Mapping[object, object], counts: Mapping[object, int]) -> tuple[dict, dict]:
    """Take ``counts[k]`` samples of each sampler, alternating, the order reversed each round.

    Two samplers give A B B A A B ...: a drift linear over two rounds adds the same to both.
    A sampler whose ``sample()`` raises stops (its error is returned) and the others go on.
    Every comparison specsample makes (asv sweeps, ``compare``, sign-off) samples this way.

    Returns ``(samples, errors)``: lists of seconds, and ``"Type: message"`` per failed sampler.
    """
    taken = interleave_watched(samplers, counts)
    return taken.samples, taken.errors


@dataclass
class Interleaved:
    """What :func:`interleave_watched` took: per sampler, the kept samples (throttled ones left
    out), the errors, each sampler's GPU states (:class:`specsample.gpustate.SampleStates`, when
    watched), and whether sampling stopped on the time cap before the noise target."""

    samples: dict
    errors: dict
    states: dict
    capped: bool = False
    seconds: float = 0.0


def interleave_watched(
    samplers: Mapping[object, object],
    counts: Mapping[object, int],
    *,
    monitor=None,
    until=None,
    clock: Callable[[], float] = time.monotonic,
) -> Interleaved:
    """:func:`interleave`, with the GPU read around each sample and an optional noise target.

    ``monitor`` (:func:`specsample.gpustate.open_monitor`): each sample is read before and after
    its replay; a throttled one is flagged and left out of the kept samples.
    ``until`` (:class:`specsample.noise.NoiseTarget`): instead of ``counts``, every sampler is
    sampled (all together, so the ABBA pairing holds) until each one's kept samples reach the
    target, at least ``max(counts[k], until.min_samples)`` each, or until the time cap or
    ``until.max_samples`` (then ``capped``).
    """
    from .gpustate import SampleStates

    order = list(samplers)
    raw: dict = {k: [] for k in order}
    states: dict = {k: SampleStates() for k in order}
    errors: dict = {}
    start = clock()
    capped = False
    rounds = max(counts.values(), default=0) if until is None else until.max_samples
    for i in range(rounds):
        for k in order if i % 2 == 0 else order[::-1]:
            if k in errors or (until is None and len(raw[k]) >= counts[k]):
                continue
            before = monitor.read() if monitor is not None else None
            try:
                raw[k].append(float(samplers[k].sample()))
            except Exception as exc:  # noqa: BLE001 - one sampler failing is a result, not a crash
                errors[k] = describe(exc)
                continue
            after = monitor.read() if monitor is not None else None
            states[k].add(monitor.check(before, after) if monitor is not None else None, after)
        if until is not None:
            live = [k for k in order if k not in errors]
            kept = {k: states[k].keep(raw[k]) for k in live}
            enough = all(len(raw[k]) >= counts.get(k, 0) and until.reached(kept[k]) for k in live)
            if not live or enough:
                break
            if clock() - start > until.time_cap_s or i == rounds - 1:
                capped = True
                break
    samples = {k: states[k].keep(raw[k]) for k in order}
    return Interleaved(samples, errors, states, capped, clock() - start)


def sample_interleaved(samplers: dict[str, Sampler]) -> dict[str, Timing]:
    """Each sampler's ``config.num_samples`` samples, interleaved (:func:`interleave`); an error
    in any sampler propagates."""
    samples, errors = interleave(samplers, {name: s.config.num_samples for name, s in samplers.items()})
    if errors:
        name, error = next(iter(errors.items()))
        raise RuntimeError(f"{name}: {error}")
    return {name: s.timing(samples[name]) for name, s in samplers.items()}


def describe(exc: BaseException) -> str:
    """One line for an exception: ``"Type: first line of the message"``."""
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


class GpuClock:
    """A monotonic clock that advances only by measured GPU time.

    asv's ``time_*`` benchmarks read a ``timer`` before and after the timed body. With this
    clock as the timer and a body that calls :meth:`advance` with one GPU-timeline sample,
    asv records GPU seconds per call (and keeps its statistics and samples) instead of host
    wall time, which for microsecond kernels would be mostly launch and sync overhead.
    """

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def copy_bandwidth(num_bytes: int = 1 << 30, repeats: int = 30, warmup_seconds: float = 0.2) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus written: the median
    of ``repeats`` event-timed copies, after ``warmup_seconds`` of copies that bring the GPU out
    of idle. The asv process measures it at the start of each sweep, often after the GPU has
    been idle: with one warm-up copy and 10 timed ones, a sweep's measurement moved by up to
    4.4% between nightly runs on the H200 (the gpuinfo one, at the start of a run, by 1.6%).
    Each sweep's value is kept in the run's outcomes (``copy_bandwidth_gbps``)."""
    src = torch.empty(num_bytes // 4, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    deadline = time.perf_counter() + warmup_seconds
    while True:
        for _ in range(10):
            dst.copy_(src)
        torch.cuda.synchronize()
        if time.perf_counter() >= deadline:
            break
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    times = []
    for _ in range(repeats):
        start.record()
        dst.copy_(src)
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e-3)
    del src, dst
    return 2 * num_bytes / statistics.median(times)
