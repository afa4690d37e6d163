"""Import one vLLM closure in a namespace of its own, so several vLLMs live in one process.

vLLM's files import each other by absolute name (``from vllm.v1.worker.gpu.sample.gumbel import
...``). A :class:`Namespace` serves exactly the closure's files for ``vllm.*`` while it is
:meth:`~Namespace.active`: the ``vllm*`` entries of ``sys.modules`` (another subject's, or an
installed vLLM's) are swapped out, a finder first on ``sys.meta_path`` maps

- a closure module to its file (real files on disk, so Triton can read each kernel's source),
- ``vllm.triton_utils`` to specsample's shim (:mod:`.shim`),
- a package on the way (``vllm``, ``vllm.v1``, ...) to an empty stand-in,
- a module the closure leaves out (:mod:`.closure`: imported at the top of a loaded module, but
  nothing that can run uses it) to a stand-in whose names can be imported and named (in an
  annotation, say) but raise :class:`LeftOut`, naming themselves, if anything uses them,
- any other ``vllm.*`` module to a ``ModuleNotFoundError`` naming the module and the subject,

and afterwards the namespace keeps its modules (their functions keep their own globals, so later
calls need no activation, but they get one anyway, for imports done at call time) and
``sys.modules`` gets back what it had.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.util
from pathlib import Path
from types import ModuleType

from ..base import SubjectError
from ..namespace import swapped
from . import shim
from .closure import module_name

PACKAGE = "vllm"


class _StubLoader(importlib.abc.Loader):
    """An empty package: what stands in for ``vllm/__init__.py`` and the packages below it."""

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__path__ = []


class LeftOut(SubjectError, AttributeError):
    """A name of a module the closure left out was used: the walk missed a use (a bug to report
    with the subject's name), or vLLM reached it in a way no import shows."""


class _LeftOutName(type):
    """The type of what stands in for a left-out name: a class, so that it can be imported,
    annotated with (``Name | None``, ``Name[int]``) and tested with ``isinstance``; calling it
    or reading an attribute raises :class:`LeftOut`."""

    def __call__(cls, *args, **kwargs):
        raise LeftOut(cls._left_out_message)

    def __getattr__(cls, attr):
        if attr.startswith("__"):
            raise AttributeError(attr)
        raise LeftOut(f"{cls._left_out_message} (.{attr} was read)")

    def __getitem__(cls, item):
        return cls


class _StandInLoader(importlib.abc.Loader):
    """A left-out module: its imported names as :class:`_LeftOutName` stand-ins."""

    def __init__(self, names: list[str], label: str) -> None:
        self.names, self.label = names, label

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        module.__path__ = []  # a loaded module may sit below it
        for name in self.names:
            message = (
                f"{self.label}: {module.__name__}.{name} was left out of the extracted closure, "
                f"since nothing rejection_sample reaches uses it, but something used it"
            )
            stand_in = _LeftOutName(name, (), {"__module__": module.__name__, "_left_out_message": message})
            setattr(module, name, stand_in)


class _ShimLoader(importlib.abc.Loader):
    def create_module(self, spec):
        return shim.module()

    def exec_module(self, module):
        pass


class _ClosureFinder(importlib.abc.MetaPathFinder):
    def __init__(self, namespace: "Namespace") -> None:
        self.namespace = namespace

    def find_spec(self, fullname, path=None, target=None):
        if fullname != PACKAGE and not fullname.startswith(PACKAGE + "."):
            return None
        ns = self.namespace
        if fullname == shim.NAME:
            return importlib.machinery.ModuleSpec(fullname, _ShimLoader(), is_package=True)
        if fullname in ns.modules_to_files:
            file = ns.root / ns.modules_to_files[fullname]
            is_package = file.name == "__init__.py"
            return importlib.util.spec_from_file_location(
                fullname, file, submodule_search_locations=[] if is_package else None
            )
        if fullname in ns.stand_ins:
            loader = _StandInLoader(ns.stand_ins[fullname], ns.label)
            return importlib.machinery.ModuleSpec(fullname, loader, is_package=True)
        if fullname in ns.packages:
            return importlib.machinery.ModuleSpec(fullname, _StubLoader(), is_package=True)
        if fullname.startswith(shim.NAME + "."):
            hint = f"specsample's vllm.triton_utils shim has no submodules ({fullname} was imported)"
        else:
            hint = f"{fullname} is not in its extracted closure ({len(ns.modules_to_files)} modules)"
        raise ModuleNotFoundError(f"{ns.label}: {hint}", name=fullname)


class Namespace:
    """One subject's vLLM modules: the closure files under ``root`` (paths relative to it), and
    the modules it leaves out with the names imported from them (``stand_ins``)."""

    def __init__(self, root: Path, files: list[str], label: str, stand_ins: dict[str, list[str]] | None = None) -> None:
        self.root = Path(root)
        self.label = label
        self.modules_to_files = {module_name(f): f for f in files}
        self.stand_ins = dict(stand_ins or {})
        # every package that some closure module sits in, without an __init__ of its own here
        served = set(self.modules_to_files) | set(self.stand_ins)
        self.packages = {".".join(m.split(".")[:i]) for m in served for i in range(1, m.count(".") + 1)} - served
        self.modules: dict[str, ModuleType] = {}

    def active(self):
        return swapped(PACKAGE, self.modules, _ClosureFinder(self))

    def import_module(self, name: str) -> ModuleType:
        """Import ``name`` from this namespace. A module the closure lacks, or one that raises
        on import, is a :class:`SubjectError` naming the module and the subject."""
        with self.active():
            try:
                return importlib.import_module(name)
            except ModuleNotFoundError as exc:
                if str(exc).startswith(self.label):
                    raise SubjectError(str(exc)) from None
                raise SubjectError(
                    f"{self.label}: importing {name} needs {exc.name!r}, which is not installed here ({exc})"
                ) from None
            except Exception as exc:
                where = _innermost_closure_frame(exc, self.root)
                raise SubjectError(
                    f"{self.label}: importing {name} failed{where}: {type(exc).__name__}: {exc}"
                ) from None


def _innermost_closure_frame(exc: BaseException, root: Path) -> str:
    """`` in vllm/x/y.py line N`` for the deepest traceback frame inside the closure."""
    tb, where = exc.__traceback__, ""
    root = str(root)
    while tb is not None:
        file = tb.tb_frame.f_code.co_filename
        if file.startswith(root):
            where = f" in {Path(file).relative_to(root)} line {tb.tb_lineno}"
        tb = tb.tb_next
    return where
