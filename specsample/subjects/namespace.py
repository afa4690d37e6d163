"""A second copy of a package in this process: ``sys.modules`` swapped while its code runs.

Both our own past commits (:mod:`.commits`, package ``specsample``) and vLLM closures
(:mod:`.vllm.loader`, package ``vllm``) import by absolute name. :func:`swapped` makes one copy's
modules the ones ``sys.modules`` holds for the package, with a finder first on ``sys.meta_path``
for what is imported inside, and puts back what was there afterwards; :class:`ActiveCall` runs a
call of that copy's code inside it (for imports done at call time).
"""

from __future__ import annotations

import contextlib
import importlib.abc
import sys
from collections.abc import Callable, Iterator
from types import ModuleType


def package_modules(package: str) -> dict[str, ModuleType]:
    """``package`` and its submodules as ``sys.modules`` holds them now."""
    return {k: v for k, v in sys.modules.items() if k == package or k.startswith(package + ".")}


@contextlib.contextmanager
def swapped(package: str, modules: dict[str, ModuleType], finder: importlib.abc.MetaPathFinder) -> Iterator[None]:
    """Inside, ``sys.modules`` holds ``modules`` for ``package`` and ``finder`` finds what else is
    imported under it; modules first imported inside are added to ``modules``. Afterwards
    ``sys.modules`` holds what it held before."""
    saved = package_modules(package)
    for name in saved:
        del sys.modules[name]
    sys.modules.update(modules)
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        modules.update(package_modules(package))
        for name in package_modules(package):
            del sys.modules[name]
        sys.modules.update(saved)


class ActiveCall:
    """``fn`` called inside ``active()`` (a copy's :func:`swapped` context)."""

    def __init__(self, fn: Callable, active: Callable[[], contextlib.AbstractContextManager]) -> None:
        self.fn, self.active = fn, active

    def __call__(self, *args):
        with self.active():
            return self.fn(*args)
