"""Our own past commits as subjects: ``NAME@COMMIT`` is subject ``NAME`` as that commit wrote it.

The commit's ``specsample/`` tree is extracted once (``git archive``) into the cache
(``$SPECSAMPLE_CACHE/checkouts/<sha>``) and imported into this process next to the running
package: the ``specsample*`` entries of ``sys.modules`` are swapped out while it imports and
restored afterwards, so the running ``specsample`` is untouched, and the loaded modules are kept
(their functions keep their own globals, so the commit's subjects launch the commit's kernels).
Every call into the commit's code runs with its modules active, for imports done at call time.

A commit is read through its own registry: ``specsample.subjects.get(name)`` from this layout
on, ``specsample.variants.get(name)`` before it (both offer ``prepare(w, inputs=...)``). The
workload is rebuilt with the commit's own ``Workload`` class from the same field values, so both
sides of a sign-off get the same input tensors.

The repository is ``$SPECSAMPLE_REPO``, else the git checkout around the working directory.
"""

from __future__ import annotations

import dataclasses
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import io
import subprocess
import sys
import tarfile
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

from filelock import FileLock

from ..schema import SubjectName
from .base import Capabilities, PreparedCall, Subject, SubjectError
from .cache import cache_root
from .namespace import ActiveCall, swapped

PACKAGE = "specsample"


def repository() -> Path:
    """The repository whose commits ``NAME@COMMIT`` names ($SPECSAMPLE_REPO or the cwd's)."""
    import os

    explicit = os.environ.get("SPECSAMPLE_REPO")
    if explicit:
        return Path(explicit)
    try:
        top = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError):
        raise SubjectError(
            "NAME@COMMIT needs a git checkout of specsample: set $SPECSAMPLE_REPO or run inside one"
        ) from None
    return Path(top.stdout.strip())


def resolve_commit(repo: Path, rev: str) -> str:
    """The full hash of ``rev`` in ``repo``; ``SubjectError`` naming it when it is not a commit."""
    proc = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SubjectError(f"{rev!r} is not a commit of {repo}")
    return proc.stdout.strip()


def extract(repo: Path, sha: str) -> Path:
    """``<cache>/checkouts/<sha>`` holding the commit's ``specsample/`` tree (made once)."""
    dest = cache_root() / "checkouts" / sha
    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(dest) + ".lock"):
        if (dest / PACKAGE / "__init__.py").is_file():
            return dest
        proc = subprocess.run(["git", "-C", str(repo), "archive", "--format=tar", sha, PACKAGE], capture_output=True)
        if proc.returncode != 0:
            raise SubjectError(
                f"commit {sha[:8]} of {repo} has no {PACKAGE}/ package: {proc.stderr.decode(errors='replace').strip()}"
            )
        tmp = dest.with_name(dest.name + ".tmp")
        with tarfile.open(fileobj=io.BytesIO(proc.stdout)) as tar:
            tar.extractall(tmp, filter="data")
        tmp.rename(dest)
    return dest


# ---------------------------------------------------------------------------------------------
# Loading a checkout next to the running package
# ---------------------------------------------------------------------------------------------


class _CheckoutFinder(importlib.abc.MetaPathFinder):
    """Finds ``specsample`` and its submodules in one checkout, ahead of every other finder.

    First on ``sys.meta_path`` while a checkout is active: an editable install's finder would
    otherwise map ``specsample.*`` to the running package. A submodule the checkout lacks is an
    ImportError here, never a silent fall-through to the running package's module.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def find_spec(self, fullname, path=None, target=None):
        if fullname == PACKAGE:
            init = self.root / PACKAGE / "__init__.py"
            return importlib.util.spec_from_file_location(PACKAGE, init, submodule_search_locations=[str(init.parent)])
        if not fullname.startswith(PACKAGE + "."):
            return None
        parent = sys.modules.get(fullname.rpartition(".")[0])
        spec = importlib.machinery.PathFinder.find_spec(fullname, list(getattr(parent, "__path__", [])))
        if spec is None:
            raise ModuleNotFoundError(f"No module named {fullname!r} in {self.root}", name=fullname)
        return spec


@dataclass
class Checkout:
    """One checkout's ``specsample``, loaded into this process (:func:`load_checkout`)."""

    root: Path
    commit: str | None = None
    modules: dict[str, ModuleType] = field(default_factory=dict)

    def module(self, name: str) -> ModuleType:
        """A loaded submodule by its name under the package, e.g. ``"workloads"``."""
        return self.modules[f"{PACKAGE}.{name}"]

    @property
    def registry(self) -> ModuleType:
        """The checkout's subjects registry (``subjects``), or ``variants`` before it existed."""
        return self.modules.get(f"{PACKAGE}.subjects") or self.modules[f"{PACKAGE}.variants"]

    def active(self):
        """``sys.modules`` holds this checkout's ``specsample`` inside, the running one after.

        For imports done at call time (``from ..sampler import x`` in a function): inside, they
        resolve to this checkout; modules first imported inside are kept with the checkout.
        """
        return swapped(PACKAGE, self.modules, _CheckoutFinder(self.root))


def load_checkout(root: str | Path, commit: str | None = None) -> Checkout:
    """Import ``root/specsample`` into this process without disturbing the running package.

    Raises :class:`SubjectError` if the checkout has no ``specsample`` package, it fails to
    import, or it has neither ``specsample.subjects`` nor ``specsample.variants`` with
    ``get(name)`` and ``prepare(w, inputs=...)`` (a commit from before the variants registry
    cannot be measured this way).
    """
    root = Path(root).resolve()
    where = f"checkout {root}" + (f" ({commit[:8]})" if commit else "")
    if not (root / PACKAGE / "__init__.py").is_file():
        raise SubjectError(f"{where}: no {PACKAGE}/ package")
    checkout = Checkout(root, commit)
    with checkout.active():
        try:
            importlib.import_module(PACKAGE)
            importlib.import_module(f"{PACKAGE}.workloads")
            try:
                importlib.import_module(f"{PACKAGE}.subjects")
            except ModuleNotFoundError as exc:
                if exc.name != f"{PACKAGE}.subjects":
                    raise
                importlib.import_module(f"{PACKAGE}.variants")
        except ModuleNotFoundError as exc:
            raise SubjectError(
                f"{where}: {exc}; measuring a commit needs its specsample.subjects (or "
                f"specsample.variants) registry and specsample.workloads"
            ) from exc
        except Exception as exc:
            raise SubjectError(f"{where}: importing specsample failed: {type(exc).__name__}: {exc}") from exc
    registry = checkout.registry
    get = getattr(registry, "get", None)
    prepare = getattr(getattr(registry, "Subject", None) or getattr(registry, "Variant", None), "prepare", None)
    if not callable(get) or prepare is None or "inputs" not in inspect.signature(prepare).parameters:
        raise SubjectError(
            f"{where}: its registry lacks get(name) / prepare(w, inputs=...), which is how "
            f"both sides of a comparison get the same inputs"
        )
    return checkout


def side_workload(w, cls: type):
    """``w`` rebuilt with a checkout's own ``Workload`` class, from the same field values.

    A field the checkout does not know is refused (``TypeError``) unless it holds the running
    package's default, i.e. the checkout would build the same workload without it.
    """
    if isinstance(w, cls):
        return w
    known = {f.name for f in dataclasses.fields(cls)}
    values, unknown = {}, []
    for f in dataclasses.fields(w):
        value = getattr(w, f.name)
        if f.name in known:
            values[f.name] = value
        elif f.default is dataclasses.MISSING or value != f.default:
            unknown.append(f.name)
    if unknown:
        raise TypeError(f"its Workload has no field(s) {unknown}")
    return cls(**values)


# ---------------------------------------------------------------------------------------------
# The subject
# ---------------------------------------------------------------------------------------------


def _checkout_subject(checkout: Checkout, base: str, label: str) -> Subject:
    with checkout.active():
        try:
            inner = checkout.registry.get(base)
        except (KeyError, ValueError) as exc:
            raise SubjectError(f"{label}: the commit has no subject {base!r} ({exc})") from None
    workload_cls = checkout.module("workloads").Workload

    def unsupported(w):
        try:
            w_side = side_workload(w, workload_cls)
        except (TypeError, ValueError) as exc:
            return f"{label} cannot build the workload: {exc}"
        with checkout.active():
            return inner.unsupported(w_side)

    def prepare(w, device="cuda", inputs=None) -> PreparedCall:
        w_side = side_workload(w, workload_cls)
        with checkout.active():
            prepared = inner.prepare(w_side, device=device, inputs=inputs)
        return PreparedCall(
            ActiveCall(prepared.call, checkout.active), prepared.finish, getattr(prepared, "graph_capturable", True)
        )

    subject = _CommitSubject(
        label,
        f"{base} at commit {checkout.commit[:8]}",
        Capabilities(),
        prepare_inputs=lambda inputs: None,
        needs_cuda=getattr(inner, "needs_cuda", True),
        provenance={"kind": "ours@commit", "subject": base, "commit": checkout.commit},
    )
    subject._unsupported, subject._prepare = unsupported, prepare
    return subject


class _CommitSubject(Subject):
    """A :class:`Subject` whose support and preparation are the commit's own."""

    _unsupported = None
    _prepare = None

    def unsupported(self, w):
        return self._unsupported(w)

    def prepare(self, w, device="cuda", inputs=None) -> PreparedCall:
        from ..workloads import make_inputs

        return self._prepare(w, device, inputs if inputs is not None else make_inputs(w, device=device))


_CHECKOUTS: dict[str, Checkout] = {}


def checkout(sha: str) -> Checkout:
    """The loaded checkout of commit ``sha`` (extracted and imported once per process)."""
    if sha not in _CHECKOUTS:
        _CHECKOUTS[sha] = load_checkout(extract(repository(), sha), sha)
    return _CHECKOUTS[sha]


def subject(name: SubjectName) -> Subject:
    """``NAME@COMMIT`` (:func:`specsample.schema.parse_subject`)."""
    sha = resolve_commit(repository(), name.version)
    return _checkout_subject(checkout(sha), name.base, name.text)
