"""MRV2 rejection sampler in Triton: six kernels and one launcher.

This is the pipeline of ``docs/algorithm.md`` (the spec's sections 2-3), written
from the spec, in its post-PR-#50939 form. One flag, ``PLACEHOLDER_FIX``, switches every kernel
back to the pre-#50939 behaviour for the benchmark-only replica in :mod:`..pre50939`; the
replica clamps the ``-1`` indices that upstream read out of bounds, so both forms are memory-safe.

Kernels (grid; launched when), by module along the data flow -- :mod:`.stats` (1-3),
:mod:`.rejection` (4), :mod:`.resample` (5, 6) -- and :mod:`.pipeline`, which launches them:

1. ``_local_stats_kernel``    (N, nb)  always: per 8192-wide vocab block max / sumexp / argmax
2. ``_cumulative_log_p_kernel`` (R,)   block verification: prefix joint ratio log p_i
3. ``_residual_mass_kernel``  (N, nb)  block verification with draft logits: partial Z
4. ``_rejection_kernel``      (R,)     always: serial over drafts, decides tau
5. ``_resample_kernel``       (R, rb)  always: residual logits + Gumbel argmax per 1024 block
6. ``_insert_kernel``         (R,)     always: argmax over blocks, num_sampled = tau + 1

Bytes (fp32 target, ``s_d`` bytes per draft value): stats reads ``R*K*V*(4 + s_d)``; residual
mass reads up to ``R*(K-1)*V*(4 + s_d)``; resample reads ``R*V*4`` (+ ``R*V*s_d`` for a
draft-logits residual); the serial kernels read O(R*K*nb) partials and gathers.

Index width: every row or slot index is cast to int64 before it meets a stride, so N*V above
2**31 is safe (vocab 151936 overflows int32 offsets past ~14000 rows).
"""

from __future__ import annotations

from . import pipeline, rejection, resample, stats
from .pipeline import RESAMPLE_BLOCK_SIZE, VOCAB_BLOCK_SIZE, Pipeline, launch

__all__ = [
    "RESAMPLE_BLOCK_SIZE",
    "VOCAB_BLOCK_SIZE",
    "Pipeline",
    "launch",
    "pipeline",
    "rejection",
    "resample",
    "stats",
]
