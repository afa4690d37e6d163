"""Deterministic, realistic inputs for ``rejection_sample`` built from a small frozen spec.

A :class:`Workload` names one batch: its shape (``R`` requests, ``K`` speculative steps, vocab
``V``), where the ``-1`` placeholders go, the verification mode, whether draft logits are
passed, dtypes, temperatures and how closely the draft agrees with the target.
:func:`make_inputs` turns it into the keyword arguments of ``rejection_sample`` and
:func:`bytes_required` gives the traffic an ideal sampler needs for it (spec sections 1.1, 1.2
and 5.5).

The mode, pattern and draft names (:data:`MODES`, :data:`PATTERNS`, :data:`DRAFTS`) are
append-only: results key on them, so an existing name must never change meaning.

Determinism and devices
-----------------------
Everything is a pure function of the spec. Each kind of randomness has its own generator,
seeded from ``(w.seed, stream)``, so changing one knob does not reshuffle the rest: workloads
that differ only in ``placeholder_density``/``placeholder_pattern``, ``mode`` (other than
``"greedy"``) or ``draft`` share every logit and every non-placeholder token.

- **Layout and metadata** (draft counts, placeholder positions, greedy requests, slots,
  ``pos``, ``temperature``, ``seed``, anchors) are drawn on the CPU and then moved, so they are
  identical on every device.
- **Floating-point data and the draft token ids** drawn from it are generated on the target
  device (a CUDA generator when the device is CUDA, so ``V = 151936, R = 512`` takes a moment
  rather than minutes). CPU and CUDA therefore give *different* logit values and draft token
  ids for the same spec; each is deterministic on its own device.

The package, by role:

- :mod:`.spec`: :class:`Workload`, its validation, and :func:`workload_of`;
- :mod:`.layout`: the layout and metadata, and the seeded generators;
- :mod:`.logits`: target and draft logits, draft tokens, vocabulary masks;
- :mod:`.inputs`: :func:`make_inputs`, and the sampler paths' inputs (:func:`path_inputs`);
- :mod:`.traffic`: :func:`bytes_required`.
"""

# MODES, DRAFTS, PATTERNS and PLACEHOLDER_TOKEN_ID are append-only names declared in
# specsample.schema (benchmark results key on them) and re-exported here.
from ..schema import DRAFTS, MODES, PATTERNS, PLACEHOLDER_TOKEN_ID
from .inputs import FLY_ENTROPY_THRESHOLD, FLY_ENTROPY_TOP_K, base_inputs, make_inputs, path_inputs
from .spec import Workload, workload_of
from .traffic import bytes_required

__all__ = [
    "DRAFTS",
    "FLY_ENTROPY_THRESHOLD",
    "FLY_ENTROPY_TOP_K",
    "MODES",
    "PATTERNS",
    "PLACEHOLDER_TOKEN_ID",
    "Workload",
    "base_inputs",
    "bytes_required",
    "make_inputs",
    "path_inputs",
    "workload_of",
]
