"""Timing logic that needs no GPU: the asv clock, config checks, interleaving order."""

from __future__ import annotations

import pytest

from specsample.timing import GpuClock, Timing, TimingConfig, sample_interleaved


class _FakeSampler:
    """Returns scripted per-call seconds and logs the order in which it was sampled."""

    def __init__(self, name: str, values: list[float], log: list[str], num_samples: int) -> None:
        self.name, self.values, self.log = name, list(values), log
        self.config = TimingConfig(num_samples=num_samples)

    def sample(self) -> float:
        self.log.append(self.name)
        return self.values.pop(0)

    def timing(self, samples: list[float]) -> Timing:
        return Timing(samples, "fake", self.config.l2, self.config.calls_per_sample, 1)


def test_gpu_clock_advances_only_by_measured_time():
    clock = GpuClock()
    start = clock()
    clock.advance(2e-6)
    clock.advance(3e-6)
    assert clock() - start == pytest.approx(5e-6)


def test_sample_interleaved_alternates_and_respects_each_count():
    log: list[str] = []
    samplers = {
        "a": _FakeSampler("a", [1.0, 2.0, 3.0], log, 3),
        "b": _FakeSampler("b", [10.0], log, 1),  # e.g. an eager variant with fewer samples
    }
    out = sample_interleaved(samplers)
    assert log == ["a", "b", "a", "a"]
    assert out["a"].samples == [1.0, 2.0, 3.0] and out["a"].median == 2.0
    assert out["b"].samples == [10.0]


@pytest.mark.parametrize("kwargs", [{"l2": "lukewarm"}, {"calls_per_sample": 0}, {"num_samples": 0}])
def test_timing_config_rejects_bad_values(kwargs):
    with pytest.raises(ValueError):
        TimingConfig(**kwargs)
