"""The MRV2 sampler's module closure: which of vLLM's files it needs, found by reading imports.

Starting from :data:`ROOT` (``vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py``), every
``import`` and ``from ... import`` of a ``vllm.*`` module is followed, at any depth (imports under
``if TYPE_CHECKING:`` are not: they never run):

- ``from vllm.a import b`` needs ``vllm/a/b.py`` (or ``vllm/a/b/__init__.py``) when ``b`` is a
  module, else the module ``vllm.a`` itself (``vllm/a.py`` or ``vllm/a/__init__.py``);
- packages on the way (``vllm``, ``vllm.v1``, ...) are *not* part of the closure: the loader
  gives them empty stand-ins, so their ``__init__`` (which imports most of vLLM) never runs;
- ``vllm.triton_utils`` is provided by specsample itself (:mod:`.shim`); the names the closure
  takes from it are recorded, so a release that needs more than the shim offers says so.

The reader is a callable ``path -> text or None`` over one source (a wheel, a git commit, an
installed package), so the same walk serves all three.
"""

from __future__ import annotations

import ast
from collections.abc import Callable
from dataclasses import dataclass, field

ROOT = "vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py"
ROOT_MODULE = "vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils"
SHIM_MODULE = "vllm.triton_utils"

Reader = Callable[[str], "str | None"]


@dataclass
class Closure:
    files: dict[str, str] = field(default_factory=dict)  # path -> source text
    shim_names: set[str] = field(default_factory=set)  # names imported from vllm.triton_utils
    missing: set[str] = field(default_factory=set)  # vllm modules imported but not in the source


def module_path(read: Reader, module: str) -> str | None:
    """The file of ``module`` in the source, or ``None``."""
    base = module.replace(".", "/")
    for candidate in (base + ".py", base + "/__init__.py"):
        if read(candidate) is not None:
            return candidate
    return None


def module_name(path: str) -> str:
    name = path[: -len(".py")].replace("/", ".")
    return name[: -len(".__init__")] if name.endswith(".__init__") else name


def _is_type_checking(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _imports(tree: ast.AST, module: str, is_package: bool) -> list[tuple[str, list[str]]]:
    """(module imported, names taken from it) for every import outside TYPE_CHECKING blocks."""
    found: list[tuple[str, list[str]]] = []

    def visit(node: ast.AST) -> None:
        if _is_type_checking(node):
            for child in getattr(node, "orelse", []):
                visit(child)
            return
        if isinstance(node, ast.Import):
            found.extend((alias.name, []) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                package = module.split(".") if is_package else module.split(".")[:-1]
                package = package[: len(package) - (node.level - 1)]
                target = ".".join(package + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            found.append((target, [alias.name for alias in node.names]))
        for child in ast.iter_child_nodes(node):
            visit(child)

    visit(tree)
    return found


def closure(read: Reader, root: str = ROOT) -> Closure:
    """Every file :data:`ROOT` needs from ``read`` (see the module docstring)."""
    out = Closure()
    todo = [root]
    while todo:
        path = todo.pop()
        if path in out.files:
            continue
        text = read(path)
        if text is None:
            out.missing.add(module_name(path))
            continue
        out.files[path] = text
        module = module_name(path)
        for target, names in _imports(ast.parse(text, filename=path), module, path.endswith("__init__.py")):
            if target != "vllm" and not target.startswith("vllm."):
                continue
            if target == SHIM_MODULE or target.startswith(SHIM_MODULE + "."):
                out.shim_names.update(names or ["*"])
                continue
            needed = []
            for name in names:
                sub = module_path(read, f"{target}.{name}")
                if sub is not None:
                    needed.append(sub)
            if len(needed) < len(names) or not names:
                # some names are attributes of the module itself (not submodules)
                own = module_path(read, target)
                if own is None:
                    out.missing.add(target)
                else:
                    needed.append(own)
            todo.extend(p for p in needed if p not in out.files)
    return out
