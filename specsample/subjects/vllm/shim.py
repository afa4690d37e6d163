"""specsample's own ``vllm.triton_utils``: what vLLM's Triton files import from it, and nothing else.

vLLM's module (``vllm/triton_utils/__init__.py``) imports ``vllm.envs`` and resolves the
platform, which would pull in most of vLLM. The sampler's closure only needs Triton itself:
``triton``, ``tl``, libdevice as ``tldevice``, ``HAS_TRITON`` and the two log constants. A closure
that asks for any other name gets an error naming it (see :func:`check_names`).
"""

from __future__ import annotations

import math
import types

import triton
import triton.language as tl
from triton.language.extra import libdevice

from ..base import SubjectError

NAME = "vllm.triton_utils"

PROVIDED = {
    "triton": triton,
    "tl": tl,
    "tldevice": libdevice,
    "libdevice": libdevice,
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
        raise SubjectError(f"{label}: its Triton files import {', '.join(unknown)} from vllm.triton_utils, "
                           f"which specsample does not provide (it provides {', '.join(sorted(PROVIDED))})")  # fmt: skip

