"""The GPU's state around each timed replay, read through NVML: clocks, temperature, power and
throttle reasons, so that a sample taken while the GPU slowed down is flagged and left out.

NVIDIA's nvbench discards samples taken while the clocks are throttled; specsample does the
same. A sample is **throttled** when, read just before or just after its replay:

- NVML reports a thermal or power slowdown (:data:`THROTTLE_REASONS`: hardware or software
  thermal slowdown, hardware slowdown, power brake, software power cap), or
- the SM clock is below :data:`MIN_CLOCK_FRACTION` (90%) of the clock at the run's start (the
  first reading of the monitor, taken right after the first replay, when the GPU is busy).

Without NVML (``nvidia-ml-py`` not installed, or no driver library), :func:`open_monitor`
returns an :class:`UnknownMonitor`: nothing is flagged, the state is recorded as ``"unknown"``
and :attr:`UnknownMonitor.why` says why in one line.

:func:`lock_clocks` locks the SM clock where the box allows it (``nvmlDeviceSetGpuLockedClocks``
needs root or a driver setting); the result says whether it did, and why not. No torch here:
the device is named by its PCI bus id or its NVML index.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass, field

MIN_CLOCK_FRACTION = 0.9
UNKNOWN = "unknown"

# NVML clock-event reason bits that mean a slowdown (nvml.h, nvmlClocksEventReason*), by name.
# "GPU idle", "applications clocks setting", "sync boost" and "display clock" are not slowdowns.
THROTTLE_REASONS: dict[str, int] = {
    "sw_power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sw_thermal_slowdown": 0x20,
    "hw_thermal_slowdown": 0x40,
    "hw_power_brake_slowdown": 0x80,
}


def throttle_names(mask: int) -> list[str]:
    """The slowdown reasons set in an NVML clock-event reason ``mask``."""
    return [name for name, bit in THROTTLE_REASONS.items() if mask & bit]


@dataclass(frozen=True)
class Reading:
    """One NVML reading of the GPU."""

    sm_clock_mhz: float
    mem_clock_mhz: float
    temperature_c: float
    power_w: float
    reasons: int  # NVML clock-event reason bits

    @property
    def throttle(self) -> list[str]:
        return throttle_names(self.reasons)


def throttled(readings: Sequence[Reading], start_sm_clock_mhz: float | None) -> str | None:
    """Why a sample read as ``readings`` (before and after its replay) is throttled, or None."""
    for r in readings:
        if r.throttle:
            return ", ".join(r.throttle)
        if start_sm_clock_mhz and r.sm_clock_mhz < MIN_CLOCK_FRACTION * start_sm_clock_mhz:
            return (
                f"SM clock {r.sm_clock_mhz:.0f} MHz < {MIN_CLOCK_FRACTION:.0%} of {start_sm_clock_mhz:.0f} MHz at start"
            )
    return None


@dataclass
class SampleStates:
    """The state of every sample of one subject at one point: which were throttled and why,
    and each sample's SM clock (the reading after its replay)."""

    throttled: list[str | None] = field(default_factory=list)
    sm_clock_mhz: list[float] = field(default_factory=list)
    readings: list[Reading] = field(default_factory=list)

    def add(self, why: str | None, after: Reading | None) -> None:
        self.throttled.append(why)
        if after is not None:
            self.sm_clock_mhz.append(after.sm_clock_mhz)
            self.readings.append(after)

    @property
    def n_throttled(self) -> int:
        return sum(why is not None for why in self.throttled)

    def keep(self, samples: Sequence[float]) -> list[float]:
        """The samples not throttled (``samples`` in the order they were added)."""
        return [s for s, why in zip(samples, self.throttled) if why is None]

    def summary(self) -> dict:
        """What the results record beside the samples (medians over the kept samples)."""
        kept = [r for r, why in zip(self.readings, self.throttled) if why is None] or self.readings
        if not kept:
            return {"state": UNKNOWN, "n_throttled": self.n_throttled}
        reasons = sorted({why for why in self.throttled if why})
        return {
            "state": "read",
            "n_throttled": self.n_throttled,
            "throttled_because": reasons,
            "sm_clock_mhz": statistics.median(r.sm_clock_mhz for r in kept),
            "mem_clock_mhz": statistics.median(r.mem_clock_mhz for r in kept),
            "temperature_c": max(r.temperature_c for r in self.readings),
            "power_w": statistics.median(r.power_w for r in kept),
            "sm_clock_mhz_samples": list(self.sm_clock_mhz),
        }


class UnknownMonitor:
    """No NVML: every reading is None, nothing is flagged, the state is recorded as unknown."""

    available = False

    def __init__(self, why: str) -> None:
        self.why = why
        self.start_sm_clock_mhz = None
        self.locked: dict = {"locked": False, "why": why}

    def read(self) -> Reading | None:
        return None

    def check(self, before: Reading | None, after: Reading | None) -> str | None:
        return None

    def describe(self) -> dict:
        return {"state": UNKNOWN, "why": self.why, "clocks_locked": False}

    def close(self) -> None:
        pass


class NvmlMonitor:
    """Readings of one GPU through NVML; the first reading fixes the run's start clock."""

    available = True

    def __init__(self, nvml, handle) -> None:
        self.nvml = nvml
        self.handle = handle
        self.start_sm_clock_mhz: float | None = None
        self.start: Reading | None = None
        self.locked: dict = {"locked": False, "why": "not asked (--lock-clocks)"}
        self._reasons = getattr(nvml, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            nvml, "nvmlDeviceGetCurrentClocksThrottleReasons"
        )

    def read(self) -> Reading:
        n, h = self.nvml, self.handle
        reading = Reading(
            sm_clock_mhz=float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_SM)),
            mem_clock_mhz=float(n.nvmlDeviceGetClockInfo(h, n.NVML_CLOCK_MEM)),
            temperature_c=float(n.nvmlDeviceGetTemperature(h, n.NVML_TEMPERATURE_GPU)),
            power_w=float(n.nvmlDeviceGetPowerUsage(h)) / 1000.0,
            reasons=int(self._reasons(h)),
        )
        return reading

    def check(self, before: Reading | None, after: Reading | None) -> str | None:
        """Why the sample between ``before`` and ``after`` is throttled, or None; the first
        unthrottled reading after a replay fixes the start clock."""
        readings = [r for r in (before, after) if r is not None]
        if self.start_sm_clock_mhz is None and after is not None and not after.throttle:
            self.start, self.start_sm_clock_mhz = after, after.sm_clock_mhz
        return throttled(readings, self.start_sm_clock_mhz)

    def describe(self) -> dict:
        out = {"state": "read", "clocks_locked": bool(self.locked.get("locked")), "lock": dict(self.locked)}
        if self.start is not None:
            out["start"] = {
                "sm_clock_mhz": self.start.sm_clock_mhz,
                "mem_clock_mhz": self.start.mem_clock_mhz,
                "temperature_c": self.start.temperature_c,
                "power_w": self.start.power_w,
            }
        return out

    def lock_clocks(self, mhz: int | None = None) -> dict:
        """Lock the SM clock at ``mhz`` (default: the highest supported), where the box allows
        it. Returns ``{"locked": bool, "mhz" or "why": ...}``; never raises."""
        n, h = self.nvml, self.handle
        try:
            if mhz is None:
                mhz = int(n.nvmlDeviceGetMaxClockInfo(h, n.NVML_CLOCK_SM))
            n.nvmlDeviceSetGpuLockedClocks(h, mhz, mhz)
        except Exception as exc:  # noqa: BLE001 - NVMLError_NoPermission, NotSupported: said, not raised
            self.locked = {"locked": False, "why": f"the box does not allow locking the clocks: {_nvml_error(exc)}"}
        else:
            self.locked = {"locked": True, "mhz": mhz}
        return self.locked

    def close(self) -> None:
        """Unlock what :meth:`lock_clocks` locked (locked clocks outlive the process)."""
        if self.locked.get("locked"):
            try:
                self.nvml.nvmlDeviceResetGpuLockedClocks(self.handle)
            except Exception:  # noqa: BLE001 - best effort on the way out
                pass
            self.locked = {**self.locked, "reset": True}
        try:
            self.nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass


def _nvml_error(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:200]


def open_monitor(pci_bus_id: str | None = None, index: int = 0, *, nvml=None) -> NvmlMonitor | UnknownMonitor:
    """A monitor of the GPU at ``pci_bus_id`` (else NVML ``index``); an :class:`UnknownMonitor`
    saying why when NVML cannot be used. ``nvml`` replaces the ``pynvml`` module (tests)."""
    if nvml is None:
        try:
            import pynvml as nvml
        except ImportError:
            return UnknownMonitor("GPU state unknown: nvidia-ml-py is not installed (pip install nvidia-ml-py)")
    try:
        nvml.nvmlInit()
    except Exception as exc:  # noqa: BLE001 - NVMLError_LibraryNotFound, DriverNotLoaded
        return UnknownMonitor(f"GPU state unknown: NVML could not start ({_nvml_error(exc)})")
    try:
        handle = (
            nvml.nvmlDeviceGetHandleByPciBusId(pci_bus_id.encode() if isinstance(pci_bus_id, str) else pci_bus_id)
            if pci_bus_id
            else nvml.nvmlDeviceGetHandleByIndex(index)
        )
    except Exception as exc:  # noqa: BLE001
        try:
            nvml.nvmlShutdown()
        except Exception:  # noqa: BLE001
            pass
        where = f"bus {pci_bus_id}" if pci_bus_id else f"index {index}"
        return UnknownMonitor(f"GPU state unknown: NVML has no GPU at {where} ({_nvml_error(exc)})")
    return NvmlMonitor(nvml, handle)


def cuda_pci_bus_id() -> str | None:
    """The PCI bus id of the current CUDA device (NVML indices ignore CUDA_VISIBLE_DEVICES),
    or None when torch does not say."""
    try:
        import torch

        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        return f"{props.pci_domain_id:08x}:{props.pci_bus_id:02x}:{props.pci_device_id:02x}.0"
    except Exception:  # noqa: BLE001 - an older torch without the pci_* properties
        return None
