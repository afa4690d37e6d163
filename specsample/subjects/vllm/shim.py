"""specsample's own ``vllm.triton_utils``: what vLLM's Triton files import from it, and nothing else.

vLLM's module (``vllm/triton_utils/__init__.py``) imports ``vllm.envs`` and resolves the
platform, which would pull in most of vLLM. The sampler's closure only needs Triton itself:
``triton``, ``tl``, libdevice as ``tldevice``, ``HAS_TRITON`` and the two log constants. A closure
that asks for any other name gets an error naming it (see :func:`check_names`).
"""

from __future__ import annotations

import math
import os
import types

import triton
import triton.language as tl
from triton.language.extra import libdevice

from ..base import SubjectError

NAME = "vllm.triton_utils"


class _InterpretedLibdevice:
    """libdevice under Triton's interpreter, which cannot call extern functions: the functions
    vLLM's closures use (``log1p``), evaluated elementwise with numpy on the interpreter's
    tensors. Any other name is libdevice's own (and fails in the interpreter as it would)."""

    @staticmethod
    def log1p(x):
        import numpy as np
        from triton.runtime.interpreter import TensorHandle

        return tl.core.tensor(TensorHandle(np.log1p(x.handle.data), x.handle.dtype), x.type)

    def __getattr__(self, name):
        return getattr(libdevice, name)


def _libdevice():
    return _InterpretedLibdevice() if os.environ.get("TRITON_INTERPRET") == "1" else libdevice


PROVIDED = {
    "triton": triton,
    "tl": tl,
    "tldevice": _libdevice(),
    "libdevice": _libdevice(),
    "HAS_TRITON": True,
    "LOG2E": 1.0 / math.log(2.0),
    "LOGE2": math.log(2.0),
}


def module() -> types.ModuleType:
    """A fresh ``vllm.triton_utils`` module object holding :data:`PROVIDED`."""
    shim = types.ModuleType(NAME, __doc__)
    shim.__dict__.update(PROVIDED)
    shim.__file__ = __file__
    shim.__path__ = []  # a package: ``vllm.triton_utils.x`` fails with a clear ModuleNotFoundError
    shim.__specsample_shim__ = True
    return shim


def check_names(names: set[str], label: str) -> None:
    """``SubjectError`` naming what a closure takes from ``vllm.triton_utils`` that the shim
    does not provide."""
    unknown = sorted(n for n in names if n != "*" and n not in PROVIDED)
    if unknown:
        raise SubjectError(
            f"{label}: its Triton files import {', '.join(unknown)} from vllm.triton_utils, "
            f"which specsample does not provide (it provides {', '.join(sorted(PROVIDED))})"
        )
