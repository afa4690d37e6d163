"""Test set-up: Triton's interpreter on machines without CUDA, and the device fixture.

TRITON_INTERPRET must be set before any ``@triton.jit`` function is defined, i.e. before
``specsample.kernels`` is imported; conftest is imported first.
"""

import os
import warnings

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# The interpreter evaluates both sides of tl.where; NaN/inf from the discarded side is expected.
warnings.filterwarnings("ignore", category=RuntimeWarning, module="triton")

HAS_CUDA = torch.cuda.is_available()
gpu = pytest.mark.skipif(not HAS_CUDA, reason="needs a CUDA GPU (runs on the H200 box)")


@pytest.fixture(scope="session")
def device() -> str:
    """Where kernel tests run: CUDA when present, else CPU tensors under the interpreter."""
    return "cuda" if HAS_CUDA else "cpu"


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
    GPU box runs exactly those (README gives its time)."""
    for item in items:
        needs_cuda = any(m.name == "skipif" and "CUDA" in str(m.kwargs.get("reason", "")) for m in item.iter_markers())
        if "device" in getattr(item, "fixturenames", ()) or needs_cuda:
            item.add_marker(pytest.mark.gpu)
