"""GPU state per sample (specsample.gpustate) against a fake NVML, the NVML-absent path, and
sampling by noise target (specsample.noise) through timing.interleave_watched."""

from __future__ import annotations

import builtins
import itertools
import math

import numpy as np
import pytest

from specsample import gpustate
from specsample.noise import NoiseTarget, median_ci, relative_halfwidth
from specsample.timing import interleave, interleave_watched


class FakeNvml:
    """The few pynvml calls gpustate makes; ``script`` gives (sm MHz, reasons) per reading."""

    NVML_CLOCK_SM, NVML_CLOCK_MEM, NVML_TEMPERATURE_GPU = 0, 1, 0

    def __init__(self, script, *, lock_error=None, init_error=None):
        self.script = iter(script)
        self.current = (1980, 0)
        self.lock_error, self.init_error = lock_error, init_error
        self.locked = None
        self.shut = False

    def nvmlInit(self):
        if self.init_error:
            raise self.init_error

    def nvmlShutdown(self):
        self.shut = True

    def nvmlDeviceGetHandleByIndex(self, index):
        return ("gpu", index)

    def nvmlDeviceGetHandleByPciBusId(self, bus):
        return ("gpu", bus)

    def nvmlDeviceGetClockInfo(self, handle, kind):
        if kind == self.NVML_CLOCK_SM:
            self.current = next(self.script, self.current)
            return self.current[0]
        return 3201

    def nvmlDeviceGetTemperature(self, handle, kind):
        return 55

    def nvmlDeviceGetPowerUsage(self, handle):
        return 412_000

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle):
        return self.current[1]

    def nvmlDeviceGetMaxClockInfo(self, handle, kind):
        return 1980

    def nvmlDeviceSetGpuLockedClocks(self, handle, lo, hi):
        if self.lock_error:
            raise self.lock_error
        self.locked = (lo, hi)

    def nvmlDeviceResetGpuLockedClocks(self, handle):
        self.locked = None


class CountingSampler:
    def __init__(self, values):
        self.values = itertools.cycle(values)

    def sample(self):
        return next(self.values)


def test_throttle_reasons_and_clock_drop_flag_a_sample():
    r = gpustate.Reading(1980, 3201, 60, 400, 0)
    assert gpustate.throttled([r], 1980) is None
    hot = gpustate.Reading(1980, 3201, 88, 700, gpustate.THROTTLE_REASONS["hw_thermal_slowdown"])
    assert gpustate.throttled([r, hot], 1980) == "hw_thermal_slowdown"
    slow = gpustate.Reading(1700, 3201, 60, 400, 0)  # 85.9% of 1980
    assert "SM clock 1700 MHz" in gpustate.throttled([slow], 1980)
    assert gpustate.throttled([gpustate.Reading(1800, 3201, 60, 400, 0)], 1980) is None  # 90.9%
    idle = gpustate.Reading(1980, 3201, 40, 80, 0x1)  # GPU idle is not a slowdown
    assert gpustate.throttled([idle], 1980) is None


def test_throttled_samples_are_left_out_and_counted():
    power = gpustate.THROTTLE_REASONS["sw_power_cap"]
    # Two readings per sample (before, after); samples 3 and 5 are throttled, sample 4 by clock.
    script = [(1980, 0)] * 4 + [(1980, 0), (1980, power)] + [(1600, 0), (1600, 0)] + [(1980, power), (1980, 0)]
    script += [(1980, 0)] * 20
    monitor = gpustate.open_monitor(nvml=FakeNvml(script))
    assert monitor.available
    taken = interleave_watched({"a": CountingSampler([1.0, 2.0, 3.0, 4.0, 5.0, 6.0])}, {"a": 6}, monitor=monitor)
    states = taken.states["a"]
    assert states.throttled[:2] == [None, None] and states.n_throttled == 3
    assert taken.samples["a"] == [1.0, 2.0, 6.0]
    summary = states.summary()
    assert summary["n_throttled"] == 3 and summary["sm_clock_mhz"] == 1980
    assert "sw_power_cap" in summary["throttled_because"] and len(summary["sm_clock_mhz_samples"]) == 6
    assert monitor.describe()["start"]["sm_clock_mhz"] == 1980


def test_lock_clocks_records_whether_it_did():
    nvml = FakeNvml([])
    monitor = gpustate.open_monitor(nvml=nvml)
    assert monitor.lock_clocks() == {"locked": True, "mhz": 1980} and nvml.locked == (1980, 1980)
    assert monitor.describe()["clocks_locked"]
    monitor.close()
    assert nvml.locked is None and nvml.shut  # locked clocks outlive the process: reset on close

    denied = gpustate.open_monitor(nvml=FakeNvml([], lock_error=PermissionError("Insufficient Permissions")))
    out = denied.lock_clocks()
    assert not out["locked"] and "does not allow locking" in out["why"] and "Insufficient" in out["why"]
    assert not denied.describe()["clocks_locked"]


def test_nvml_absent_is_unknown_with_a_clear_message(monkeypatch):
    real_import = builtins.__import__

    def no_pynvml(name, *args, **kwargs):
        if name == "pynvml":
            raise ImportError("No module named 'pynvml'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_pynvml)
    monitor = gpustate.open_monitor()
    assert not monitor.available and "nvidia-ml-py is not installed" in monitor.why
    assert monitor.describe() == {"state": "unknown", "why": monitor.why, "clocks_locked": False}
    taken = interleave_watched({"a": CountingSampler([1.0])}, {"a": 4}, monitor=monitor)
    assert taken.samples["a"] == [1.0] * 4 and taken.states["a"].n_throttled == 0
    assert taken.states["a"].summary() == {"state": "unknown", "n_throttled": 0}


def test_nvml_without_driver_is_unknown():
    class LibraryNotFound(Exception):
        pass

    monitor = gpustate.open_monitor(nvml=FakeNvml([], init_error=LibraryNotFound("NVML Shared Library Not Found")))
    assert not monitor.available and "NVML could not start" in monitor.why and "Library Not Found" in monitor.why


# ---- samples by noise target ----------------------------------------------------------------


def test_median_ci_covers_the_median_at_its_level():
    rng = np.random.default_rng(0)
    covered = 0
    for _ in range(400):
        lo, hi = median_ci(rng.normal(0.0, 1.0, 40))
        covered += lo <= 0.0 <= hi
    assert covered / 400 >= 0.97  # a 99% interval (conservative: order statistics)
    assert relative_halfwidth([]) == math.inf


class NoisySampler:
    def __init__(self, sigma, seed):
        self.rng = np.random.default_rng(seed)
        self.sigma = sigma

    def sample(self):
        return float(100e-6 * np.exp(self.rng.normal(0, self.sigma)))


def test_noise_target_stops_when_reached():
    samplers = {"a": NoisySampler(0.002, 1), "b": NoisySampler(0.002, 2)}
    taken = interleave_watched(samplers, {"a": 10, "b": 10}, until=NoiseTarget(0.005, time_cap_s=60))
    assert not taken.capped and len(taken.samples["a"]) == len(taken.samples["b"]) >= 10
    assert all(relative_halfwidth(s) < 0.005 for s in taken.samples.values())


def test_noisier_points_take_more_samples_and_hit_the_cap():
    quiet = interleave_watched({"a": NoisySampler(0.002, 3)}, {"a": 10}, until=NoiseTarget(0.005))
    noisy = interleave_watched({"a": NoisySampler(0.02, 4)}, {"a": 10}, until=NoiseTarget(0.005))
    assert len(noisy.samples["a"]) > len(quiet.samples["a"]) and not noisy.capped
    ticks = itertools.count()
    capped = interleave_watched(
        {"a": NoisySampler(0.5, 5)}, {"a": 10}, until=NoiseTarget(0.001, time_cap_s=30), clock=lambda: next(ticks)
    )
    assert capped.capped and len(capped.samples["a"]) < 40


def test_noise_target_validation():
    for bad in (0.0, -0.01):
        with pytest.raises(ValueError, match="noise target"):
            NoiseTarget(bad)
    with pytest.raises(ValueError, match="time cap"):
        NoiseTarget(0.005, time_cap_s=0)


def test_fixed_counts_still_interleave_abba():
    seen = []

    class Named:
        def __init__(self, name):
            self.name = name

        def sample(self):
            seen.append(self.name)
            return 1.0

    samples, errors = interleave({"A": Named("A"), "B": Named("B")}, {"A": 3, "B": 3})
    assert seen == ["A", "B", "B", "A", "A", "B"] and not errors and len(samples["A"]) == 3


def test_a_point_whose_every_sample_was_throttled_fails_with_the_count_and_the_reason(device):
    """Every sample under a power cap: the point fails (no sample is kept), and its record
    still says how many samples were left out and why, beside the GPU's state."""
    from specsample import worker

    power = gpustate.THROTTLE_REASONS["sw_power_cap"]
    monitor = gpustate.open_monitor(nvml=FakeNvml(itertools.repeat((1980, power))))
    point = dict(
        mode="standard", draft="logits", num_reqs=2, num_speculative_steps=2, vocab_size=64,
        placeholder_density=0.0, placeholder_pattern="trailing",
    )  # fmt: skip
    options = worker.JobOptions(l2="warm", calls_per_sample=1, num_samples=4, device=device, check=False, host=True)
    unit = worker.Unit("p", point, ("torch-eager",))
    record = worker._measure_unit(unit, options, lambda *a: None, monitor=monitor)["torch-eager"]
    assert record["status"] == "failed" and "throttled (sw_power_cap)" in record["reason"]
    assert record["n_throttled"] == 4 and record["gpu_state"]["throttled_because"] == ["sw_power_cap"]
    assert "samples" not in record  # nothing timed is kept
