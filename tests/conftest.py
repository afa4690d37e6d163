"""Test set-up: Triton's interpreter on machines without CUDA, and the device fixture.

TRITON_INTERPRET must be set before any ``@triton.jit`` function is defined, i.e. before
``specsample.kernels`` is imported; conftest is imported first.
"""

import os
import subprocess
import sys
import warnings

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# The interpreter evaluates both sides of tl.where; NaN/inf from the discarded side is expected.
warnings.filterwarnings("ignore", category=RuntimeWarning, module="triton")

HAS_CUDA = torch.cuda.is_available()

# Under pytest-xdist every worker process would otherwise run torch's CPU ops on all cores: 8
# workers x 16 threads on the H200 box's 16 cores made the reference's small CPU runs (V = 16,
# thousands of one-request steps) 5-10x slower than on a 2-core CI machine (15-31 s a test). One share of the cores per worker.
_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
if _WORKERS > 1:
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // _WORKERS))
gpu = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU (runs on the H200 box)")


def compile_for_sm90(args: list[str]) -> list[str]:
    """The kernel names ``scripts/express_sass.py ARGS`` compiles for sm_90 (one call's launches,
    in order), with Triton's bundled ptxas and no GPU; the test is skipped where ptxas cannot
    run, and fails on any other error (a compilation error above all)."""
    script = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "scripts", "express_sass.py")
    proc = subprocess.run(
        [sys.executable, script, *args], env=compiler_env(), capture_output=True, text=True, timeout=300, check=False
    )
    if proc.returncode != 0 and "ptxas" in proc.stderr and "CompilationError" not in proc.stderr:
        pytest.skip(f"cannot compile for sm_90 here: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stderr[-3000:]
    compiled = [line.split()[0] for line in proc.stdout.splitlines() if line.startswith("_")]
    assert compiled and all(name.endswith("_kernel") for name in compiled), proc.stdout
    return compiled


def compiler_env() -> dict:
    """The environment of a subprocess that compiles kernels for a GPU target on any machine
    (Triton's bundled ptxas, no GPU needed): this repository importable, no TRITON_INTERPRET."""
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (repo, env.get("PYTHONPATH", "")) if p)
    return env


# A long CPU-only test that runs where the GPU box's cores are, not in CPU CI; it runs no kernel,
# so it is not marked ``gpu`` (the reason does not name CUDA) and `pytest -m gpu` leaves it out.
on_gpu_box = pytest.mark.skipif(not HAS_CUDA, reason="long CPU-only test: runs on the GPU box, not in CPU CI")
# A test that takes the ``device`` fixture but runs on CPU tensors on every machine (the
# reference's statistical runs): not a GPU test, so `pytest -m gpu` leaves it out.
on_cpu = pytest.mark.on_cpu

# Cached CUDA memory a test process keeps once a test is done, above which it is handed back to
# the driver: under `pytest -n 8` one process holding tens of GiB of freed blocks made the next
# tests of the other processes run out of memory on the H200.
_KEEP_CACHED_BYTES = 2 << 30


@pytest.fixture(scope="session")
def device() -> str:
    """Where kernel tests run: CUDA when present, else CPU tensors under the interpreter."""
    return "cuda" if HAS_CUDA else "cpu"


@pytest.fixture(autouse=True)
def _release_cached_cuda_memory():
    yield
    if HAS_CUDA and torch.cuda.memory_reserved() > _KEEP_CACHED_BYTES:
        torch.cuda.empty_cache()


class LaunchTripwire:
    """Stands in for ``mrv2.launch`` in validation tests: a call means an input got through."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, *args, **kwargs):
        self.calls += 1
        return None, None


def pytest_collection_modifyitems(config, items):
    """Mark every test that runs kernels on the GPU when one is present as ``gpu``: the tests
    that take the ``device`` fixture and the CUDA-only ones (``@gpu``). ``pytest -m gpu`` on the
    GPU box runs exactly those (README gives its time). A test marked ``on_cpu`` is not one."""
    for item in items:
        if item.get_closest_marker("on_cpu") is not None:
            continue
        needs_cuda = any(m.name == "skipif" and "CUDA" in str(m.kwargs.get("reason", "")) for m in item.iter_markers())
        if "device" in getattr(item, "fixturenames", ()) or needs_cuda:
            item.add_marker(pytest.mark.gpu)
    if HAS_CUDA:
        # Longest first, so that under `pytest -n` the slow statistical tests do not start last
        # and set the run's length (the order pytest-xdist hands tests out in is this one).
        items.sort(key=lambda item: item.get_closest_marker("slow") is None)


@pytest.fixture
def cache(tmp_path, monkeypatch):
    """A fresh vLLM release cache (``$SPECSAMPLE_CACHE``) under the test's tmp_path, with the
    subject registry's memo cleared before and after. (Shadows pytest's own ``cache`` fixture,
    which no test here uses.)"""
    from specsample import subjects

    monkeypatch.setenv("SPECSAMPLE_CACHE", str(tmp_path / "cache"))
    subjects._resolve.cache_clear()
    yield tmp_path / "cache"
    subjects._resolve.cache_clear()
