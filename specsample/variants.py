"""The variants registry: every implementation specsample can time, behind one interface.

:data:`VARIANTS` is the single list that the asv suite and the tests iterate. A variant says
which workloads it supports (:meth:`Variant.unsupported` gives the reason when it does not),
prepares its own inputs outside the timed region (:meth:`Variant.prepare`) and hands back a
:class:`PreparedCall`: the zero-argument call to time, and how to read its output as
``(sampled [R, K+1], num_sampled [R])``.

=================  ============================================================================
``mrv2``           the Triton sampler, ``specsample.rejection_sample`` (post-PR-#50939).
``fast``           the same algorithm and random numbers with less work
                   (:mod:`specsample.kernels.fast`: stats only for rows something reads, cheaper
                   Philox and logs in the resample step).
``mrv2-pre50939``  REPLICA FOR BENCHMARKING ONLY of the sampler before PR #50939
                   (:mod:`specsample.kernels.pre50939`); wrong on block-verification
                   placeholders, by design.
``torch-eager``    the PyTorch reference (:mod:`specsample.reference`) on the GPU: the baseline a
                   user could write in an afternoon. Not CUDA-graph capturable (host syncs).
``flashinfer``     FlashInfer's ``chain_speculative_sampling`` from logits: two softmaxes to
                   probabilities, then its kernel. Standard mode, draft logits, fixed K, no -1.
``flashinfer-kernel``  the same kernel alone, from precomputed probabilities (not the same work:
                   it starts after the softmaxes).
=================  ============================================================================
"""

from __future__ import annotations

import functools
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass

import torch

from . import reference
from .kernels import fast as fast_kernels
from .kernels import mrv2 as mrv2_kernels
from .validation import check_inputs
from .workloads import Workload, make_inputs


class NotSupported(NotImplementedError):
    """A variant cannot run a workload. asv treats ``NotImplementedError`` in setup as a skip."""


@dataclass(frozen=True)
class PreparedCall:
    """A call ready to time, and how to read its output."""

    call: Callable[[], object]
    finish: Callable[[object], tuple[torch.Tensor, torch.Tensor]]
    graph_capturable: bool = True


def _identity(out: object) -> tuple[torch.Tensor, torch.Tensor]:
    return out  # type: ignore[return-value]


def _sampler_call(inputs: dict, placeholder_fix: bool, launch=mrv2_kernels.launch) -> PreparedCall:
    check_inputs(**inputs)  # once here, so the timed call skips the host read-back
    call = functools.partial(launch, **inputs, placeholder_fix=placeholder_fix)
    return PreparedCall(call, _identity)


def _prepare_mrv2(inputs: dict) -> PreparedCall:
    return _sampler_call(inputs, placeholder_fix=True)


def _prepare_fast(inputs: dict) -> PreparedCall:
    return _sampler_call(inputs, placeholder_fix=True, launch=fast_kernels.launch)


def _prepare_pre50939(inputs: dict) -> PreparedCall:
    return _sampler_call(inputs, placeholder_fix=False)


def _prepare_torch_eager(inputs: dict) -> PreparedCall:
    return PreparedCall(functools.partial(reference.rejection_sample, **inputs), _identity, graph_capturable=False)


# ---- FlashInfer ------------------------------------------------------------------------------


def _flashinfer_unavailable() -> str | None:
    if importlib.util.find_spec("flashinfer") is None:
        return "flashinfer is not installed (pip install 'specsample[flashinfer]')"
    if not torch.cuda.is_available():
        return "flashinfer needs a CUDA device"
    return None


def _flashinfer_layout(inputs: dict) -> tuple[int, int, int]:
    r = inputs["idx_mapping"].shape[0]
    k = inputs["num_speculative_steps"]
    v = min(inputs["target_logits"].shape[1], inputs["draft_logits"].shape[2])
    return r, k, v


def _flashinfer_probs(inputs: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Logits -> the probabilities FlashInfer takes: target [R, K+1, V], draft [R, K, V]."""
    r, k, v = _flashinfer_layout(inputs)
    target = inputs["target_logits"][:, :v].view(r, k + 1, v)
    draft = inputs["draft_logits"][inputs["idx_mapping"].long(), :, :v]
    temperature = inputs["temperature"][inputs["idx_mapping"].long()].view(r, 1, 1)
    target_probs = torch.softmax(target.float(), dim=-1)
    draft_probs = torch.softmax(draft.float() / temperature, dim=-1)  # drafts arrive pre-temperature
    return target_probs, draft_probs


def _flashinfer_finish(out: object) -> tuple[torch.Tensor, torch.Tensor]:
    tokens = out[0] if isinstance(out, tuple) else out  # [R, K+1], -1 after the emitted tokens
    num_sampled = (tokens >= 0).sum(dim=1).to(torch.int32)
    return tokens.to(torch.int64), num_sampled


def _prepare_flashinfer(inputs: dict, *, kernel_only: bool) -> PreparedCall:
    import flashinfer.sampling as fs

    r, k, _ = _flashinfer_layout(inputs)
    draft_ids = inputs["draft_sampled"].view(r, k + 1)[:, 1:].to(torch.int32).contiguous()
    accepted = torch.empty(r, dtype=torch.int32, device=draft_ids.device)
    emitted = torch.empty(r, dtype=torch.int32, device=draft_ids.device)
    seed = int(inputs["seed"][0])
    if kernel_only:
        target_probs, draft_probs = _flashinfer_probs(inputs)

        def call():
            return fs.chain_speculative_sampling(
                draft_probs, draft_ids, target_probs, accepted, emitted, seed=seed, offset=0
            )
    else:

        def call():
            target_probs, draft_probs = _flashinfer_probs(inputs)
            return fs.chain_speculative_sampling(
                draft_probs, draft_ids, target_probs, accepted, emitted, seed=seed, offset=0
            )

    return PreparedCall(call, _flashinfer_finish)


# ---- the registry ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    """One implementation and what it supports."""

    name: str
    summary: str
    modes: tuple[str, ...]
    drafts: tuple[str, ...]
    placeholders: bool
    ragged: bool
    mixed_temperature: bool
    prepare_inputs: Callable[[dict], PreparedCall]
    availability: Callable[[], str | None] = lambda: None
    needs_cuda: bool = True

    def unavailable(self) -> str | None:
        """Why this variant cannot run in this environment at all, or ``None``."""
        return self.availability()

    def unsupported(self, w: Workload) -> str | None:
        """Why this variant cannot run ``w``, or ``None`` when it can."""
        reason = self.unavailable()
        if reason:
            return reason
        if w.mode not in self.modes:
            return f"{self.name} supports modes {self.modes}, not {w.mode!r}"
        if w.draft not in self.drafts:
            return f"{self.name} supports drafts {self.drafts}, not {w.draft!r}"
        has_placeholders = w.placeholder_pattern == "all" or w.placeholder_density > 0
        if has_placeholders and not self.placeholders:
            return f"{self.name} does not support -1 placeholder drafts"
        if w.ragged and not self.ragged:
            return f"{self.name} needs every request to have K drafts"
        if w.greedy_fraction not in (0.0, 1.0) and not self.mixed_temperature:
            return f"{self.name} does not support mixed temperatures in one batch"
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


_ALL_MODES = ("greedy", "standard", "block", "synthetic")
_ALL_DRAFTS = ("logits", "one-hot")

VARIANTS: tuple[Variant, ...] = (
    Variant("mrv2", "Triton MRV2 sampler, post-PR-#50939 (specsample.rejection_sample)",
            _ALL_MODES, _ALL_DRAFTS, True, True, True, _prepare_mrv2),
    Variant("fast", "Triton sampler, mrv2's algorithm and random numbers with less work",
            _ALL_MODES, _ALL_DRAFTS, True, True, True, _prepare_fast),
    Variant("mrv2-pre50939", "REPLICA FOR BENCHMARKING ONLY: the sampler before PR #50939",
            _ALL_MODES, _ALL_DRAFTS, True, True, True, _prepare_pre50939),
    Variant("torch-eager", "PyTorch reference on the GPU (eager, host syncs)",
            _ALL_MODES, _ALL_DRAFTS, True, True, True, _prepare_torch_eager, needs_cuda=False),
    Variant("flashinfer", "FlashInfer chain_speculative_sampling from logits (softmaxes included)",
            ("standard",), ("logits",), False, False, False,
            functools.partial(_prepare_flashinfer, kernel_only=False), _flashinfer_unavailable),
    Variant("flashinfer-kernel", "FlashInfer chain_speculative_sampling alone, from probabilities",
            ("standard",), ("logits",), False, False, False,
            functools.partial(_prepare_flashinfer, kernel_only=True), _flashinfer_unavailable),
)  # fmt: skip

_BY_NAME = {v.name: v for v in VARIANTS}


def names() -> tuple[str, ...]:
    return tuple(_BY_NAME)


def get(name: str) -> Variant:
    try:
        return _BY_NAME[name]
    except KeyError:
        raise ValueError(f"variant: expected one of {names()}, got {name!r}") from None
