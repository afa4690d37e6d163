"""The ``express`` sampler: MRV2's verification with its own random stream and no per-token noise.

Same inputs, outputs, modes and acceptance rules as :mod:`.mrv2` (greedy, standard, block
verification, synthetic rates, ``-1`` placeholders, draft logits or one-hot drafts), and the
same acceptance uniforms (word 0 of Philox keyed by the request's seed and the row's position),
so it accepts what mrv2 accepts. It differs in how the recovered / bonus token is drawn: not by
a Gumbel-max over every vocabulary entry (one Philox evaluation and two logarithms per entry,
most of ``fast``'s resample time), but by **two-level inverse-transform
sampling** over a fixed partition of the vocabulary into blocks of :data:`.streams.SAMPLE_BLOCK` entries:

* level 1: one block ``b`` with probability ``m_b / Z`` (``m_b`` the block's mass of the
  distribution to sample), from one fp64 uniform per row;
* level 2: one token ``x`` of that block with probability ``r_x / m_b``, from one fp64 uniform
  per (row, block).

``P(x) = (m_b / Z) (r_x / m_b) = r_x / Z``: exact. The block masses come from a pass that reads
the row anyway -- the stats partials (one-hot residual: less the rejected draft's own term), the
residual-mass partials (block verification with draft logits, ``tau >= 1``), or the resample
pass (the bonus / placeholder row, and the draft-logits residual at the rejected row, whose
masses need the row's LSEs first) -- and both picks happen once per request, in the insert
step, which reads only the chosen block again (8 KB of target, plus 4 KB of bf16 draft).

Random stream (all Philox-4x32-10, key = the request slot's int64 seed; ``pos`` = the row's
absolute position as uint32). Every draw depends on (seed, position, block) only, never on the
batch layout or on a configuration:

* row words ``w0..w3`` = Philox(counter ``(pos, 0, 0, 0)``): ``w0`` as ``tl.rand`` (clamped to
  at least 2**-31) is the acceptance uniform of the step tested on that row, exactly mrv2's;
  ``((w1 << 21) | (w2 >> 11)) * 2**-53`` is the row's level-1 uniform (fp64, in ``[0, 1)``).
* block words of block ``b`` = Philox(counter ``(pos, 1 + b, 0, 0)``):
  ``((w0 << 21) | (w1 >> 11)) * 2**-53`` is the level-2 uniform of that row and block.

Numerics, so that the reference reproduces the draws: everything a draw is compared against is
fp64 -- log-sum-exps, cumulative log p, acceptance thresholds, block masses, both levels' prefix
sums -- and every sum over entries is fp32 over chunks of :data:`.streams.CHUNK` = 32 entries, then fp64
over the chunk sums: reduction order then moves a sum by ~1e-7 of a chunk, not of the block,
with one fp64 conversion per 32 entries. Per-entry values (``exp`` of fp32 logits) stay fp32,
the fp64 LSE subtracted as an fp32 hi + lo pair. Draft logits are multiplied by the IEEE
reciprocal of T (one rounding per entry, as close to ``draft / T`` as a division is, and
bit-identical between the GPU and the reference: Triton's fp32 ``/`` is ``div.full``, whose
error would tilt every draft logit of a row alike and so shift the residual's boundaries). (fp32 prefix sums over 2048 entries would move
a boundary by ~1e-6 of the block mass with the scan's order, changing ~0.3% of the tokens
between the kernel and any reference.) Level 2 picks a chunk by its mass, then an entry of the
chunk with the uniform's remainder rescaled to the chunk. Prefix sums of non-negative terms are
not monotone in floating point (each prefix has its own association), so every pick
(:func:`.streams._pick`) is: the first index whose prefix exceeds ``u * total`` **among positive
weights** -- a zero weight (a ``-inf`` logit, the rejected one-hot draft, padding past ``V``)
is never picked, whatever the rounding; if none qualifies (``u * total`` at or past every
prefix, by rounding) the last positive weight (the "last-block fallback"); if all weights are
zero (an all-NaN row), index 0.

Kernels (grid; launched when), stage names as :data:`specsample.schema.STAGES`:

1. ``stats``          (R*K, nb/S)   always: block max and chunked sum-exp (or argmax) of the rows
                                    something reads (fast's rule and request-major grid; and row 0
                                    of a non-greedy request with no draft to test, whose target
                                    is then the distribution to sample)
2. ``cum_log_p``      (R,)          block verification: fp64 prefix joint ratios, and the fp64
                                    LSEs of each row read (for the residual-mass pass)
3. ``residual_mass``  (R*(K-1), nb/S) block verification with draft logits: chunked residual mass
                                    per block, rows ``1 <= j < first -1`` (fast's rows)
4. ``rejection``      (R,)          always: tau; the plan of row c_r + tau; level 1 where the
                                    block masses are known (one-hot; block + draft logits, tau >= 1;
                                    the target of row 0 when d_1 is a placeholder or absent)
5. ``resample``       (R, nb/S)     always: block masses of the bonus / placeholder row or of the
                      or (P,)       draft residual (or block argmaxes of a greedy bonus row);
                                    every other plan's programs exit at once. With one-hot drafts
                                    (few plans need the pass: bonus / placeholder rows), where the
                                    grid would be larger than the programs that fit on the GPU at
                                    once, P of them (at most ``Config.resample_programs`` an SM)
                                    loop over the tiles of the requests with work (the same tiles)
6. ``insert``         (R,)          large configuration (from R = 32 up): level 1 where not yet
                                    drawn, level 2 in the chosen
                                    block (one block read), num_sampled = tau + 1. In the small
                                    configuration the resample kernel's last program per request
                                    does it (``Config.fused_insert``, fast's scheme and counter)

Dependent launch (on an sm_90 GPU or later): every kernel after stats
is launched with programmatic stream serialization, so its programs start while the kernel before
still runs; they load what the call's inputs alone give (request metadata, tokens, positions, the
drafts' logits, the rows the residual-mass pass reads), then wait (``griddepcontrol.wait``) for
the kernel before to finish, before they read its output, store or exit. Stats, the first, is
launched in stream order (after whatever wrote the logits). It changes when a load is issued,
never a value.

Masked-block skip (``skip_masked_vocab_blocks``, vLLM's speed path; the ``SKIP_MASKED``
constexpr, so with it off the kernels are the same): a sampling block whose target logits are
-inf throughout (NaN read as -inf) does no arithmetic -- in stats (its draft partials still are
computed: the draft's LSE spans every block), in the residual-mass pass and in the resample pass.
Where the row is a tested one (the residual-mass rows, a draft residual's row), the stats
kernel's block maxima ``target_local_max`` say which blocks are masked, and their logits are not
loaded at all; a bonus or placeholder row is read to know. Every value stored for a skipped
block is the one its arithmetic gives, so the draws do not change.

CUDA-graph capturable: every buffer is allocated in :class:`Pipeline`'s ``__init__``, and no
launch reads anything back to the host. ``use_fp64`` is accepted and changes nothing (the
draws already compare in fp64).

Modules, by role: :mod:`.streams` (the random stream and the pick), :mod:`.stats` (fp64 row
reductions and the stats kernel), :mod:`.rejection` (cum_log_p, residual mass, rejection and
the plans), :mod:`.resample`, :mod:`.insert`, and :mod:`.pipeline` (:class:`Config`, the named
configurations, :class:`Pipeline`). Helpers shared with ``mrv2`` and ``fast`` live in
:mod:`specsample.kernels.common`.

Kernels take their arguments flat (what the launcher passes); the per-request helpers that
several kernels share take them grouped, each kernel building the tuples it passes (Triton
unpacks them at compile time: the SASS is the same)::

    logits    (target_logits_ptr, target_logits_stride,            [N, V]
               draft_logits_ptr, draft_logits_stride_0, _1)        [max_num_reqs, K, V_d]
    requests  (draft_sampled_ptr [N], cu_num_logits_ptr [R + 1], idx_mapping_ptr [R],
               temperature_ptr [max_num_reqs])
    partials  (target_local_max_ptr, target_local_sumexp_ptr,      [N, nb] stats partials
               draft_local_max_ptr, draft_local_sumexp_ptr)
    plans     (plan_ptr [R], plan_block_ptr [R], plan_lse_ptr [R, 2], plan_scale_ptr [R])
    outputs   (sampled_ptr, sampled_stride, num_sampled_ptr)      [R, K + 1], [R]
    resampled (resampled_mass_ptr, resampled_argmax_ptr)          [R, nb]
"""

from __future__ import annotations

from . import insert, pipeline, rejection, resample, stats, streams
from .pipeline import (
    LARGE_BATCH_CONFIG,
    NAMED_CONFIGS,
    SMALL_BATCH_BELOW,
    SMALL_BATCH_CONFIG,
    Config,
    Pipeline,
    default_config,
    launch,
    supports_dependent_launch,
)
from .streams import SAMPLE_BLOCK

__all__ = [
    "LARGE_BATCH_CONFIG",
    "NAMED_CONFIGS",
    "SAMPLE_BLOCK",
    "SMALL_BATCH_BELOW",
    "SMALL_BATCH_CONFIG",
    "Config",
    "Pipeline",
    "default_config",
    "insert",
    "launch",
    "pipeline",
    "rejection",
    "resample",
    "stats",
    "streams",
    "supports_dependent_launch",
]
