"""The MRV2 sampler's module closure: which of vLLM's files it needs, found by reading its code.

The walk starts at :data:`ENTRY`, the launcher ``rejection_sample`` in :data:`ROOT`
(``vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py``), and follows what can run when a
module is imported and the launcher is called, at any depth:

- a module's **import-time code**: its top-level statements, and in each ``def`` and ``class``
  the decorators, default values and base classes (not annotations: a stand-in serves there);
- the **body of every definition that is reached**: the launcher, then any function, Triton
  kernel or class (all its methods) that reached code names, in its module or through an
  import, including the imports done inside a reached body.

``from vllm.a import b`` then needs ``vllm/a/b.py`` (or ``vllm/a/b/__init__.py``) when ``b`` is a
module, else ``b`` of the module ``vllm.a`` itself (``vllm/a.py`` or ``vllm/a/__init__.py``).
Imports under ``if TYPE_CHECKING:`` are not followed: they never run.

What a loaded module imports at the top but nothing reached uses (vLLM 0.34.0's
``draft_logits.py`` takes ``get_tp_group`` from ``vllm.distributed.parallel_state`` for a sharded
cache the launcher never builds: following it would pull in 1,688 files, 33 MB, most of vLLM)
is a **stand-in**: the module exists in the source, is not extracted, and the loader serves an
object in its place that raises, naming itself, if anything ever uses it. A module that is
imported but absent from the source is **missing**, and loading fails as vLLM's own import
would.

- packages on the way (``vllm``, ``vllm.v1``, ...) are *not* part of the closure: the loader
  gives them empty stand-ins, so their ``__init__`` (which imports most of vLLM) never runs;
- ``vllm.triton_utils`` is provided by specsample itself (:mod:`.shim`); the names the closure
  takes from it are recorded, so a release that needs more than the shim offers says so.

The reader is a callable ``path -> text or None`` over one source (a wheel, a git commit, an
installed package), so the same walk serves all three.
"""

from __future__ import annotations

import ast
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

ROOT = "vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py"
ROOT_MODULE = "vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils"
ENTRY = "rejection_sample"
SHIM_MODULE = "vllm.triton_utils"
# The closure rule's version, kept in each cache entry's manifest. An entry of rule 1 (which
# followed every import) is walked again from its own files when it is loaded; an entry of any
# other rule is fetched again (store.load_entry).
RULE = 2

Reader = Callable[[str], "str | None"]
_ALL = "*"  # every top-level definition of a module (a module imported as a whole)


@dataclass
class Closure:
    files: dict[str, str] = field(default_factory=dict)  # path -> source text: loaded for real
    stand_ins: dict[str, set[str]] = field(default_factory=dict)  # module -> names imported, unused
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


@dataclass(frozen=True)
class _Import:
    """``from module import name`` (``name`` None: ``import module``) bound to a local name."""

    module: str
    name: str | None


@dataclass
class _Module:
    """One parsed module: what its import-time code uses, and what each definition's body uses."""

    imports: dict[str, list[_Import]] = field(default_factory=dict)  # local name -> its imports
    executed: set[str] = field(default_factory=set)  # names used by import-time code
    definitions: dict[str, set[str]] = field(default_factory=dict)  # def/class -> names its body uses
    body_imports: dict[str, list[_Import]] = field(default_factory=dict)  # def/class -> imports inside


def _target(node: ast.ImportFrom, module: str, is_package: bool) -> str:
    if not node.level:
        return node.module or ""
    package = module.split(".") if is_package else module.split(".")[:-1]
    package = package[: len(package) - (node.level - 1)]
    return ".".join(package + ([node.module] if node.module else []))


def _import_bindings(node: ast.AST, module: str, is_package: bool) -> Iterator[tuple[str, _Import]]:
    if isinstance(node, ast.Import):
        for alias in node.names:
            # `import a.b.c` binds `a` but is used as a.b.c: the module a.b.c as a whole
            yield (alias.asname or alias.name.split(".")[0]), _Import(alias.name, None)
    elif isinstance(node, ast.ImportFrom):
        target = _target(node, module, is_package)
        for alias in node.names:
            yield (alias.asname or alias.name), _Import(target, alias.name)


def _uses(nodes: list[ast.AST]) -> set[str]:
    """Names read anywhere in ``nodes``, annotations left out."""
    found: set[str] = set()
    todo = list(nodes)
    while todo:
        node = todo.pop()
        if node is None:
            continue
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
            found.add(node.id)
        for name, child in ast.iter_fields(node):
            if name in ("annotation", "returns"):
                continue
            if isinstance(child, list):
                todo.extend(c for c in child if isinstance(c, ast.AST))
            elif isinstance(child, ast.AST):
                todo.append(child)
    return found


def _signature_parts(node: ast.FunctionDef | ast.AsyncFunctionDef) -> list[ast.AST]:
    """What runs when a ``def`` statement runs: decorators and default values."""
    args = node.args
    return [*node.decorator_list, *args.defaults, *(d for d in args.kw_defaults if d is not None)]


def _inner_imports(body: list[ast.stmt], module: str, is_package: bool) -> list[_Import]:
    """The imports anywhere in a definition's body (they run when it runs), TYPE_CHECKING aside."""
    found: list[_Import] = []
    todo: list[ast.AST] = list(body)
    while todo:
        node = todo.pop()
        if _is_type_checking(node):
            todo.extend(node.orelse)
            continue
        found.extend(imp for _, imp in _import_bindings(node, module, is_package))
        todo.extend(ast.iter_child_nodes(node))
    return found


def _parse(text: str, path: str) -> _Module:
    """The import-time uses and the definitions' uses of one module (see the module docstring)."""
    module, is_package = module_name(path), path.endswith("__init__.py")
    out = _Module()

    def statements(body: list[ast.stmt]) -> None:
        for node in body:
            if _is_type_checking(node):
                statements(node.orelse)
            elif isinstance(node, (ast.Import, ast.ImportFrom)):
                for local, imp in _import_bindings(node, module, is_package):
                    out.imports.setdefault(local, []).append(imp)
            elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out.executed |= _uses(_signature_parts(node))
                out.definitions[node.name] = _uses(node.body)
                out.body_imports[node.name] = _inner_imports(node.body, module, is_package)
            elif isinstance(node, ast.ClassDef):
                out.executed |= _uses([*node.decorator_list, *node.bases, *node.keywords])
                methods: set[str] = set()
                inner: list[_Import] = []
                for item in node.body:
                    if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        out.executed |= _uses(_signature_parts(item))
                        methods |= _uses(item.body)
                        inner += _inner_imports(item.body, module, is_package)
                    else:  # the class body itself runs when the module is imported
                        out.executed |= _uses([item])
                out.definitions[node.name] = methods
                out.body_imports[node.name] = inner
            elif isinstance(node, (ast.If, ast.Try, ast.With, ast.For, ast.While)):
                # a compound statement at the top level runs: its tests, and its bodies as statements
                heads = [getattr(node, a) for a in ("test", "iter", "target") if getattr(node, a, None) is not None]
                heads += [item.context_expr for item in getattr(node, "items", [])]
                heads += [h.type for h in getattr(node, "handlers", []) if h.type is not None]
                out.executed |= _uses(heads)
                for part in ("body", "orelse", "finalbody"):
                    statements(getattr(node, part, []))
                for handler in getattr(node, "handlers", []):
                    statements(handler.body)
            else:
                out.executed |= _uses([node])

    statements(ast.parse(text, filename=path).body)
    return out


def closure(read: Reader, root: str = ROOT, entry: str = ENTRY) -> Closure:
    """Every file ``entry`` of ``root`` needs from ``read`` (see the module docstring)."""
    out = Closure()
    parsed: dict[str, _Module] = {}
    reached: dict[str, set[str]] = {}  # path -> definitions (and local names) reached so far
    imported: dict[str, set[str]] = {}  # module -> names imported from it by a loaded module's top level
    todo: list[tuple[str, str]] = [(root, entry)]

    def need(imp: _Import) -> None:
        """An import whose binding reached code uses: its module (or the submodule) is loaded."""
        if imp.module == SHIM_MODULE or imp.module.startswith(SHIM_MODULE + "."):
            out.shim_names.add(imp.name or _ALL)
            return
        if imp.module != "vllm" and not imp.module.startswith("vllm."):
            return
        if imp.name is not None and imp.name != _ALL:
            sub = module_path(read, f"{imp.module}.{imp.name}")
            if sub is not None:
                todo.append((sub, _ALL))
                return
        own = module_path(read, imp.module)
        if own is None:
            out.missing.add(imp.module)
        else:
            todo.append((own, imp.name or _ALL))

    while todo:
        path, name = todo.pop()
        if path not in parsed:
            text = read(path)
            if text is None:  # pragma: no cover - module_path found it
                out.missing.add(module_name(path))
                continue
            out.files[path] = text
            parsed[path] = mod = _parse(text, path)
            reached[path] = set()
            for local, imps in mod.imports.items():
                for imp in imps:
                    imported.setdefault(imp.module, set()).add(imp.name or _ALL)
            for local in mod.executed:
                todo.append((path, local))
        mod, seen = parsed[path], reached[path]
        names = set(mod.definitions) | set(mod.imports) if name == _ALL else {name}
        for local in names - seen:
            seen.add(local)
            for imp in mod.imports.get(local, ()):
                need(imp)
            if local in mod.definitions:
                todo.extend((path, used) for used in mod.definitions[local])
                for imp in mod.body_imports[local]:
                    need(imp)

    loaded = {module_name(p) for p in out.files}
    for module, names in imported.items():
        if module == SHIM_MODULE or module.startswith(SHIM_MODULE + "."):
            out.shim_names |= names  # the import runs, so the shim must have every name
            continue
        if module in loaded or module in out.missing or not module.startswith("vllm."):
            continue
        unused = set()
        for name in names:
            sub = f"{module}.{name}"
            if name != _ALL and module_path(read, sub) is not None:
                if sub not in loaded:  # `from a import b`, b a module nothing reached uses
                    out.stand_ins.setdefault(sub, set())
            else:
                unused.add(name)
        if not unused:
            continue
        if module_path(read, module) is None:
            # imported at the top of a loaded module and absent: the import fails in vLLM too
            out.missing.add(module)
        else:
            out.stand_ins.setdefault(module, set()).update(unused - {_ALL})
    return out
