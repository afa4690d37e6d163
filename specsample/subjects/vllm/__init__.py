"""vLLM's own MRV2 rejection sampler as a subject: a release, a commit of a checkout, an install.

- ``vllm==X.Y.Z``: a release, fetched once into the cache (:mod:`.store`, ``specsample vllm
  fetch``);
- ``vllm@REF``: a commit of the vLLM checkout named by ``$SPECSAMPLE_VLLM_REPO`` (the CLI's
  ``--vllm-repo`` sets it), read with ``git show``, no build;
- ``vllm``: the vLLM installed here.

Each is its module closure (:mod:`.closure`: what ``rejection_sample`` can reach, the rest of
vLLM left out), imported in a namespace of its own (:mod:`.loader`) with specsample's
``vllm.triton_utils`` (:mod:`.shim`), and called through an adapter built from its
``rejection_sample`` signature (:mod:`.adapter`). No vLLM source is in
this repository: it is read at run time from the package index, a checkout or an install.
"""

from __future__ import annotations

import functools
import os

from ...schema import SubjectName
from ..base import NotSupported, PreparedCall, Subject, SubjectError, identity
from . import shim, store
from .adapter import adapt
from .closure import ROOT_MODULE
from ..namespace import ActiveCall
from .loader import Namespace

__all__ = ["subject", "fetch", "entry"]

REPO_ENV = "SPECSAMPLE_VLLM_REPO"


def entry(name: SubjectName) -> store.Entry:
    """The verified files of a vLLM subject."""
    if name.kind == "vllm-release":
        return store.release(name.version)
    if name.kind == "vllm-ref":
        repo = os.environ.get(REPO_ENV)
        if not repo:
            # Not configured here (e.g. the nightly tier's vllm@main on a box without a checkout):
            # its points are skipped with this reason, not failed.
            raise NotSupported(f"{name.text}: no vLLM checkout given (--vllm-repo PATH or ${REPO_ENV})")
        return store.commit(repo, name.version)
    if name.kind == "vllm-installed":
        return store.installed()
    raise SubjectError(f"{name.text}: not a vLLM subject")


def subject(name: SubjectName) -> Subject:
    """Load a vLLM subject (see the module docstring); ``SubjectError`` with the reason if not."""
    found = entry(name)
    shim.check_names(set(found.manifest.get("shim_names", ())), name.text)
    namespace = Namespace(found.root, found.files, name.text, found.stand_ins)
    module = namespace.import_module(ROOT_MODULE)
    launcher = getattr(module, "rejection_sample", None)
    if not callable(launcher):
        raise SubjectError(f"{name.text}: {ROOT_MODULE} has no rejection_sample")
    adapter = adapt(launcher, name.text)

    def prepare(inputs: dict) -> PreparedCall:
        from ...validation import check_inputs
        from ...workloads import base_inputs

        check_inputs(**base_inputs(inputs))  # once here: the timed call is vLLM's launcher alone
        call = ActiveCall(functools.partial(launcher, **adapter.arguments(inputs)), namespace.active)
        return PreparedCall(call, identity)

    provenance = dict(found.provenance(), ignored_arguments=list(adapter.ignored))
    summary = {
        "vllm-release": f"vLLM {name.version}'s MRV2 rejection sampler (from its wheel)",
        "vllm-ref": f"vLLM's MRV2 rejection sampler at {name.version} of the checkout",
        "vllm-installed": "the installed vLLM's MRV2 rejection sampler",
    }[name.kind]
    return Subject(name.text, summary, adapter.capabilities, prepare, provenance=provenance)


def fetch(versions: list[str], *, from_wheel: str | None = None, log=print) -> list[store.Entry]:
    """Fetch releases into the cache (``specsample vllm fetch``); returns their entries."""
    if from_wheel is not None:
        if len(versions) > 1:
            raise SubjectError("--from-wheel takes one wheel: give at most one release with it")
        return [store.extract_wheel(from_wheel, versions[0] if versions else None)]
    return [store.fetch_release(v, log=log) for v in versions]
