"""The one interface every subject offers: what it supports, and a call ready to time.

A :class:`Subject` is one thing under test: one of specsample's samplers, one of them at a past
commit of this repository, a vLLM release, a commit of a vLLM checkout, an installed vLLM, or a
peer library. Downstream code (measurement, sign-off, the asv suite) sees only this interface
and never how a subject was loaded.

:meth:`Subject.prepare` builds (or takes) a workload's inputs and returns a
:class:`PreparedCall`: the zero-argument call to time, and how to read its output as
``(sampled [R, K+1] int64, num_sampled [R] int32)``. Everything that is not the sampler's own
work (input checks, format conversions) happens in ``prepare``, outside the timed region.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..schema import paths_of
from ..workloads import Workload, make_inputs


class NotSupported(NotImplementedError):
    """A subject cannot run a workload (asv treats ``NotImplementedError`` in setup as a skip)."""


class SubjectError(RuntimeError):
    """A subject that cannot be resolved or loaded: an unknown release, a release without the
    MRV2 sampler, a ref missing from the checkout, a corrupt cache entry, a module missing from
    its closure, a signature that cannot be adapted. The message names the subject."""


@dataclass(frozen=True)
class PreparedCall:
    """A call ready to time, and how to read its output."""

    call: Callable[[], object]
    finish: Callable[[object], tuple[torch.Tensor, torch.Tensor]]
    graph_capturable: bool = True


def identity(out: object) -> tuple[torch.Tensor, torch.Tensor]:
    return out  # type: ignore[return-value]


@dataclass(frozen=True)
class Capabilities:
    """What a subject supports; :meth:`Subject.unsupported` turns a miss into a reason."""

    modes: tuple[str, ...] = ("greedy", "standard", "block", "synthetic")
    drafts: tuple[str, ...] = ("logits", "one-hot")
    placeholders: bool = True
    ragged: bool = True
    mixed_temperature: bool = True
    # Draft logits at a temperature other than 1: False where the subject's convention (draft
    # logits before or after the temperature) is not known, so they would not mean the same.
    tempered_draft_logits: bool = True
    # The sampler paths of specsample.schema.PATHS the subject has (vLLM's FLy, watermarking,
    # masked-block skipping, a sharded draft-logits cache). A workload that turns on a path the
    # subject lacks is skipped with that reason, never run as another path. The data-only path
    # axes (logits shape, row entropy, masked vocabulary) need nothing of a subject.
    paths: tuple[str, ...] = ()


@dataclass
class Subject:
    """One thing under test (see the module docstring).

    ``provenance`` says exactly what code this is (kind, release or commit, file hashes); it is
    recorded beside every result the subject produces.
    """

    name: str
    summary: str
    capabilities: Capabilities
    prepare_inputs: Callable[[dict], PreparedCall]
    availability: Callable[[], str | None] = lambda: None
    needs_cuda: bool = True
    provenance: dict = field(default_factory=dict)
    # kernels -> zero-argument launches, for per-kernel timing (specsample.measure.stage_calls);
    # None where the subject is one opaque call (vLLM's launcher, peers).
    pipeline: Callable[..., object] | None = None

    def unavailable(self) -> str | None:
        """Why this subject cannot run in this environment at all, or ``None``."""
        return self.availability()

    def unsupported(self, w: Workload) -> str | None:
        """Why this subject cannot run ``w``, or ``None`` when it can."""
        reason = self.unavailable()
        if reason:
            return reason
        c = self.capabilities
        if w.mode not in c.modes:
            return f"{self.name} supports modes {c.modes}, not {w.mode!r}"
        if w.draft not in c.drafts:
            return f"{self.name} supports drafts {c.drafts}, not {w.draft!r}"
        has_placeholders = w.placeholder_pattern == "all" or w.placeholder_density > 0
        if has_placeholders and not c.placeholders:
            return f"{self.name} does not support -1 placeholder drafts"
        if w.ragged and not c.ragged:
            return f"{self.name} needs every request to have K drafts"
        if w.greedy_fraction not in (0.0, 1.0) and not c.mixed_temperature:
            return f"{self.name} does not support mixed temperatures in one batch"
        missing = [p for p in paths_of(w.__dict__) if p not in c.paths]
        if missing:
            has = ", ".join(c.paths) if c.paths else "none"
            return f"{self.name} has no {' or '.join(missing)} path (its paths: {has})"
        if w.draft == "logits" and w.temperature != 1.0 and w.mode != "greedy" and not c.tempered_draft_logits:
            return (
                f"{self.name}: its draft-logits temperature convention is not known, so it runs "
                f"draft logits at T = 1 only, not T = {w.temperature:g}"
            )
        return None

    def check(self, w: Workload) -> None:
        reason = self.unsupported(w)
        if reason:
            raise NotSupported(reason)

    def prepare(self, w: Workload, device: str | torch.device = "cuda", inputs: dict | None = None) -> PreparedCall:
        """Build (or take) the inputs of ``w`` and return the call to time."""
        self.check(w)
        if self.needs_cuda and torch.device(device).type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            raise NotSupported(f"{self.name} needs a CUDA device")
        return self.prepare_inputs(inputs if inputs is not None else make_inputs(w, device=device))

    def run(self, w: Workload, device: str | torch.device = "cuda", inputs: dict | None = None):
        """Prepare and call once; return ``(sampled, num_sampled)``."""
        prepared = self.prepare(w, device, inputs)
        return prepared.finish(prepared.call())
