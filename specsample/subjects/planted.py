"""A planted slowdown as a wrapper subject, for validating the sign-off and the bisection.

``BASE+extra=N`` is subject ``BASE`` (any subject name: ``mrv2``, ``mrv2@COMMIT``, ``vllm@REF``)
with one extra kernel after each call (:func:`extra_stage`): one program per row of the target
logits loads a block of its row and runs ``N`` dependent fp32 iterations on it, then stores one
number into its own scratch. The sampler's outputs are untouched (the kernel writes only its
scratch), so every semantics check still holds; its time grows with ``N`` and, past one wave
of programs, with the rows, so ``specsample signoff-validate`` calibrates ``N`` at the base point
for each target slowdown and signs off ``S@HEAD`` against ``S@HEAD+extra=N``.

The kernel runs only where mrv2's residual-mass kernel runs, in **block verification with draft
logits** (:data:`PLANTED_MODES`); at every other point the wrapper is the base call unchanged,
so the rest of a tier stays a control for false alarms. No kernel of the product carries a
test-only argument for this: the delay lives here.
"""

from __future__ import annotations

import dataclasses

import torch
import triton
import triton.language as tl

from ..schema import SubjectName
from ..workloads import Workload
from .base import PreparedCall, Subject

PLANTED_MODES = (("block", "logits"),)  # (mode, draft) where the extra kernel runs
BLOCK = 128


@triton.jit
def _delay_kernel(
    logits_ptr,  # [num_rows, V] float32 target logits (read only)
    scratch_ptr,  # [num_rows] float32: one number per program, never read by the sampler
    row_stride,
    vocab_size,
    ITERS: tl.constexpr,
    BLOCK_V: tl.constexpr,
):
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK_V)
    acc = tl.load(logits_ptr + row * row_stride + offs, mask=offs < vocab_size, other=0.0).to(tl.float32)
    for _ in range(ITERS):  # a dependent chain: the iterations cannot overlap
        acc = acc * 0.5 + 1.0
    tl.store(scratch_ptr + row, tl.sum(acc, 0))


def extra_stage(target_logits: torch.Tensor, iters: int):
    """The delay kernel over ``target_logits`` [num_rows, V] as a zero-argument call (graph
    capturable: its scratch is allocated here)."""
    rows = target_logits.shape[0]
    scratch = torch.empty(rows, dtype=torch.float32, device=target_logits.device)

    def call() -> None:
        _delay_kernel[(rows,)](
            target_logits, scratch, target_logits.stride(0), target_logits.shape[1], ITERS=iters, BLOCK_V=BLOCK
        )

    call.scratch = scratch  # for tests: what the kernel wrote
    return call


@dataclasses.dataclass
class PlantedSubject(Subject):
    """``base`` followed by :func:`extra_stage` at the points of :data:`PLANTED_MODES`."""

    base: Subject | None = None
    extra: int = 0

    def prepare(self, w: Workload, device="cuda", inputs: dict | None = None) -> PreparedCall:
        if inputs is None:
            from ..workloads import make_inputs

            inputs = make_inputs(w, device=device)
        prepared = self.base.prepare(w, device, inputs)
        if (w.mode, w.draft) not in PLANTED_MODES or self.extra <= 0:
            return prepared
        stage = extra_stage(inputs["target_logits"], self.extra)
        base_call = prepared.call

        def call():
            out = base_call()
            stage()
            return out

        return PreparedCall(call, prepared.finish, prepared.graph_capturable)


def subject(name: SubjectName) -> Subject:
    """The wrapper named ``name`` (kind ``planted``: ``base`` is the wrapped subject's name,
    ``version`` the delay kernel's iterations)."""
    from . import get

    base = get(name.base)
    extra = int(name.version)
    return PlantedSubject(
        name.text,
        f"{base.name} with a planted delay kernel of {extra} dependent iterations per row "
        f"(block verification with draft logits only)",
        base.capabilities,
        base.prepare_inputs,
        availability=base.availability,
        needs_cuda=base.needs_cuda,
        provenance={"kind": "planted", "base": dict(base.provenance), "delay_iterations": extra},
        pipeline=None,
        base=base,
        extra=extra,
    )
