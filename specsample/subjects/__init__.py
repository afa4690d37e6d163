"""The subjects registry: every name specsample can measure resolves here, and only here.

A subject name (:func:`specsample.schema.parse_subject`) is one of

- specsample's own samplers (:mod:`.ours`) and peers (:mod:`.flashinfer`), registered below;
- ``NAME@COMMIT``: one of ours at a commit of this repository (:mod:`.commits`);
- ``vllm==X.Y.Z``, ``vllm@REF`` or ``vllm``: vLLM's own MRV2 sampler, from a release, a commit
  of a checkout or the installed package (:mod:`.vllm`).

:func:`get` returns a :class:`~.base.Subject`; the asv suite, the measurement worker, sign-off
and the CLI all go through it, so they accept the same names. A name that cannot be resolved
raises :class:`~.base.SubjectError` (or ``ValueError`` for a malformed name) whose message says
what is known.
"""

from __future__ import annotations

import functools

from ..schema import OUR_SUBJECTS, parse_subject
from .base import Capabilities, NotSupported, PreparedCall, Subject, SubjectError
from .flashinfer import SUBJECTS as _PEERS
from .ours import SUBJECTS as _OURS

__all__ = ["Capabilities", "NotSupported", "PreparedCall", "Subject", "SubjectError", "get", "names"]

_BUILTIN = {s.name: s for s in (*_OURS, *_PEERS)}
# schema.OUR_SUBJECTS names them for torch-free modules (and gives the display order: names())
if sorted(_BUILTIN) != sorted(OUR_SUBJECTS) or len(_BUILTIN) != len(OUR_SUBJECTS):
    raise RuntimeError(f"subjects registry {tuple(_BUILTIN)} != schema.OUR_SUBJECTS {OUR_SUBJECTS}")


def names() -> tuple[str, ...]:
    """specsample's own subjects (vLLM and past-commit subjects are resolved by name)."""
    return OUR_SUBJECTS


def get(name: str) -> Subject:
    """The subject called ``name``; loads vLLM code or a past commit on first use (cached)."""
    parsed = parse_subject(name)
    if parsed.kind == "ours":
        return _BUILTIN[name]
    return _resolve(name)


@functools.cache
def _resolve(name: str) -> Subject:
    parsed = parse_subject(name)
    if parsed.kind == "ours@commit":
        from . import commits

        return commits.subject(parsed)
    if parsed.kind == "planted":
        from . import planted

        return planted.subject(parsed)
    from . import vllm

    return vllm.subject(parsed)
