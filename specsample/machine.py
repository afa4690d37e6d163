"""What asv's machine.json does not record: GPU, driver, CUDA, torch, Triton, clocks, copy
bandwidth. Written beside each run's results as ``results/<machine>/<sha8>.gpuinfo`` (JSON; not
named ``*.json`` because asv reads every such file there as a result file)."""

from __future__ import annotations

import json
import os
import platform
import re
import subprocess
from pathlib import Path

import torch
import triton


def _nvidia_smi(query: str) -> str | None:
    try:
        out = subprocess.run(
            ["nvidia-smi", f"--query-gpu={query}", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip().splitlines()[0] if out.stdout.strip() else None


def gpu_info(measure_bandwidth: bool = True) -> dict:
    """Describe this machine's accelerator and software stack (CPU-only machines too)."""
    info = {
        "host": platform.node(),
        "torch": torch.__version__,
        "triton": triton.__version__,
        "cuda": torch.version.cuda,
        "gpu": None,
        "driver": None,
        "clocks": None,
        "l2_bytes": None,
        "copy_bandwidth_gbps": None,
    }
    if not torch.cuda.is_available():
        return info
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    info["gpu"] = props.name
    info["sm_count"] = props.multi_processor_count
    info["l2_bytes"] = props.L2_cache_size
    info["memory_bytes"] = props.total_memory
    info["driver"] = _nvidia_smi("driver_version")
    info["uuid"] = str(getattr(props, "uuid", "")) or None
    info["cuda_visible_devices"] = os.environ.get("CUDA_VISIBLE_DEVICES")
    info["clocks"] = _nvidia_smi("clocks.sm,clocks.mem,clocks.max.sm,clocks.max.mem")
    info["devices"] = [
        {
            "index": i,
            "name": torch.cuda.get_device_properties(i).name,
            "uuid": str(getattr(torch.cuda.get_device_properties(i), "uuid", "")) or None,
        }
        for i in range(torch.cuda.device_count())
    ]
    if measure_bandwidth:
        from .timing import copy_bandwidth

        info["copy_bandwidth_gbps"] = copy_bandwidth() / 1e9
    return info


def cuda_unavailable() -> str | None:
    """Why this machine cannot time kernels on a GPU, or ``None`` when it can."""
    if not torch.cuda.is_available():
        return "no usable CUDA GPU (torch.cuda.is_available() is False)"
    return None


def machine_name() -> str:
    """The asv machine name for the GPU found here, e.g. ``"h200"`` for an ``NVIDIA H200``:
    results of different GPUs never share a machine directory by accident."""
    reason = cuda_unavailable()
    if reason:
        raise RuntimeError(reason)
    name = torch.cuda.get_device_name(torch.cuda.current_device()).lower()
    for prefix in ("nvidia ", "amd "):
        name = name.removeprefix(prefix)
    slug = re.sub(r"[^a-z0-9]+", "-", name).strip("-")
    return slug or "gpu"


def write_gpu_info(
    results_dir: Path, machine: str, commit: str, info: dict | None = None, *, measure_bandwidth: bool = True
) -> Path:
    path = Path(results_dir) / machine / f"{commit[:8]}.gpuinfo"
    path.parent.mkdir(parents=True, exist_ok=True)
    info = info if info is not None else gpu_info(measure_bandwidth=measure_bandwidth)
    path.write_text(json.dumps(info, indent=2, sort_keys=True) + "\n")
    return path
