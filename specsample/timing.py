"""Kernel latency on the GPU timeline.

Method (``../shared/docs/gpu-benchmarking.md``), chosen on purpose and recorded with every result:

* **Warm-up past JIT**: every call is run eagerly twice before capture, so Triton compiles (or
  loads from its cache) outside the measurement.
* **CUDA graph replay**: ``calls_per_sample`` back-to-back calls are captured into one graph;
  one replay is timed with one CUDA event pair and divided by the count. This removes launch
  overhead, as a serving engine that captures its sampler sees it. Calls that cannot be
  captured (host syncs, e.g. the ``torch-eager`` baseline) are timed the same way without the
  graph, and the result says ``"events"`` instead of ``"cuda-graph"``.
* **Cold L2** (default): the calls rotate over several independent copies of the inputs whose
  total size is at least ``2 x L2``, so each call finds its logits evicted, as in production
  where the LM head has just written other data. **Warm L2** repeats one input set.
* **Median of samples**, with the raw per-call samples kept for quantiles and significance
  tests. Clocks are not locked on the GPU box: compare ratios measured in one process, with
  the calls being compared interleaved (:func:`measure_interleaved`).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
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
    method: str  # "cuda-graph" or "events"
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


def measure(calls: Sequence[Callable[[], object]], config: TimingConfig = TimingConfig()) -> Timing:
    """Time one operation whose ``calls`` each run it on their own input copy."""
    sampler = Sampler(calls, config)
    return sampler.timing([sampler.sample() for _ in range(config.num_samples)])


def measure_interleaved(
    operations: dict[str, Sequence[Callable[[], object]]], config: TimingConfig = TimingConfig()
) -> dict[str, Timing]:
    """Time several operations in one process, alternating their samples to cancel drift."""
    return sample_interleaved({name: Sampler(calls, config) for name, calls in operations.items()})


def sample_interleaved(samplers: dict[str, Sampler]) -> dict[str, Timing]:
    """Take each sampler's ``config.num_samples`` samples, alternating between samplers."""
    samples: dict[str, list[float]] = {name: [] for name in samplers}
    for i in range(max(s.config.num_samples for s in samplers.values())):
        for name, sampler in samplers.items():
            if i < sampler.config.num_samples:
                samples[name].append(sampler.sample())
    return {name: s.timing(samples[name]) for name, s in samplers.items()}


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


def copy_bandwidth(num_bytes: int = 1 << 30, repeats: int = 10) -> float:
    """Device-to-device copy bandwidth in bytes/s, counting bytes read plus written."""
    src = torch.empty(num_bytes // 4, dtype=torch.float32, device="cuda")
    dst = torch.empty_like(src)
    dst.copy_(src)
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
