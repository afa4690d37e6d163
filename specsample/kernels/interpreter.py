"""Triton's CPU interpreter (``TRITON_INTERPRET=1``) with numpy 2.4 and later.

Triton 3.6's interpreter holds every scalar as a one-element array and turns it into a Python
int with ``int(array)`` (a kernel's ``range(0, num_drafts)``), which numpy 2.4 refuses: "only
0-dimensional arrays can be converted to Python scalars" (triton-lang/triton#9171, fixed after
3.6.0). The H200 box has numpy 2.4+, so every interpreted kernel of the suite's CPU paths (the
smoke tier, the CPU sign-off, the tests' subprocess workers) failed there. :func:`install` makes
the conversion take the array's one element, as the upstream fix does; it changes nothing on the
GPU, and nothing where the interpreter is off.
"""

from __future__ import annotations

import os


def install() -> bool:
    """Patch the interpreter's tensor ``__index__`` once, if ``TRITON_INTERPRET=1``; True if done."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return False
    from triton.runtime import interpreter

    if getattr(interpreter._patch_lang_tensor, "_specsample", False):
        return True
    original = interpreter._patch_lang_tensor

    def _patch_lang_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.reshape(-1)[0]))

    _patch_lang_tensor._specsample = True
    interpreter._patch_lang_tensor = _patch_lang_tensor
    return True
