"""The ``express`` sampler: MRV2's verification with its own random stream and no per-token noise.

Same inputs, outputs, modes and acceptance rules as :mod:`.mrv2` (greedy, standard, block
verification, synthetic rates, ``-1`` placeholders, draft logits or one-hot drafts), and the
same acceptance uniforms (word 0 of Philox keyed by the request's seed and the row's position),
so it accepts what mrv2 accepts. It differs in how the recovered / bonus token is drawn: not by
a Gumbel-max over every vocabulary entry (one Philox evaluation and two logarithms per entry,
most of ``fast``'s resample time), but by **two-level inverse-transform
sampling** over a fixed partition of the vocabulary into blocks of :data:`SAMPLE_BLOCK` entries:

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
sums -- and every sum over entries is fp32 over chunks of :data:`CHUNK` = 32 entries, then fp64
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
(:func:`_pick`) is: the first index whose prefix exceeds ``u * total`` **among positive
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
6. ``insert``         (R,)          large configuration (every R with dependent launch, else from
                                    R = 32 up): level 1 where not yet drawn, level 2 in the chosen
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

CUDA-graph capturable: every buffer is allocated in :class:`Pipeline`'s ``__init__``, and no
launch reads anything back to the host. ``use_fp64`` is accepted and changes nothing (the
draws already compare in fp64).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from .fast import _request_rows
from .mrv2 import _global_argmax, _resampled_token, _uniform

# Entries per vocabulary block of the two-level sampler. Part of the random stream's definition
# (block b's level-2 uniform is keyed by b): it must not depend on R or on a configuration, or
# a request's tokens would change when its batch is split.
SAMPLE_BLOCK = 2048
# Entries per chunk: sums over a chunk are fp32, sums of chunk sums fp64 (see the module docstring).
CHUNK = tl.constexpr(32)
_SCALE_53 = tl.constexpr(1.1102230246251565e-16)  # 2**-53

# Plans for the token of row c_r + tau (per request, written by the rejection kernel)
PLAN_DONE = tl.constexpr(0)  # greedy rejection: the argmax is written
PLAN_ARGMAX = tl.constexpr(1)  # greedy bonus row: first argmax of the target row
PLAN_TARGET = tl.constexpr(2)  # softmax(target row): the bonus row, or the row of a placeholder (never drawn)
PLAN_RESIDUAL = tl.constexpr(3)  # max(p - q, 0), draft logits, masses from the resample pass (standard; block tau = 0)
PLAN_ONE_HOT = tl.constexpr(4)  # p without the rejected draft: level 1 from the stats partials
PLAN_BLOCK_RESIDUAL = tl.constexpr(5)  # max(p_tau p - q, 0), block + draft logits, tau >= 1: level 1 from residual mass
# softmax(target row 0), d_1 a placeholder or no draft: level 1 from the stats partials
PLAN_TARGET_DRAWN = tl.constexpr(6)


@triton.jit
def _needs_row_pass(plan):
    # The plans whose row the resample pass reads (their block masses are not known before it).
    return (plan == PLAN_TARGET) | (plan == PLAN_RESIDUAL) | (plan == PLAN_ARGMAX)


# Warps of the one-program-per-request kernels (rejection, cum_log_p): their [K_P2, nb] fp64 LSE
# tiles spread over 128 threads. Not a Config field: it sets the reduction tree of those LSEs
# (fp64 sums, so ulps at most), and a configuration must not reach a draw even by an ulp.
REQUEST_WARPS = 4
# Geometry that no configuration varies: residual-mass programs of 2 sampling blocks (fast's
# 4096 entries), resample programs of 1 (fast's 2048), and 4 warps for the residual-mass,
# resample and insert programs (the insert, or the resample kernel's last program, picks within
# one block).
RESIDUAL_BLOCKS = 2
RESAMPLE_BLOCKS = 1
TILE_WARPS = 4


@dataclass(frozen=True)
class Config:
    """Launch geometry; none of it changes a draw (the sampling blocks are :data:`SAMPLE_BLOCK`)."""

    stats_blocks: int = 2  # sampling blocks per stats program (4096 entries: fast's large-batch stats)
    stats_warps: int = 4
    fused_insert: bool = False  # the resample kernel's last program per request inserts (fast's scheme)
    # With one-hot drafts, the resample pass as at most this many programs an SM (fewer if fewer
    # fit at once), looping over the tiles of the requests whose plan needs it (0: one program a
    # tile, the (R, nb / RESAMPLE_BLOCKS) grid). Used where the grid would be larger and R <=
    # PERSISTENT_MAX_REQS; not with fused_insert (which counts the programs of a request). With
    # draft logits always the grid: every rejected request's residual row is read there, and the
    # persistent pass read rows 29-32% slower than the grid on an H200.
    resample_programs: int = 0

    def __post_init__(self) -> None:
        if self.stats_blocks not in (1, 2, 4, 8):
            raise ValueError(f"stats_blocks: expected 1, 2, 4 or 8, got {self.stats_blocks}")
        if self.stats_warps not in (1, 2, 4, 8, 16, 32):
            raise ValueError(f"stats_warps: expected a power of two in [1, 32], got {self.stats_warps}")
        if not 0 <= self.resample_programs <= 32:
            raise ValueError(f"resample_programs: expected 0 to 32 programs an SM, got {self.resample_programs}")
        if self.resample_programs and self.fused_insert:
            raise ValueError("resample_programs: the persistent resample pass cannot fuse the insert (fused_insert)")


# One-hot drafts: the persistent resample pass, with as many programs as fit (16 an SM).
LARGE_BATCH_CONFIG = Config(resample_programs=32)
# fast's small-batch choices: stats of 8192 entries and 8 warps (as parallel as mrv2 below R=32),
# and the insert inside the resample kernel (one launch fewer; from R=32 up the count costs more)
SMALL_BATCH_CONFIG = Config(stats_blocks=4, stats_warps=8, fused_insert=True)
SMALL_BATCH_BELOW = 32
# The persistent resample pass keeps the batch's plans as [R_P2] vectors: up to this many requests.
PERSISTENT_MAX_REQS = 1024
# Multiprocessors assumed on a CPU (Triton's interpreter), so that the tests loop over tiles.
CPU_MULTIPROCESSORS = 2
# ptxas's register cap for the persistent resample kernel (one-hot drafts): the grid kernel's
# registers at 4 warps (sm_90), so that as many of its programs fit an SM (16), with no spill;
# uncapped it takes 40 (12 an SM).
PERSISTENT_RESAMPLE_REGISTERS = 32
# The configurations by name: what `specsample tune` builds candidates on and memcheck forces.
NAMED_CONFIGS = {"large": LARGE_BATCH_CONFIG, "small": SMALL_BATCH_CONFIG}


def _multiprocessors(device: torch.device) -> int:
    """The GPU's multiprocessors (:data:`CPU_MULTIPROCESSORS` on a CPU)."""
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return CPU_MULTIPROCESSORS


def _programs_per_multiprocessor(kernel, num_warps: int, device: torch.device) -> int:
    """How many programs of a compiled kernel fit on one multiprocessor at once: its registers
    (allocated per warp in units of 256), threads, shared memory, and the 32-block limit."""
    kernel._init_handles()
    props = torch.cuda.get_device_properties(device)
    threads = num_warps * 32
    warp_registers = -(-kernel.n_regs * 32 // 256) * 256
    fit = min(
        32,
        getattr(props, "max_threads_per_multi_processor", 2048) // threads,
        getattr(props, "regs_per_multiprocessor", 65536) // (warp_registers * num_warps),
    )
    shared = kernel.metadata.shared
    if shared:
        fit = min(fit, getattr(props, "shared_memory_per_multiprocessor", 228 * 1024) // shared)
    return max(fit, 1)


def supports_dependent_launch(device: torch.device) -> bool:
    """Programmatic dependent launch: an sm_90 (Hopper) GPU or later; not on CPU (the interpreter)."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device)[0] >= 9


def default_config(num_reqs: int, dependent_launch: bool = False) -> Config:
    """The configuration used when none is given (R is known on the host: no device sync).

    With dependent launch the large configuration at every R: the insert kernel's launch then
    overlaps the resample kernel, and the fused insert's count costs more than it saves
    (``specsample tune``, standard R=1: 18.2 us large against 19.0 small). Without it, ``small`` below
    :data:`SMALL_BATCH_BELOW` requests."""
    if dependent_launch or num_reqs >= SMALL_BATCH_BELOW:
        return LARGE_BATCH_CONFIG
    return SMALL_BATCH_CONFIG


# ---------------------------------------------------------------------------------------------
# Device helpers: the random stream, fp64 reductions, the inverse-CDF pick
# ---------------------------------------------------------------------------------------------


@triton.jit
def _launch_dependents(PDL: tl.constexpr):
    # Programmatic dependent launch: the call's next kernel may start its programs once every
    # program of this one has passed here or exited (it waits in _wait_for_prior before reading
    # our output). Only programs with work call it (an exit counts as the trigger): first in
    # every program, exit-only ones included, it made the large stats kernel at phi = 1 (R = 128,
    # standard: all of its 19k programs exit at once) 24.9 us instead of 13.7 on an H200.
    if PDL:
        tl.extra.cuda.gdc_launch_dependents()


@triton.jit
def _wait_for_prior(PDL: tl.constexpr):
    # Wait for the call's previous kernel to finish and its stores to be visible. Every program of
    # a dependently launched kernel passes here before it reads anything a kernel of the call
    # wrote, before any store, and before it exits (an early exit included): so a kernel finishes
    # only after the one before it, and the next kernel's wait covers every earlier kernel too.
    # Loads before it read the call's inputs only (logits, tokens, positions, request metadata).
    if PDL:
        tl.extra.cuda.gdc_wait()


@triton.jit
def _row_uniform(seed, position):
    # Level-1 uniform of a row: words 1 and 2 of Philox(seed; pos, 0, 0, 0) as a 53-bit fp64.
    _, w1, w2, _ = tl.randint4x(seed, position.to(tl.int32))
    bits = (w1.to(tl.uint64) << 21) | (w2.to(tl.uint64) >> 11)
    return bits.to(tl.float64) * _SCALE_53


@triton.jit
def _block_uniform(seed, position, block):
    # Level-2 uniform of (row, block b): words 0 and 1 of Philox(seed; pos, 1 + b, 0, 0). An int64
    # offset gives the counter (low 32 bits, high 32 bits, 0, 0).
    counter = (position.to(tl.int32).to(tl.int64) & 0xFFFFFFFF) | ((block + 1).to(tl.int64) << 32)
    w0, w1, _, _ = tl.randint4x(seed, counter)
    bits = (w0.to(tl.uint64) << 21) | (w1.to(tl.uint64) >> 11)
    return bits.to(tl.float64) * _SCALE_53


@triton.jit
def _encode(positive, hit, k, SIZE: tl.constexpr):
    # _pick's packed key of index k: a hit keys k, a positive weight that is no hit keys
    # 2*SIZE - 1 - k (in [SIZE, 2*SIZE), smallest for the last), any other 2*SIZE.
    return tl.where(positive, tl.where(hit, k, 2 * SIZE - 1 - k), 2 * SIZE)


@triton.jit
def _decode(best, SIZE: tl.constexpr):
    # The smallest packed key -> the index (first hit, else last positive, else 0).
    return tl.where(best < SIZE, best, tl.where(best < 2 * SIZE, 2 * SIZE - 1 - best, 0))


@triton.jit
def _pick(weights, u, SIZE: tl.constexpr):
    # Inverse CDF over non-negative fp64 weights [SIZE]: the first index whose prefix sum exceeds
    # u * total among positive weights; else the last positive weight; else 0. Returns the
    # index and the total (the block's mass at level 2).
    # One integer min over _encode's keys instead of a min (first hit) and a max (last
    # positive): the min is the first hit, else the last positive, else none (_decode): the same
    # index, one reduction (a cross-warp one, shuffles and barriers) fewer.
    k = tl.arange(0, SIZE)
    prefix = tl.cumsum(weights, 0)
    total = tl.sum(weights, 0)
    best = tl.min(_encode(weights > 0.0, prefix > u * total, k, SIZE), 0)
    return _decode(best, SIZE), total


@triton.jit
def _prefix_pair(incl_a, excl_a, own_a, incl_b, excl_b, own_b):
    # Scan combine of (inclusive, exclusive) prefix sums: the exclusive sum of a segment is every
    # term but its last. Scanning (w, 0, w) gives both prefixes of w and w itself (the last term)
    # in one scan, all three in the scan's layout.
    return incl_a + incl_b, incl_a + excl_b, own_b


@triton.jit
def _min_key_with(key_a, x_a, y_a, key_b, x_b, y_b):
    # Reduce combine: the smaller key and the values that came with it (a tie keeps the left).
    left = key_a <= key_b
    return tl.where(left, key_a, key_b), tl.where(left, x_a, x_b), tl.where(left, y_a, y_b)


@triton.jit
def _sample_block(r, v, NC: tl.constexpr, CHUNK_: tl.constexpr):
    # Level 2 over one sampling block of fp32 weights r >= 0, as [NC, CHUNK_] chunks in order,
    # with the fp64 uniform v: a chunk by _pick's rule over the chunk masses (fp32 sums, then
    # fp64), then an entry of that chunk by _pick's rule with v's remainder rescaled to the
    # chunk, t = (v * total - mass before the chunk) / chunk mass. Returns the entry's index in
    # the block and the block's mass (fp64).
    #
    # _pick's rule and arithmetic, laid out so that fewer reductions cross warps (each is
    # shuffles, shared memory and barriers, and they run one after another): one scan gives the
    # inclusive and exclusive prefixes of the chunk masses; the chunk's key, its mass and its
    # exclusive prefix ("before": a sum of chunk sums, as the reference's, in the scan's order)
    # come out of one min-reduction, not three; and every chunk's entries get their fp64 prefix,
    # total and key inside their own warp, so the entry's pick is one min over the tile masked to
    # row j, rather than chunk j's entries reduced out of the tile across warps, converted to a
    # vector, scanned and picked.
    chunk_mass = tl.sum(r, 1).to(tl.float64)
    c = tl.arange(0, NC)
    incl, excl, chunk_mass = tl.associative_scan((chunk_mass, tl.zeros_like(chunk_mass), chunk_mass), 0, _prefix_pair)
    total = tl.sum(chunk_mass, 0)
    key = _encode(chunk_mass > 0.0, incl > v * total, c, NC)
    best, before, mass_j = tl.reduce((key, excl, chunk_mass), 0, _min_key_with)
    j = _decode(best, NC)
    t = tl.where(mass_j > 0.0, (v * total - before) / mass_j, 0.0)
    # entries of every chunk (only row j's keys survive the mask)
    r64 = r.to(tl.float64)
    inner_prefix = tl.cumsum(r64, 1)
    inner_total = tl.sum(r64, 1, keep_dims=True)
    k = tl.arange(0, CHUNK_)[None, :]
    inner_key = _encode((r64 > 0.0) & (c[:, None] == j), inner_prefix > t * inner_total, k, CHUNK_)
    i = _decode(tl.min(tl.min(inner_key, 1), 0), CHUNK_)
    return j * CHUNK_ + i, total


@triton.jit
def _chunk_offsets(block, NC: tl.constexpr, CHUNK_: tl.constexpr):
    # Vocabulary offsets of sampling block ``block`` as [NC, CHUNK_] chunks in order.
    return block * (NC * CHUNK_) + tl.arange(0, NC)[:, None] * CHUNK_ + tl.arange(0, CHUNK_)[None, :]


@triton.jit
def _lse(local_max_ptr, local_sumexp_ptr, row, local_stride, num_blocks, NB_P2: tl.constexpr):
    # fp64 log-sum-exp of a row from its block partials (fp32 maxima, fp64 sum-exps); a block
    # whose max is -inf contributes 0; an all -inf row gives -inf.
    offs = tl.arange(0, NB_P2)
    mask = offs < num_blocks
    m = tl.load(local_max_ptr + row * local_stride + offs, mask=mask, other=float("-inf")).to(tl.float64)
    s = tl.load(local_sumexp_ptr + row * local_stride + offs, mask=mask, other=0.0)
    big = tl.max(m, 0)
    w = tl.where(m == float("-inf"), 0.0, s * tl.exp(m - big))
    return big + tl.log(tl.sum(w, 0))


@triton.jit
def _row_lses(m32, s):
    # fp64 log-sum-exp along axis 1 of [rows, NB_P2] partials (fp32 maxima m32, fp64 sum-exps s),
    # as _lse does for one row. The max is taken in fp32 (exact: fp32 -> fp64 is exact and
    # monotone), which leaves the fp64 work to the exps, the sum and the log.
    big = tl.max(m32, 1).to(tl.float64)
    w = tl.where(m32 == float("-inf"), 0.0, s * tl.exp(m32.to(tl.float64) - big[:, None]))
    return big + tl.log(tl.sum(w, 1))


@triton.jit
def _pick_row(values, k, index):
    # values[index] of a [K_P2] vector (0 where no k matches): a select, not a load. A sum of
    # one entry and zeros is that entry exactly (-inf too; other rows' NaN are not added).
    return tl.sum(tl.where(k == index, values, 0), 0)


@triton.jit
def _finite_or_neg_inf(x):
    # NaN is treated as -inf throughout, as mrv2 does in its reductions.
    return tl.where(x != x, float("-inf"), x)


@triton.jit
def _split(value):
    # An fp64 scalar as fp32 hi + lo (hi = round(value), lo = round(value - hi)).
    hi = value.to(tl.float32)
    lo = (value - hi.to(tl.float64)).to(tl.float32)
    return hi, lo


@triton.jit
def _residual(x, y, target_lse, draft_lse, scale):
    # max(scale * p - q, 0) per entry in fp32, p = exp(x - L_t), q = exp(y - L_d), the fp64 LSEs
    # subtracted as hi + lo (fp32 operations only, reproducible); NaN (an all -inf row) -> 0.
    t_hi, t_lo = _split(target_lse)
    d_hi, d_lo = _split(draft_lse)
    p = tl.exp((x - t_hi) - t_lo)
    q = tl.exp((y - d_hi) - d_lo)
    r = scale * p - q
    return tl.where(r > 0.0, r, 0.0)


@triton.jit
def _chunked_sum(e, SUB: tl.constexpr, BLOCK: tl.constexpr):
    # Row sums of [SUB, BLOCK] fp32: fp32 over chunks of CHUNK consecutive entries, fp64 over the
    # chunk sums, as the reference adds them. Not can_reorder=True: compiled, that reshape may
    # move entries between rows (sampling blocks), so every partial took other blocks' terms,
    # normalised by other maxima (seen on the H200: draws unlike the reference's, and changing
    # with the configuration; the interpreter keeps the order, so CPU tests could not see it).
    chunks = tl.reshape(e, (SUB, BLOCK // CHUNK, CHUNK))
    return tl.sum(tl.sum(chunks, 2).to(tl.float64), 1)


@triton.jit
def _inverse(temperature):
    # 1 / T, IEEE-rounded (div.rn; Triton's fp32 "/" is the approximate div.full): draft logits
    # are multiplied by it, so the kernels and the reference divide by T bit for bit alike.
    return tl.math.div_rn(1.0, temperature)


# Kernels take their arguments flat (what the launcher passes); the per-request helpers that
# several kernels share take them grouped, each kernel building
# the tuples it passes (Triton unpacks them at compile time: the SASS is the same):
#   logits    (target_logits_ptr, target_logits_stride,            [N, V]
#              draft_logits_ptr, draft_logits_stride_0, _1)        [max_num_reqs, K, V_d]
#   requests  (draft_sampled_ptr [N], cu_num_logits_ptr [R + 1], idx_mapping_ptr [R],
#              temperature_ptr [max_num_reqs])
#   partials  (target_local_max_ptr, target_local_sumexp_ptr,      [N, nb] stats partials
#              draft_local_max_ptr, draft_local_sumexp_ptr)
#   plans     (plan_ptr [R], plan_block_ptr [R], plan_lse_ptr [R, 2], plan_scale_ptr [R])
#   outputs   (sampled_ptr, sampled_stride, num_sampled_ptr)      [R, K + 1], [R]
#   resampled (resampled_mass_ptr, resampled_argmax_ptr)          [R, nb]


# ---------------------------------------------------------------------------------------------
# Kernel 1: stats, only for rows something reads (fast's rule), with fp64 sum-exps
# ---------------------------------------------------------------------------------------------


@triton.jit
def _first_index_of(x, row_max, BLOCK: tl.constexpr):
    # Per row of [n, BLOCK] x (no NaN: mapped to -inf before), the first index holding row_max,
    # as argmax(tie_break_left) gives it, by two plain reductions instead of one over (value,
    # index) pairs (greedy stats at R = 128: 74.8 us against 80.9). An all -inf row gives 0.
    return tl.min(tl.where(x == row_max[:, None], tl.arange(0, BLOCK)[None, :], BLOCK), 1)


@triton.jit
def _stats_rows(cu_num_logits_ptr, draft_sampled_ptr, idx_mapping_ptr, temperature_ptr, req, K_P2: tl.constexpr):
    # The rows of request req the stats kernel reads, j < num_read: a greedy request rows
    # j <= first placeholder (greedy writes the argmax there), the others rows j < first (the
    # rows tested), or row 0 when there is none (first == 0: tau = 0 for certain, and row 0's
    # target is the distribution to sample, whose block masses are then the stats partials).
    # Also the request's first row, slot, temperature and first placeholder. Two dependent loads deep.
    start, num_drafts, first = _request_rows(cu_num_logits_ptr, draft_sampled_ptr, req, K_P2)
    slot = tl.load(idx_mapping_ptr + req).to(tl.int64)
    temperature = tl.load(temperature_ptr + slot)
    num_read = tl.where(temperature == 0.0, tl.minimum(first + 1, num_drafts), tl.maximum(first, 1))
    return start, slot, temperature, num_read, first


@triton.jit
def _stats_partials(
    x,
    y_raw,
    row,
    j,
    first,
    temperature,
    blocks,
    target_local_argmax_ptr,
    partials,
    local_stride,
    num_blocks,
    HAS_DRAFT_LOGITS: tl.constexpr,
    SUB: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # One stats tile's partials from its loaded [SUB, BLOCK] target (and draft) logits: block
    # max and chunked sum-exp (or first argmax, greedy) of row `row`, sampling blocks `blocks`.
    target_local_max_ptr, target_local_sumexp_ptr, draft_local_max_ptr, draft_local_sumexp_ptr = partials
    x = _finite_or_neg_inf(x.to(tl.float32))
    block_max = tl.max(x, 1)
    out = row * local_stride + blocks
    bmask = blocks < num_blocks
    tl.store(target_local_max_ptr + out, block_max, mask=bmask)
    if temperature == 0.0:
        arg = _first_index_of(x, block_max, BLOCK)
        tl.store(target_local_argmax_ptr + out, blocks.to(tl.int64) * BLOCK + arg.to(tl.int64), mask=bmask)
    else:
        e = tl.where(x == float("-inf"), 0.0, tl.exp(x - block_max[:, None]))
        tl.store(target_local_sumexp_ptr + out, _chunked_sum(e, SUB, BLOCK), mask=bmask)
        # Not for row 0 read for its target alone: its draft arithmetic on an empty tile made each
        # such program as long as a tested row's (R = 128, phi = 1: stats 41 us instead of 13.7).
        if HAS_DRAFT_LOGITS and j < first:
            y = _finite_or_neg_inf(y_raw.to(tl.float32) * _inverse(temperature))
            d_max = tl.max(y, 1)
            ey = tl.where(y == float("-inf"), 0.0, tl.exp(y - d_max[:, None]))
            tl.store(draft_local_max_ptr + out, d_max, mask=bmask)
            tl.store(draft_local_sumexp_ptr + out, _chunked_sum(ey, SUB, BLOCK), mask=bmask)


@triton.jit
def _stats_kernel(
    target_logits_ptr,
    target_logits_stride,
    draft_logits_ptr,
    draft_logits_stride_0,
    draft_logits_stride_1,
    draft_sampled_ptr,
    cu_num_logits_ptr,
    idx_mapping_ptr,
    temperature_ptr,
    target_local_argmax_ptr,
    target_local_max_ptr,
    target_local_sumexp_ptr,
    draft_local_max_ptr,
    draft_local_sumexp_ptr,
    local_stride,
    num_blocks,
    vocab_size,
    HAS_DRAFT_LOGITS: tl.constexpr,
    K_P2: tl.constexpr,
    GROUPS: tl.constexpr,
    SUB: tl.constexpr,
    BLOCK: tl.constexpr,
    PDL: tl.constexpr,
):
    # Program (req * K + j, g): row j of request req, sampling blocks g*SUB .. g*SUB + SUB-1 as
    # one [SUB, BLOCK] tile, one partial per sampling block. A greedy request reads rows
    # j <= first placeholder (greedy writes the argmax there), the others rows j < first.
    # The call's first kernel: launched in stream order, it lets the rejection (or cum_log_p)
    # kernel start as soon as its last programs with work have started.
    partials = (target_local_max_ptr, target_local_sumexp_ptr, draft_local_max_ptr, draft_local_sumexp_ptr)
    req = (tl.program_id(0) // GROUPS).to(tl.int64)
    j = tl.program_id(0) % GROUPS
    start, slot, temperature, num_read, first = _stats_rows(
        cu_num_logits_ptr, draft_sampled_ptr, idx_mapping_ptr, temperature_ptr, req, K_P2
    )
    if j >= num_read:
        return
    _launch_dependents(PDL)
    row = start + j
    blocks = tl.program_id(1) * SUB + tl.arange(0, SUB)
    offs = blocks[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
    vmask = offs < vocab_size
    x = tl.load(target_logits_ptr + row * target_logits_stride + offs, mask=vmask, other=float("-inf"))
    y_raw = x  # unread without draft logits
    if HAS_DRAFT_LOGITS:
        # Issued with the target's load (fast's early draft load); only for a tested row (not a
        # greedy row, nor row 0 read for its target alone: its draft partials are never read).
        d_ptrs = draft_logits_ptr + slot * draft_logits_stride_0 + j.to(tl.int64) * draft_logits_stride_1 + offs
        tested = (temperature != 0.0) & (j < first)
        y_raw = tl.load(d_ptrs, mask=offs < tl.where(tested, vocab_size, 0), other=float("-inf"))
    _stats_partials(
        x,
        y_raw,
        row,
        j,
        first,
        temperature,
        blocks,
        target_local_argmax_ptr,
        partials,
        local_stride,
        num_blocks,
        HAS_DRAFT_LOGITS,
        SUB,
        BLOCK,
    )


# ---------------------------------------------------------------------------------------------
# Kernel 2: cumulative log p in fp64 (block verification)
# ---------------------------------------------------------------------------------------------


@triton.jit
def _cumulative_log_p_request(
    logits,
    requests,
    partials,
    local_stride,
    num_blocks,
    cumulative_log_p_ptr,
    row_lse_ptr,
    HAS_DRAFT_LOGITS: tl.constexpr,
    K_P2: tl.constexpr,
    NB_P2: tl.constexpr,
    req,
    PDL: tl.constexpr,
):
    # The cum_log_p kernel's program for request req.
    target_logits_ptr, target_logits_stride, draft_logits_ptr, draft_logits_stride_0, draft_logits_stride_1 = logits
    draft_sampled_ptr, cu_num_logits_ptr, idx_mapping_ptr, temperature_ptr = requests
    target_local_max_ptr, target_local_sumexp_ptr, draft_local_max_ptr, draft_local_sumexp_ptr = partials
    slot = tl.load(idx_mapping_ptr + req).to(tl.int64)
    start = tl.load(cu_num_logits_ptr + req).to(tl.int64)
    num_drafts = tl.load(cu_num_logits_ptr + req + 1).to(tl.int64) - start - 1
    temperature = tl.load(temperature_ptr + slot)
    # A greedy request writes nothing: its stores are masked off rather than the program returning
    # early, which would put every load behind the temperature's (one round more; its loads stay
    # inside the request's rows, their values unused).
    k = tl.arange(0, K_P2)
    in_req = k < num_drafts
    # (the temperature broadcast first: Triton's interpreter cannot `&` a vector with a scalar test)
    sampled_rows = in_req & (tl.zeros((K_P2,), dtype=tl.float32) + temperature != 0.0)
    rows = start + k
    nb = tl.arange(0, NB_P2)
    tile = rows[:, None] * local_stride + nb[None, :]
    tile_mask = in_req[:, None] & (nb < num_blocks)[None, :]
    raw = tl.load(draft_sampled_ptr + rows + 1, mask=in_req, other=-1).to(tl.int64)
    first_draft = tl.load(draft_sampled_ptr + start + 1, mask=num_drafts > 0, other=-1)  # d_1, same round
    token = tl.maximum(raw, 0)  # clamp: never form a pointer from -1
    x = tl.load(target_logits_ptr + rows * target_logits_stride + token, mask=in_req, other=float("-inf"))
    if HAS_DRAFT_LOGITS:
        d_ptr = draft_logits_ptr + slot * draft_logits_stride_0 + k.to(tl.int64) * draft_logits_stride_1
        y_raw = tl.load(d_ptr + token, mask=in_req, other=float("-inf"))
    _wait_for_prior(PDL)
    m_t = tl.load(target_local_max_ptr + tile, mask=tile_mask, other=float("-inf"))
    s_t = tl.load(target_local_sumexp_ptr + tile, mask=tile_mask, other=0.0)
    if HAS_DRAFT_LOGITS:
        m_d = tl.load(draft_local_max_ptr + tile, mask=tile_mask, other=float("-inf"))
        s_d = tl.load(draft_local_sumexp_ptr + tile, mask=tile_mask, other=0.0)
    if first_draft < 0:
        # first == 0: no real row, log p stays 0 on every row (what the chain below gives), no
        # LSEs kept; the partials are never waited on, no LSE tiles.
        tl.store(cumulative_log_p_ptr + rows, tl.zeros((K_P2,), dtype=tl.float64), mask=sampled_rows)
    else:
        first = tl.min(tl.where(raw >= 0, K_P2, k), 0)  # rows before the first -1 are real
        real = (k < first) & sampled_rows
        lse = _row_lses(m_t, s_t)
        lp = _finite_or_neg_inf(x.to(tl.float32)).to(tl.float64) - lse
        lq = tl.zeros((K_P2,), dtype=tl.float64)
        if HAS_DRAFT_LOGITS:
            d_lse = _row_lses(m_d, s_d)
            lq = _finite_or_neg_inf(y_raw.to(tl.float32) * _inverse(temperature)).to(tl.float64) - d_lse
            tl.store(row_lse_ptr + 2 * rows, lse, mask=real)
            tl.store(row_lse_ptr + 2 * rows + 1, d_lse, mask=real)
        log_p = tl.zeros((), dtype=tl.float64)
        out = tl.zeros((K_P2,), dtype=tl.float64)
        for i in tl.static_range(K_P2):
            log_p = tl.where(i < first, tl.minimum(log_p + _pick_row(lp, k, i) - _pick_row(lq, k, i), 0.0), log_p)
            out = tl.where(k == i, log_p, out)
        tl.store(cumulative_log_p_ptr + rows, out, mask=sampled_rows)


@triton.jit
def _cumulative_log_p_kernel(
    target_logits_ptr,
    target_logits_stride,
    draft_logits_ptr,
    draft_logits_stride_0,
    draft_logits_stride_1,
    draft_sampled_ptr,
    cu_num_logits_ptr,
    idx_mapping_ptr,
    temperature_ptr,
    target_local_max_ptr,
    target_local_sumexp_ptr,
    draft_local_max_ptr,
    draft_local_sumexp_ptr,
    local_stride,
    num_blocks,
    cumulative_log_p_ptr,
    row_lse_ptr,
    HAS_DRAFT_LOGITS: tl.constexpr,
    K_P2: tl.constexpr,
    NB_P2: tl.constexpr,
    PDL: tl.constexpr,
):
    # log p_i = min(log p_{i-1} + log M_b(X_i) - log M_s(X_i), 0), fp64, up to the first -1 (the
    # value is carried, unchanged, through it and every later row: none of them is read). With
    # draft logits each real row's two LSEs are kept for the residual-mass pass ([N, 2] fp64).
    # As in the rejection kernel, the K rows are [K_P2] vectors: every load issued before the
    # arithmetic (tokens, then the gathered logits, then -- after the wait for stats, with a
    # dependent launch -- the partials), the LSEs one [K_P2, nb] reduction; only the prefix itself
    # is a K-step chain, in the reference's order.
    logits = (target_logits_ptr, target_logits_stride, draft_logits_ptr, draft_logits_stride_0, draft_logits_stride_1)
    requests = (draft_sampled_ptr, cu_num_logits_ptr, idx_mapping_ptr, temperature_ptr)
    partials = (target_local_max_ptr, target_local_sumexp_ptr, draft_local_max_ptr, draft_local_sumexp_ptr)
    _launch_dependents(PDL)
    _cumulative_log_p_request(
        logits,
        requests,
        partials,
        local_stride,
        num_blocks,
        cumulative_log_p_ptr,
        row_lse_ptr,
        HAS_DRAFT_LOGITS,
        K_P2,
        NB_P2,
        tl.program_id(0),
        PDL,
    )


# ---------------------------------------------------------------------------------------------
# Kernel 3: residual mass (block verification with draft logits)
# ---------------------------------------------------------------------------------------------


@triton.jit
def _residual_mass_kernel(
    target_logits_ptr,
    target_logits_stride,
    draft_logits_ptr,
    draft_logits_stride_0,
    draft_logits_stride_1,
    draft_sampled_ptr,
    cumulative_log_p_ptr,
    row_lse_ptr,
    cu_num_logits_ptr,
    idx_mapping_ptr,
    temperature_ptr,
    local_residual_mass_ptr,
    local_stride,
    num_blocks,
    vocab_size,
    K_P2: tl.constexpr,
    GROUPS: tl.constexpr,
    SUB: tl.constexpr,
    BLOCK: tl.constexpr,
    PDL: tl.constexpr,
):
    # Program (req * (K-1) + j - 1, g): row j >= 1 of request req, read when d_1..d_{j+1} are real
    # (the rejection kernel reads Z_{j+1} = sum_b mass[t, b] then, and level 1 picks from these
    # masses if tau lands on row j); sampling blocks g*SUB .. g*SUB + SUB-1 as one tile.
    # Launched dependently: the row's logits load before the wait for cum_log_p, its p_j and
    # LSEs after.
    req = (tl.program_id(0) // GROUPS).to(tl.int64)
    j = 1 + tl.program_id(0) % GROUPS
    start, num_drafts, first = _request_rows(cu_num_logits_ptr, draft_sampled_ptr, req, K_P2)
    if j >= first:
        _wait_for_prior(PDL)
        return
    slot = tl.load(idx_mapping_ptr + req).to(tl.int64)
    temperature = tl.load(temperature_ptr + slot)
    if temperature == 0.0:
        _wait_for_prior(PDL)
        return
    _launch_dependents(PDL)
    row = start + j
    blocks = tl.program_id(1) * SUB + tl.arange(0, SUB)
    offs = blocks[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
    mask = offs < vocab_size
    x = tl.load(target_logits_ptr + row * target_logits_stride + offs, mask=mask, other=float("-inf"))
    d_ptr = draft_logits_ptr + slot * draft_logits_stride_0 + j.to(tl.int64) * draft_logits_stride_1
    y = tl.load(d_ptr + offs, mask=mask, other=float("-inf"))
    _wait_for_prior(PDL)
    scale = tl.exp(tl.load(cumulative_log_p_ptr + row - 1)).to(tl.float32)  # p_j
    x = _finite_or_neg_inf(x.to(tl.float32))
    y = _finite_or_neg_inf(y.to(tl.float32) * _inverse(temperature))
    r = _residual(x, y, tl.load(row_lse_ptr + 2 * row), tl.load(row_lse_ptr + 2 * row + 1), scale)
    mass = _chunked_sum(tl.where(mask, r, 0.0), SUB, BLOCK)
    tl.store(local_residual_mass_ptr + row * local_stride + blocks, mass, mask=blocks < num_blocks)


# ---------------------------------------------------------------------------------------------
# Kernel 4: rejection and the plan
# ---------------------------------------------------------------------------------------------


@triton.jit
def _reject_request(
    outputs,
    plans,
    logits,
    requests,
    pos_ptr,
    seed_ptr,
    target_local_argmax_ptr,
    partials,
    local_residual_mass_ptr,
    local_stride,
    num_blocks,
    cumulative_log_p_ptr,
    row_lse_ptr,
    synthetic_conditional_rates_ptr,
    HAS_DRAFT_LOGITS: tl.constexpr,
    SYNTHETIC_MODE: tl.constexpr,
    USE_BLOCK_VERIFICATION: tl.constexpr,
    K_P2: tl.constexpr,
    NB_P2: tl.constexpr,
    BLOCK: tl.constexpr,
    req,
    PDL: tl.constexpr,
):
    # The rejection kernel's program for request req.
    sampled_ptr, sampled_stride, num_sampled_ptr = outputs
    plan_ptr, plan_block_ptr, plan_lse_ptr, plan_scale_ptr = plans
    target_logits_ptr, target_logits_stride, draft_logits_ptr, draft_logits_stride_0, draft_logits_stride_1 = logits
    draft_sampled_ptr, cu_num_logits_ptr, idx_mapping_ptr, temperature_ptr = requests
    target_local_max_ptr, target_local_sumexp_ptr, draft_local_max_ptr, draft_local_sumexp_ptr = partials
    slot = tl.load(idx_mapping_ptr + req).to(tl.int64)
    start = tl.load(cu_num_logits_ptr + req).to(tl.int64)
    num_drafts = tl.load(cu_num_logits_ptr + req + 1).to(tl.int64) - start - 1
    temperature = tl.load(temperature_ptr + slot)
    seed = tl.load(seed_ptr + slot)
    is_greedy = temperature == 0.0
    out = sampled_ptr + req * sampled_stride
    nb = tl.arange(0, NB_P2)
    nb_mask = nb < num_blocks

    # ---- round 2: tokens and positions (each needs only the request's rows), issued with the
    # temperature's load, before the greedy branch (a greedy request's are unused)
    k = tl.arange(0, K_P2)
    in_req = k < num_drafts
    rows = start + k
    raw = tl.load(draft_sampled_ptr + rows + 1, mask=in_req, other=-1).to(tl.int64)
    # d_1 as a scalar too (same round): first == 0 (tau = 0, the plain target row) is then a
    # scalar test, taken before anything waits on the partials -- no reduction over raw needed
    first_draft = tl.load(draft_sampled_ptr + start + 1, mask=num_drafts > 0, other=-1)
    positions = tl.load(pos_ptr + rows, mask=in_req, other=0)
    if USE_BLOCK_VERIFICATION:
        has_next = k < num_drafts - 1
        nxt = tl.load(draft_sampled_ptr + rows + 2, mask=has_next, other=-1).to(tl.int64)  # d_{k+2}
    if SYNTHETIC_MODE:
        rates = tl.load(synthetic_conditional_rates_ptr + k, mask=in_req, other=0.0)
    # ---- round 3: the drafts' logits (clamped: never a pointer from -1)
    token = tl.maximum(raw, 0)
    if (not USE_BLOCK_VERIFICATION) or (not HAS_DRAFT_LOGITS):
        x_raw = tl.load(target_logits_ptr + rows * target_logits_stride + token, mask=in_req, other=float("-inf"))
    if USE_BLOCK_VERIFICATION:
        if not HAS_DRAFT_LOGITS:
            # d_{k+2}'s target logit on row k + 1 (one-hot: Z_{k+1} = p_k (1 - M_b(d)))
            x_next_raw = tl.load(
                target_logits_ptr + (rows + 1) * target_logits_stride + tl.maximum(nxt, 0),
                mask=has_next,
                other=float("-inf"),
            )
    elif HAS_DRAFT_LOGITS:
        d_ptr = draft_logits_ptr + slot * draft_logits_stride_0 + k.to(tl.int64) * draft_logits_stride_1
        y_raw = tl.load(d_ptr + token, mask=in_req, other=float("-inf"))

    # ---- round 4, once the kernel before has finished: what the earlier kernels wrote
    _wait_for_prior(PDL)
    tile = rows[:, None] * local_stride + nb[None, :]
    tile_mask = in_req[:, None] & nb_mask[None, :]
    if USE_BLOCK_VERIFICATION:
        log_p = tl.load(cumulative_log_p_ptr + rows, mask=in_req, other=0.0)
        if HAS_DRAFT_LOGITS:
            # Z_{k+1} = sum_b residual mass of row k + 1, and the [N, 2] LSEs cum_log_p kept
            next_mass = tl.load(
                local_residual_mass_ptr + tile + local_stride,
                mask=has_next[:, None] & nb_mask[None, :],
                other=0.0,
            )
            row_lse_t = tl.load(row_lse_ptr + 2 * rows, mask=in_req, other=0.0)
            row_lse_d = tl.load(row_lse_ptr + 2 * rows + 1, mask=in_req, other=0.0)
        else:
            m_t = tl.load(target_local_max_ptr + tile, mask=tile_mask, other=float("-inf"))
            s_t = tl.load(target_local_sumexp_ptr + tile, mask=tile_mask, other=0.0)
    else:
        m_t = tl.load(target_local_max_ptr + tile, mask=tile_mask, other=float("-inf"))
        s_t = tl.load(target_local_sumexp_ptr + tile, mask=tile_mask, other=0.0)
        if HAS_DRAFT_LOGITS:
            m_d = tl.load(draft_local_max_ptr + tile, mask=tile_mask, other=float("-inf"))
            s_d = tl.load(draft_local_sumexp_ptr + tile, mask=tile_mask, other=0.0)
    if is_greedy:
        tau = tl.zeros((), dtype=tl.int64)
        verifying = tl.full((), 1, dtype=tl.int1)
        for step in range(0, num_drafts):
            row = start + step
            draft = tl.load(draft_sampled_ptr + row + 1).to(tl.int64)
            draft_token = tl.maximum(draft, 0)  # clamp: never form a pointer from -1
            # mrv2's greedy path: not short-circuited at a -1, where it stores the argmax.
            if verifying:
                best = _global_argmax(
                    target_local_argmax_ptr, target_local_max_ptr, row, local_stride, num_blocks, NB_P2
                )
                if SYNTHETIC_MODE:
                    accepted = _uniform(seed, tl.load(pos_ptr + row)) < tl.load(synthetic_conditional_rates_ptr + step)
                else:
                    accepted = best == draft_token
                accepted = accepted & (draft >= 0)
                tl.store(out + step, tl.where(accepted, draft_token, best))
                tau += accepted.to(tl.int64)
                verifying = accepted
        tl.store(num_sampled_ptr + req, tau.to(tl.int32))
        tl.store(plan_ptr + req, tl.where(tau == num_drafts, PLAN_ARGMAX, PLAN_DONE).to(tl.int32))
    elif first_draft < 0:
        # d_1 is a placeholder (or there is no draft): tau = 0, nothing accepted, and row c_r's
        # token is drawn from the plain target. The stats kernel read that row (_stats_rows), so
        # level 1 is here, over the log-masses m_b + log s_b of its partials (what the resample
        # pass would store for the row); no LSE tiles. The partials and gathered logits loaded
        # above (rows of drafts, none tested) are unused.
        row_0 = start * local_stride + nb
        m_0 = tl.load(target_local_max_ptr + row_0, mask=nb_mask, other=float("-inf"))
        s_0 = tl.load(target_local_sumexp_ptr + row_0, mask=nb_mask, other=0.0)
        log_mass = m_0.to(tl.float64) + tl.log(s_0)
        big = tl.max(log_mass, 0)
        w = tl.where(log_mass == float("-inf"), 0.0, tl.exp(log_mass - big))
        b, _ = _pick(w, _row_uniform(seed, tl.load(pos_ptr + start)), NB_P2)
        tl.store(plan_block_ptr + req, b.to(tl.int32))
        tl.store(num_sampled_ptr + req, 0)
        tl.store(plan_ptr + req, PLAN_TARGET_DRAWN)
    else:
        if (not USE_BLOCK_VERIFICATION) or (not HAS_DRAFT_LOGITS):
            x = _finite_or_neg_inf(x_raw.to(tl.float32))
        if USE_BLOCK_VERIFICATION:
            if not HAS_DRAFT_LOGITS:
                x_next = _finite_or_neg_inf(x_next_raw.to(tl.float32))

        # ---- arithmetic: every step at once
        u32 = _uniform(seed, positions)
        valid = raw >= 0  # false past the request's drafts too (other=-1)
        first = tl.min(tl.where(valid, K_P2, k), 0)  # the first -1 (or past the drafts): the test stops there
        if USE_BLOCK_VERIFICATION:
            # Sun et al.: tau = max{i+1 : u_i <= h_i} over the steps before the first -1, in fp64
            pi = tl.exp(log_p)
            if HAS_DRAFT_LOGITS:
                z = tl.sum(next_mass, 1)
            else:
                lse = _row_lses(m_t, s_t)
                # L_{k+1}: the next row's LSE, a [K_P2] shift (a select, not a reload)
                lse_next = tl.sum(tl.where(k[None, :] == k[:, None] + 1, lse[None, :], 0.0), 1)
                z = pi * (1.0 - tl.exp(x_next.to(tl.float64) - lse_next))
            denom = z + 1.0 - pi
            h = tl.where(nxt >= 0, tl.where(denom > 0.0, z / denom, 1.0), pi)  # else the block's end: h = p_gamma
            hit = (k < first) & (u32.to(tl.float64) <= h)
            tau = tl.max(tl.where(hit, k + 1, 0), 0).to(tl.int64)
            tl.store(out + k, token, mask=k < first)
        else:
            # Leviathan et al.: accept iff log p(d) > log u + log q(d) (strict), in fp64
            lse = _row_lses(m_t, s_t)
            lp = x.to(tl.float64) - lse
            lq = tl.zeros((K_P2,), dtype=tl.float64)
            if HAS_DRAFT_LOGITS:
                d_lse = _row_lses(m_d, s_d)
                y = _finite_or_neg_inf(y_raw.to(tl.float32) * _inverse(temperature))
                lq = y.to(tl.float64) - d_lse
            if SYNTHETIC_MODE:
                accepted = u32 < rates
            else:
                accepted = lp > tl.log(u32.to(tl.float64)) + lq
            accepted = accepted & valid
            tau = tl.min(tl.where(accepted, K_P2, k), 0).to(tl.int64)  # the first rejection, or the first -1
            tl.store(out + k, token, mask=(k <= tau) & valid)  # the rejected draft too (the insert overwrites it)
        tl.store(num_sampled_ptr + req, tau.to(tl.int32))

        # ---- the plan for row c_r + tau, from the vectors above
        rejected = tl.max(tl.where(k == tau, raw, -1), 0)  # -1: a placeholder, or the bonus row (tau = n)
        plan = tl.full((), PLAN_TARGET, tl.int32)  # bonus row, or a placeholder: the plain target
        if rejected >= 0:
            u_row = _row_uniform(seed, _pick_row(positions, k, tau))
            if HAS_DRAFT_LOGITS:
                # max(p_tau p - q, 0) at row tau (p_tau = 1 outside block verification and at tau = 0)
                plan = tl.full((), PLAN_RESIDUAL, tl.int32)
                scale = tl.full((), 1.0, tl.float32)
                if USE_BLOCK_VERIFICATION:
                    if tau > 0:
                        # the residual-mass pass has this row's block masses: level 1 here
                        plan = tl.full((), PLAN_BLOCK_RESIDUAL, tl.int32)
                        scale = _pick_row(pi, k, tau - 1).to(tl.float32)
                        w = tl.sum(tl.where(k[:, None] == tau - 1, next_mass, 0.0), 0)
                        b, _ = _pick(w, u_row, NB_P2)
                        tl.store(plan_block_ptr + req, b.to(tl.int32))
                    tau_lse = _pick_row(row_lse_t, k, tau)
                    tau_d_lse = _pick_row(row_lse_d, k, tau)
                else:
                    tau_lse = _pick_row(lse, k, tau)
                    tau_d_lse = _pick_row(d_lse, k, tau)
                tl.store(plan_scale_ptr + req, scale)
                tl.store(plan_lse_ptr + 2 * req, tau_lse)
                tl.store(plan_lse_ptr + 2 * req + 1, tau_d_lse)
            else:
                # One-hot residual p(x) [x != d] (p_tau cancels under block verification): block
                # masses are the stats partials of row tau (in the tile), less d's own term in
                # d's block; level 1 here.
                plan = tl.full((), PLAN_ONE_HOT, tl.int32)
                at_tau = k[:, None] == tau
                m32 = tl.max(tl.where(at_tau, m_t, float("-inf")), 0)
                s = tl.sum(tl.where(at_tau, s_t, 0.0), 0)
                d_block = rejected // BLOCK
                x_d = _pick_row(x, k, tau)
                d_max = tl.max(tl.where(nb == d_block, m32, float("-inf")), 0)
                e_d = tl.where(x_d == float("-inf"), 0.0, tl.exp(x_d - d_max)).to(tl.float64)
                s = tl.where(nb == d_block, tl.maximum(s - e_d, 0.0), s)
                m = m32.to(tl.float64)
                big = tl.max(m, 0)
                w = tl.where(m == float("-inf"), 0.0, s * tl.exp(m - big))
                b, _ = _pick(w, u_row, NB_P2)
                tl.store(plan_block_ptr + req, b.to(tl.int32))
        tl.store(plan_ptr + req, plan)


@triton.jit
def _rejection_kernel(
    sampled_ptr,
    sampled_stride,
    num_sampled_ptr,
    plan_ptr,
    plan_block_ptr,
    plan_lse_ptr,
    plan_scale_ptr,
    target_logits_ptr,
    target_logits_stride,
    draft_logits_ptr,
    draft_logits_stride_0,
    draft_logits_stride_1,
    draft_sampled_ptr,
    pos_ptr,
    cu_num_logits_ptr,
    idx_mapping_ptr,
    temperature_ptr,
    seed_ptr,
    target_local_argmax_ptr,
    target_local_max_ptr,
    target_local_sumexp_ptr,
    draft_local_max_ptr,
    draft_local_sumexp_ptr,
    local_residual_mass_ptr,
    local_stride,
    num_blocks,
    cumulative_log_p_ptr,
    row_lse_ptr,
    synthetic_conditional_rates_ptr,
    HAS_DRAFT_LOGITS: tl.constexpr,
    SYNTHETIC_MODE: tl.constexpr,
    USE_BLOCK_VERIFICATION: tl.constexpr,
    K_P2: tl.constexpr,
    NB_P2: tl.constexpr,
    BLOCK: tl.constexpr,
    PDL: tl.constexpr,
):
    # One program per request. A sampled request tests its K drafts as [K_P2] vectors, not step
    # by step: every load the test needs is issued before any arithmetic (ptxas does not hoist a
    # load above the branches of libdevice's fp64 exp / log or of a warp shuffle, so a load after
    # a reduction costs a dependent memory round of its own), four rounds in all -- the request's
    # rows; the tokens and positions; the gathered logits; after the wait for the kernel before
    # (dependent launch), its [K_P2, nb] partials -- and the fp64 LSEs of all K rows are one
    # [K_P2, nb] reduction over the program's warps. The first three rounds read the call's
    # inputs only, so with a dependent launch they overlap the kernel before. The plan reuses
    # the rejected row's LSEs, partials and logits (selected from the vectors, no reload). Steps
    # past a rejection are computed and thrown away: no load past the request's rows, and only
    # the acceptance test's arithmetic, which is what a [K_P2] vector costs anyway.
    outputs = (sampled_ptr, sampled_stride, num_sampled_ptr)
    plans = (plan_ptr, plan_block_ptr, plan_lse_ptr, plan_scale_ptr)
    logits = (target_logits_ptr, target_logits_stride, draft_logits_ptr, draft_logits_stride_0, draft_logits_stride_1)
    requests = (draft_sampled_ptr, cu_num_logits_ptr, idx_mapping_ptr, temperature_ptr)
    partials = (target_local_max_ptr, target_local_sumexp_ptr, draft_local_max_ptr, draft_local_sumexp_ptr)
    _launch_dependents(PDL)
    _reject_request(
        outputs,
        plans,
        logits,
        requests,
        pos_ptr,
        seed_ptr,
        target_local_argmax_ptr,
        partials,
        local_residual_mass_ptr,
        local_stride,
        num_blocks,
        cumulative_log_p_ptr,
        row_lse_ptr,
        synthetic_conditional_rates_ptr,
        HAS_DRAFT_LOGITS,
        SYNTHETIC_MODE,
        USE_BLOCK_VERIFICATION,
        K_P2,
        NB_P2,
        BLOCK,
        tl.program_id(0).to(tl.int64),
        PDL,
    )


# ---------------------------------------------------------------------------------------------
# Kernel 5: resample -- block masses of the rows whose masses are not known yet
# ---------------------------------------------------------------------------------------------


@triton.jit
def _resample_kernel(
    sampled_ptr,
    sampled_stride,
    resampled_mass_ptr,
    resampled_argmax_ptr,
    resampled_stride,
    num_blocks,
    num_sampled_ptr,
    plan_ptr,
    plan_block_ptr,
    plan_lse_ptr,
    plan_scale_ptr,
    target_logits_ptr,
    target_logits_stride,
    draft_logits_ptr,
    draft_logits_stride_0,
    draft_logits_stride_1,
    draft_sampled_ptr,
    pos_ptr,
    cu_num_logits_ptr,
    idx_mapping_ptr,
    temperature_ptr,
    seed_ptr,
    vocab_size,
    HAS_DRAFT_LOGITS: tl.constexpr,
    FUSED_INSERT: tl.constexpr,
    NUM_PROGRAMS: tl.constexpr,
    SUB: tl.constexpr,
    NB_P2: tl.constexpr,
    BLOCK: tl.constexpr,
    PDL: tl.constexpr,
):
    # Program (r, g): sampling blocks g*SUB .. g*SUB + SUB-1 of request r's row c_r + tau, for the
    # plans whose block masses are not known yet: log-masses of softmax(target) (bonus /
    # placeholder row) or of max(p - q, 0) (draft residual), or the block argmaxes of a greedy
    # bonus row, into [R, nb]. With FUSED_INSERT the request's last program to finish then does
    # the insert kernel's work: each program counts itself done in num_sampled's high 16 bits
    # (tau stays in the low 16), as fast does. Launched dependently: the request's slot and first
    # row (call inputs) load before the wait for the rejection kernel's plan.
    resampled = (resampled_mass_ptr, resampled_argmax_ptr)
    logits = (target_logits_ptr, target_logits_stride, draft_logits_ptr, draft_logits_stride_0, draft_logits_stride_1)
    outputs = (sampled_ptr, sampled_stride, num_sampled_ptr)
    plans = (plan_ptr, plan_block_ptr, plan_lse_ptr, plan_scale_ptr)
    requests = (draft_sampled_ptr, cu_num_logits_ptr, idx_mapping_ptr, temperature_ptr)
    req = tl.program_id(0).to(tl.int64)
    slot = tl.load(idx_mapping_ptr + req).to(tl.int64)
    start = tl.load(cu_num_logits_ptr + req).to(tl.int64)
    _wait_for_prior(PDL)
    plan = tl.load(plan_ptr + req)
    tau = tl.load(num_sampled_ptr + req)
    if FUSED_INSERT:
        tau = tau & 0xFFFF
    tau = tau.to(tl.int64)
    if _needs_row_pass(plan):
        _launch_dependents(PDL)
        _block_masses(
            resampled,
            req * resampled_stride,
            num_blocks,
            plan_lse_ptr,
            logits,
            temperature_ptr,
            vocab_size,
            req,
            slot,
            start + tau,
            plan,
            tau,
            tl.program_id(1),
            HAS_DRAFT_LOGITS,
            SUB,
            BLOCK,
        )
    if FUSED_INSERT:
        # The barrier puts every thread's stores before the (release) count; the program that
        # sees NUM_PROGRAMS - 1 done before it (acquire) reads their partials past L1 (.cg).
        tl.debug_barrier()
        done_before = tl.atomic_add(num_sampled_ptr + req, 1 << 16, sem="acq_rel") >> 16
        tl.debug_barrier()
        if done_before == NUM_PROGRAMS - 1:
            _insert_request(
                outputs,
                plans,
                resampled,
                req * resampled_stride,
                num_blocks,
                logits,
                requests,
                pos_ptr,
                seed_ptr,
                vocab_size,
                req,
                slot,
                start,
                plan,
                tau,
                HAS_DRAFT_LOGITS,
                NB_P2,
                BLOCK,
                ".cg",
            )


@triton.jit
def _resample_persistent_kernel(
    resampled_mass_ptr,
    resampled_argmax_ptr,
    resampled_stride,
    num_blocks,
    num_sampled_ptr,
    plan_ptr,
    plan_lse_ptr,
    target_logits_ptr,
    target_logits_stride,
    draft_logits_ptr,
    draft_logits_stride_0,
    draft_logits_stride_1,
    cu_num_logits_ptr,
    idx_mapping_ptr,
    temperature_ptr,
    vocab_size,
    num_reqs,
    TILES: tl.constexpr,
    R_P2: tl.constexpr,
    HAS_DRAFT_LOGITS: tl.constexpr,
    SUB: tl.constexpr,
    BLOCK: tl.constexpr,
    PDL: tl.constexpr,
):
    # The resample pass as a fixed grid of programs (as many as fit on the GPU at once, at most
    # Config.resample_programs an SM), looping over the tiles of the requests whose plan needs a
    # row pass: the (R, TILES) grid launches a program for every tile, and for greedy and
    # one-hot batches, where few requests need the pass, nearly all of them only exit (7.3 us of
    # 9,600 programs at R = 128). Every program reads the R plans and
    # lists the requests with work (in request order); tile f of that list (request e = f //
    # TILES, tile f % TILES of its row) goes to program f mod G, so the programs at work at
    # once read consecutive tiles as the grid's do, and every program has the grid's latency
    # chain per tile (its tiles are one after another; the grid's concurrency comes from G being
    # as many programs as fit). A run of consecutive tiles a program instead leaves programs
    # idle and cost 50% where rows are read. Even so a program's tiles
    # one after another read rows 29-32% slower than the grid's programs (draft-logits
    # residuals, H200): so the pipeline runs it for one-hot drafts only, whose pass reads only
    # the bonus / placeholder rows of the requests that accepted every draft. The same tiles by
    # the same _block_masses: the same values.
    resampled = (resampled_mass_ptr, resampled_argmax_ptr)
    logits = (target_logits_ptr, target_logits_stride, draft_logits_ptr, draft_logits_stride_0, draft_logits_stride_1)
    _wait_for_prior(PDL)
    r = tl.arange(0, R_P2)
    work = _needs_row_pass(tl.load(plan_ptr + r, mask=r < num_reqs, other=PLAN_DONE)).to(tl.int32)
    total = tl.sum(work, 0) * TILES
    if tl.program_id(0) < total:
        _launch_dependents(PDL)
        done_before = tl.cumsum(work, 0)  # requests with work up to and including r
        for f in range(tl.program_id(0), total, tl.num_programs(0)):
            e = f // TILES
            req = tl.sum((done_before <= e).to(tl.int32), 0).to(tl.int64)  # the (e + 1)-th with work
            tau = tl.load(num_sampled_ptr + req).to(tl.int64)
            _block_masses(
                resampled,
                req * resampled_stride,
                num_blocks,
                plan_lse_ptr,
                logits,
                temperature_ptr,
                vocab_size,
                req,
                tl.load(idx_mapping_ptr + req).to(tl.int64),
                tl.load(cu_num_logits_ptr + req).to(tl.int64) + tau,
                tl.load(plan_ptr + req),
                tau,
                f - e * TILES,
                HAS_DRAFT_LOGITS,
                SUB,
                BLOCK,
            )


@triton.jit
def _block_masses(
    resampled,
    base,
    num_blocks,
    plan_lse_ptr,
    logits,
    temperature_ptr,
    vocab_size,
    req,
    slot,
    row,
    plan,
    tau,
    tile,
    HAS_DRAFT_LOGITS: tl.constexpr,
    SUB: tl.constexpr,
    BLOCK: tl.constexpr,
):
    # Tile ``tile`` ([SUB, BLOCK]) of the resample row ``row`` (request req's c_r + tau, its slot
    # ``slot``): per sampling block its log-mass (fp64) or, for a greedy bonus row, its max and
    # first argmax, at [R, nb] offset ``base``.
    # Every load comes before any use, and every use is inside the plan's branch: ptxas issues a
    # load at the end of the block before its first use, so with the target's log-mass computed
    # before the branch, the draft tile would load only once the target's had arrived, and the
    # temperature and LSEs once both had: 6 dependent load rounds a program instead of 3 (sm_90
    # SASS; H200, R = 128, standard phi = 0: the pass 40.7 us instead of 32.3).
    resampled_mass_ptr, resampled_argmax_ptr = resampled
    target_logits_ptr, target_logits_stride, draft_logits_ptr, draft_logits_stride_0, draft_logits_stride_1 = logits
    blocks = tile * SUB + tl.arange(0, SUB)
    offs = blocks[:, None] * BLOCK + tl.arange(0, BLOCK)[None, :]
    mask = offs < vocab_size
    bmask = blocks < num_blocks
    x_raw = tl.load(target_logits_ptr + row * target_logits_stride + offs, mask=mask, other=float("-inf"))
    if HAS_DRAFT_LOGITS:
        residual = plan == PLAN_RESIDUAL
        d_ptr = draft_logits_ptr + slot * draft_logits_stride_0 + tau * draft_logits_stride_1
        y_raw = tl.load(d_ptr + offs, mask=offs < tl.where(residual, vocab_size, 0), other=float("-inf"))
        temperature = tl.load(temperature_ptr + slot)
        target_lse = tl.load(plan_lse_ptr + 2 * req)
        draft_lse = tl.load(plan_lse_ptr + 2 * req + 1)
    if plan == PLAN_ARGMAX:
        x = _finite_or_neg_inf(x_raw.to(tl.float32))
        value = tl.max(x, 1)
        index = _first_index_of(x, value, BLOCK)
        tl.store(resampled_mass_ptr + base + blocks, value.to(tl.float64), mask=bmask)
        tl.store(resampled_argmax_ptr + base + blocks, blocks.to(tl.int64) * BLOCK + index.to(tl.int64), mask=bmask)
    elif HAS_DRAFT_LOGITS and residual:
        x = _finite_or_neg_inf(x_raw.to(tl.float32))
        y = _finite_or_neg_inf(y_raw.to(tl.float32) * _inverse(temperature))
        r = _residual(x, y, target_lse, draft_lse, 1.0)
        log_mass = tl.log(_chunked_sum(tl.where(mask, r, 0.0), SUB, BLOCK))  # -inf: an empty block
        tl.store(resampled_mass_ptr + base + blocks, log_mass, mask=bmask)
    else:
        x = _finite_or_neg_inf(x_raw.to(tl.float32))
        block_max = tl.max(x, 1)
        e = tl.where(x == float("-inf"), 0.0, tl.exp(x - block_max[:, None]))
        log_mass = block_max.to(tl.float64) + tl.log(_chunked_sum(e, SUB, BLOCK))
        tl.store(resampled_mass_ptr + base + blocks, log_mass, mask=bmask)


# ---------------------------------------------------------------------------------------------
# Kernel 6: insert -- level 1 where not drawn yet, level 2 in the chosen block
# ---------------------------------------------------------------------------------------------


@triton.jit
def _insert_kernel(
    sampled_ptr,
    sampled_stride,
    num_sampled_ptr,
    plan_ptr,
    plan_block_ptr,
    plan_lse_ptr,
    plan_scale_ptr,
    resampled_mass_ptr,
    resampled_argmax_ptr,
    resampled_stride,
    num_blocks,
    target_logits_ptr,
    target_logits_stride,
    draft_logits_ptr,
    draft_logits_stride_0,
    draft_logits_stride_1,
    draft_sampled_ptr,
    pos_ptr,
    cu_num_logits_ptr,
    idx_mapping_ptr,
    temperature_ptr,
    seed_ptr,
    vocab_size,
    HAS_DRAFT_LOGITS: tl.constexpr,
    NB_P2: tl.constexpr,
    BLOCK: tl.constexpr,
    PDL: tl.constexpr,
):
    outputs = (sampled_ptr, sampled_stride, num_sampled_ptr)
    plans = (plan_ptr, plan_block_ptr, plan_lse_ptr, plan_scale_ptr)
    resampled = (resampled_mass_ptr, resampled_argmax_ptr)
    logits = (target_logits_ptr, target_logits_stride, draft_logits_ptr, draft_logits_stride_0, draft_logits_stride_1)
    requests = (draft_sampled_ptr, cu_num_logits_ptr, idx_mapping_ptr, temperature_ptr)
    _launch_dependents(PDL)
    req = tl.program_id(0).to(tl.int64)
    # the request's slot and first row (call inputs) before the wait: one dependent round fewer
    # after it, on the call's last kernel
    slot = tl.load(idx_mapping_ptr + req).to(tl.int64)
    start = tl.load(cu_num_logits_ptr + req).to(tl.int64)
    _wait_for_prior(PDL)
    _insert_request(
        outputs,
        plans,
        resampled,
        req * resampled_stride,
        num_blocks,
        logits,
        requests,
        pos_ptr,
        seed_ptr,
        vocab_size,
        req,
        slot,
        start,
        tl.load(plan_ptr + req),
        tl.load(num_sampled_ptr + req).to(tl.int64),
        HAS_DRAFT_LOGITS,
        NB_P2,
        BLOCK,
        "",
    )


@triton.jit
def _target_weights(x, offs, plan, rejected):
    # Level-2 weights of softmax(target) in one block (fp32 logits x, NaN as -inf): exp(x - block
    # max), 0 at -inf, less the rejected draft for a one-hot residual.
    x = _finite_or_neg_inf(x)
    block_max = tl.max(tl.max(x, 1), 0)
    r = tl.where(x == float("-inf"), 0.0, tl.exp(x - block_max))
    if plan == PLAN_ONE_HOT:
        r = tl.where(offs == rejected, 0.0, r)  # the rejected draft
    return r


@triton.jit
def _insert_request(
    outputs,
    plans,
    resampled,
    base,
    num_blocks,
    logits,
    requests,
    pos_ptr,
    seed_ptr,
    vocab_size,
    req,
    slot,
    start,
    plan,
    tau,
    HAS_DRAFT_LOGITS: tl.constexpr,
    NB_P2: tl.constexpr,
    BLOCK: tl.constexpr,
    CACHE: tl.constexpr,
):
    # The token of row c_r + tau, then num_sampled = tau + 1. Greedy bonus row: the first block
    # whose max is largest (NaN as -inf), its argmax. Sampled plans: level 1 over the resample
    # pass's log-masses (target, residual) unless the rejection kernel drew it (one-hot, block
    # residual), then level 2 inside that block, read again (8 KB of target, 4 KB of bf16 draft).
    sampled_ptr, sampled_stride, num_sampled_ptr = outputs
    plan_ptr, plan_block_ptr, plan_lse_ptr, plan_scale_ptr = plans
    resampled_mass_ptr, resampled_argmax_ptr = resampled
    target_logits_ptr, target_logits_stride, draft_logits_ptr, draft_logits_stride_0, draft_logits_stride_1 = logits
    draft_sampled_ptr, cu_num_logits_ptr, idx_mapping_ptr, temperature_ptr = requests
    if plan == PLAN_ARGMAX:
        token = _resampled_token(resampled_argmax_ptr, resampled_mass_ptr, base, num_blocks, NB_P2, CACHE)
        tl.store(sampled_ptr + req * sampled_stride + tau, token)
    elif plan != PLAN_DONE:
        # Every load is issued as soon as its address is known, before any reduction (ptxas does
        # not hoist a load above a shuffle or libdevice's branches): the log-masses, the plan's
        # values, the seed, position, temperature and rejected draft (the slot and first row
        # come in, loaded by the caller before its dependent-launch wait); then, once level 1 has
        # picked the block, the block's target and draft logits together.
        level_1_here = (plan == PLAN_TARGET) | (plan == PLAN_RESIDUAL)
        draft_residual = (plan == PLAN_RESIDUAL) | (plan == PLAN_BLOCK_RESIDUAL)
        row = start + tau
        nb = tl.arange(0, NB_P2)
        log_mass = tl.load(
            resampled_mass_ptr + base + nb,
            mask=(nb < num_blocks) & level_1_here,
            other=float("-inf"),
            cache_modifier=CACHE,
        )
        early_block = tl.load(
            plan_block_ptr + req,
            mask=(plan == PLAN_ONE_HOT) | (plan == PLAN_BLOCK_RESIDUAL) | (plan == PLAN_TARGET_DRAWN),
            other=0,
        )
        if HAS_DRAFT_LOGITS:
            scale = tl.load(plan_scale_ptr + req, mask=draft_residual, other=1.0)
            target_lse = tl.load(plan_lse_ptr + 2 * req, mask=draft_residual, other=0.0)
            draft_lse = tl.load(plan_lse_ptr + 2 * req + 1, mask=draft_residual, other=0.0)
            temperature = tl.load(temperature_ptr + slot)
        seed = tl.load(seed_ptr + slot)
        position = tl.load(pos_ptr + row)
        # the rejected draft (one-hot); row + 1 is past the batch for the last request's bonus row
        rejected = tl.load(draft_sampled_ptr + row + 1, mask=plan == PLAN_ONE_HOT, other=-1)
        if level_1_here:
            big = tl.max(log_mass, 0)
            w = tl.where(log_mass == float("-inf"), 0.0, tl.exp(log_mass - big))
            block, _ = _pick(w, _row_uniform(seed, position), NB_P2)
        else:
            block = early_block
        # ---- level 2: the chosen block's weights, recomputed, as [chunks, CHUNK]
        offs = _chunk_offsets(block, BLOCK // CHUNK, CHUNK)
        mask = offs < vocab_size
        x = tl.load(target_logits_ptr + row * target_logits_stride + offs, mask=mask, other=float("-inf"))
        if HAS_DRAFT_LOGITS:
            d_ptr = draft_logits_ptr + slot * draft_logits_stride_0 + tau * draft_logits_stride_1
            y_raw = tl.load(d_ptr + offs, mask=mask & draft_residual, other=float("-inf"))
        x = x.to(tl.float32)
        # A draft residual's weights need neither the block max nor exp(x - max): one cross-warp
        # reduction and an exp per entry fewer on that path. Nor NaN -> -inf on x: a NaN target
        # logit gives p = NaN, r = NaN and max(r, 0) = 0, as -inf gives p = 0, r = -q <= 0 and 0.
        # (With that select right after the loads, ptxas issued the block's four 16-byte target
        # loads one after another, each waiting for the last: three dependent rounds more.)
        if HAS_DRAFT_LOGITS:
            if draft_residual:
                y = _finite_or_neg_inf(y_raw.to(tl.float32) * _inverse(temperature))
                r = tl.where(mask, _residual(x, y, target_lse, draft_lse, scale), 0.0)
            else:
                r = _target_weights(x, offs, plan, rejected)
        else:
            r = _target_weights(x, offs, plan, rejected)
        index, _ = _sample_block(r, _block_uniform(seed, position, block), BLOCK // CHUNK, CHUNK)
        tl.store(sampled_ptr + req * sampled_stride + tau, block.to(tl.int64) * BLOCK + index.to(tl.int64))
    tl.store(num_sampled_ptr + req, (tau + 1).to(tl.int32))


# ---------------------------------------------------------------------------------------------
# Launcher
# ---------------------------------------------------------------------------------------------


class Pipeline:
    """One ``express`` call, split into its kernel launches (``mrv2.Pipeline``'s interface).

    ``__init__`` allocates the outputs and every scratch buffer; :meth:`stages` lists the
    launches in order as ``(name, zero-argument callable)`` so that each kernel can be timed on
    its own (``specsample.measure.stage_calls``: every stage but the last is idempotent, and the
    last -- ``insert``, or ``resample`` with ``Config.fused_insert`` -- turns ``num_sampled`` from
    tau into tau + 1); :meth:`run` launches them all.
    Inputs must already have been checked by :mod:`specsample.validation`. ``config`` changes
    launch geometry only, never a draw (default: :func:`default_config` for the batch's R).
    """

    def __init__(
        self,
        target_logits: torch.Tensor,  # [N, V]
        draft_logits: torch.Tensor | None,  # [max_num_reqs, K, V_d]
        draft_sampled: torch.Tensor,  # [N]
        cu_num_logits: torch.Tensor,  # [R + 1]
        pos: torch.Tensor,  # [N]
        idx_mapping: torch.Tensor,  # [R]
        expanded_idx_mapping: torch.Tensor,  # [N]
        expanded_local_pos: torch.Tensor,  # [N]
        temperature: torch.Tensor,  # [max_num_reqs]
        seed: torch.Tensor,  # [max_num_reqs]
        num_speculative_steps: int,
        synthetic_conditional_rates: torch.Tensor | None = None,  # [K]
        use_fp64: bool = False,
        use_block_verification: bool = False,
        *,
        config: Config | None = None,
    ) -> None:
        del expanded_idx_mapping, expanded_local_pos, use_fp64  # implied by cu_num_logits; no effect
        self.target_logits, self.draft_logits, self.draft_sampled = target_logits, draft_logits, draft_sampled
        self.cu_num_logits, self.pos, self.idx_mapping = cu_num_logits, pos, idx_mapping
        self.temperature, self.seed, self.k = temperature, seed, num_speculative_steps
        self.use_block_verification = use_block_verification
        self.num_logits, vocab_size = target_logits.shape
        self.num_reqs = idx_mapping.shape[0]
        self.has_draft_logits = draft_logits is not None
        if self.has_draft_logits:
            vocab_size = min(vocab_size, draft_logits.shape[-1])
        self.vocab_size = vocab_size
        self.synthetic = synthetic_conditional_rates is not None
        device = target_logits.device
        # Programmatic dependent launch needs sm_90 (Hopper) or later; on CPU (Triton's
        # interpreter) and older GPUs the kernels run in plain stream order, the same draws.
        self.dependent_launch = supports_dependent_launch(device)
        self.config = config or default_config(self.num_reqs, self.dependent_launch)
        if self.config.fused_insert and (triton.cdiv(vocab_size, SAMPLE_BLOCK) >= 1 << 15 or self.k >= 1 << 15):
            # the fused insert counts programs in num_sampled's high 16 bits, tau in the low ones
            raise ValueError(f"express: V={vocab_size} or K={self.k} is too large for Config.fused_insert")

        self.num_blocks = triton.cdiv(vocab_size, SAMPLE_BLOCK)
        self.nb_p2 = triton.next_power_of_2(self.num_blocks)
        self.k_p2 = triton.next_power_of_2(max(self.k, 1))
        self.stats_tiles = triton.cdiv(self.num_blocks, self.config.stats_blocks)
        self.resample_tiles = triton.cdiv(self.num_blocks, RESAMPLE_BLOCKS)
        n, nb, r = self.num_logits, self.num_blocks, self.num_reqs
        f32 = dict(dtype=torch.float32, device=device)
        f64 = dict(dtype=torch.float64, device=device)
        i64 = dict(dtype=torch.int64, device=device)

        # ---- [N, nb] partials per sampling block
        self.target_local_argmax = torch.empty(n, nb, **i64)
        self.target_local_max = torch.empty(n, nb, **f32)
        self.target_local_sumexp = torch.empty(n, nb, **f64)
        if self.has_draft_logits:
            self.draft_local_max = torch.empty(n, nb, **f32)
            self.draft_local_sumexp = torch.empty(n, nb, **f64)
            self.draft_strides = (draft_logits.stride(0), draft_logits.stride(1))
            self.draft_arg = draft_logits
        else:
            # An absent tensor gets zero strides; HAS_DRAFT_LOGITS=False keeps it unread.
            self.draft_local_max, self.draft_local_sumexp = self.target_local_max, self.target_local_sumexp
            self.draft_strides = (0, 0)
            self.draft_arg = target_logits
        self.cumulative_log_p = torch.empty(n if use_block_verification else 1, **f64)
        residual = use_block_verification and self.has_draft_logits
        self.row_lse = torch.empty(n if residual else 1, 2, **f64)  # each real row's (L_t, L_d)
        self.local_residual_mass = torch.empty(n, nb, **f64) if residual else self.target_local_sumexp
        self.rates = synthetic_conditional_rates if self.synthetic else temperature

        # ---- [R] plans, [R, nb] resample partials
        self.plan = torch.empty(r, dtype=torch.int32, device=device)
        self.plan_block = torch.empty(r, dtype=torch.int32, device=device)  # level-1 block, where drawn early
        self.plan_lse = torch.empty(r, 2, **f64)  # (L_t, L_d) of a draft-residual row
        self.plan_scale = torch.empty(r, **f32)  # p_tau of a draft-residual row
        self.resampled_mass = torch.empty(r, nb, **f64)  # log-masses, or block maxima (greedy bonus row)
        self.resampled_argmax = torch.empty(r, nb, **i64)

        # ---- outputs
        self.sampled = torch.empty(r, self.k + 1, **i64)
        self.num_sampled = torch.empty(r, dtype=torch.int32, device=device)

        # The resample pass: persistent (this many programs) with one-hot drafts where the (R,
        # tiles) grid would be larger than the programs that fit on the GPU at once, else the grid (0).
        self.resample_persistent_programs = self._persistent_resample_programs()

    def _persistent_resample_programs(self) -> int:
        """``Config.resample_programs`` programs an SM (fewer on a GPU where fewer fit at once, by
        the compiled kernel's registers and shared memory), times the SMs; 0 (the grid) where
        that is not fewer than the grid's programs, with draft logits, or past
        :data:`PERSISTENT_MAX_REQS` requests."""
        c = self.config
        if not c.resample_programs or self.has_draft_logits or self.num_reqs > PERSISTENT_MAX_REQS:
            return 0
        device = self.target_logits.device
        per_sm = c.resample_programs
        if device.type == "cuda":
            compiled = _resample_persistent_kernel.warmup(**self._resample_persistent_args(), grid=(1,))
            per_sm = min(per_sm, _programs_per_multiprocessor(compiled, TILE_WARPS, device))
        programs = per_sm * _multiprocessors(device)
        return programs if programs < self.num_reqs * self.resample_tiles else 0

    def stages(self) -> list[tuple[str, Callable[[], None]]]:
        """The kernel launches of one call, in order (names from ``specsample.schema.STAGES``)."""
        if self.num_reqs == 0:
            return []
        stages = [("stats", self._stats)]
        if self.use_block_verification:
            stages.append(("cum_log_p", self._cumulative_log_p))
            if self.has_draft_logits and self.k > 1:
                stages.append(("residual_mass", self._residual_mass))
        stages += [("rejection", self._rejection), ("resample", self._resample)]
        if not self.config.fused_insert:
            stages.append(("insert", self._insert))
        return stages

    def run(self) -> tuple[torch.Tensor, torch.Tensor]:
        for _, stage in self.stages():
            stage()
        return self.sampled, self.num_sampled

    def _logits(self) -> dict:
        return dict(
            target_logits_ptr=self.target_logits,
            target_logits_stride=self.target_logits.stride(0),
            draft_logits_ptr=self.draft_arg,
            draft_logits_stride_0=self.draft_strides[0],
            draft_logits_stride_1=self.draft_strides[1],
        )

    def _partials(self) -> dict:
        return dict(
            target_local_max_ptr=self.target_local_max,
            target_local_sumexp_ptr=self.target_local_sumexp,
            draft_local_max_ptr=self.draft_local_max,
            draft_local_sumexp_ptr=self.draft_local_sumexp,
            local_stride=self.num_blocks,
            num_blocks=self.num_blocks,
        )

    def _plan(self) -> dict:
        return dict(plan_block_ptr=self.plan_block, plan_lse_ptr=self.plan_lse, plan_scale_ptr=self.plan_scale)

    def _request(self) -> dict:
        return dict(
            draft_sampled_ptr=self.draft_sampled,
            pos_ptr=self.pos,
            cu_num_logits_ptr=self.cu_num_logits,
            idx_mapping_ptr=self.idx_mapping,
            temperature_ptr=self.temperature,
            seed_ptr=self.seed,
        )

    # ---- 1. block stats of the rows something reads: (R * K, nb / stats_blocks) programs
    def _stats(self) -> None:
        _stats_kernel[(self.num_reqs * self.k, self.stats_tiles)](**self._stats_args(), GROUPS=self.k)

    def _stats_args(self) -> dict:
        c = self.config
        return dict(
            **self._logits(),
            draft_sampled_ptr=self.draft_sampled,
            cu_num_logits_ptr=self.cu_num_logits,
            idx_mapping_ptr=self.idx_mapping,
            temperature_ptr=self.temperature,
            target_local_argmax_ptr=self.target_local_argmax,
            **self._partials(),
            vocab_size=self.vocab_size,
            HAS_DRAFT_LOGITS=self.has_draft_logits,
            K_P2=self.k_p2,
            SUB=c.stats_blocks,
            BLOCK=SAMPLE_BLOCK,
            PDL=self.dependent_launch,
            num_warps=c.stats_warps,
        )

    # ---- 2. prefix joint ratios in fp64, and each real row's LSEs (block verification)
    def _cumulative_log_p(self) -> None:
        _cumulative_log_p_kernel[(self.num_reqs,)](
            **self._logits(),
            draft_sampled_ptr=self.draft_sampled,
            cu_num_logits_ptr=self.cu_num_logits,
            idx_mapping_ptr=self.idx_mapping,
            temperature_ptr=self.temperature,
            **self._partials(),
            cumulative_log_p_ptr=self.cumulative_log_p,
            row_lse_ptr=self.row_lse,
            HAS_DRAFT_LOGITS=self.has_draft_logits,
            K_P2=self.k_p2,
            NB_P2=self.nb_p2,
            PDL=self.dependent_launch,
            num_warps=REQUEST_WARPS,
            launch_pdl=self.dependent_launch,
        )

    # ---- 3. residual masses of rows 1..K-1 (block verification, draft logits)
    def _residual_mass(self) -> None:
        _residual_mass_kernel[(self.num_reqs * (self.k - 1), triton.cdiv(self.num_blocks, RESIDUAL_BLOCKS))](
            **self._logits(),
            draft_sampled_ptr=self.draft_sampled,
            cumulative_log_p_ptr=self.cumulative_log_p,
            row_lse_ptr=self.row_lse,
            cu_num_logits_ptr=self.cu_num_logits,
            idx_mapping_ptr=self.idx_mapping,
            temperature_ptr=self.temperature,
            local_residual_mass_ptr=self.local_residual_mass,
            local_stride=self.num_blocks,
            num_blocks=self.num_blocks,
            vocab_size=self.vocab_size,
            K_P2=self.k_p2,
            GROUPS=self.k - 1,
            SUB=RESIDUAL_BLOCKS,
            BLOCK=SAMPLE_BLOCK,
            PDL=self.dependent_launch,
            num_warps=TILE_WARPS,
            launch_pdl=self.dependent_launch,
        )

    # ---- 4. accept/reject: tau into num_sampled; the plan, and level 1 where masses are known
    def _rejection(self) -> None:
        _rejection_kernel[(self.num_reqs,)](
            sampled_ptr=self.sampled,
            sampled_stride=self.sampled.stride(0),
            num_sampled_ptr=self.num_sampled,
            plan_ptr=self.plan,
            **self._plan(),
            **self._logits(),
            **self._request(),
            target_local_argmax_ptr=self.target_local_argmax,
            **self._partials(),
            local_residual_mass_ptr=self.local_residual_mass,
            cumulative_log_p_ptr=self.cumulative_log_p,
            row_lse_ptr=self.row_lse,
            synthetic_conditional_rates_ptr=self.rates,
            HAS_DRAFT_LOGITS=self.has_draft_logits,
            SYNTHETIC_MODE=self.synthetic,
            USE_BLOCK_VERIFICATION=self.use_block_verification,
            K_P2=self.k_p2,
            NB_P2=self.nb_p2,
            BLOCK=SAMPLE_BLOCK,
            PDL=self.dependent_launch,
            num_warps=REQUEST_WARPS,
            launch_pdl=self.dependent_launch,
        )

    # ---- 5. block masses of the rows not known yet (with the fused insert: and the insert)
    def _resample(self) -> None:
        c = self.config
        if self.resample_persistent_programs:
            _resample_persistent_kernel[(self.resample_persistent_programs,)](**self._resample_persistent_args())
            return
        programs = self.resample_tiles
        _resample_kernel[(self.num_reqs, programs)](
            sampled_ptr=self.sampled,
            sampled_stride=self.sampled.stride(0),
            resampled_mass_ptr=self.resampled_mass,
            resampled_argmax_ptr=self.resampled_argmax,
            resampled_stride=self.num_blocks,
            num_blocks=self.num_blocks,
            num_sampled_ptr=self.num_sampled,
            plan_ptr=self.plan,
            **self._plan(),
            **self._logits(),
            **self._request(),
            vocab_size=self.vocab_size,
            HAS_DRAFT_LOGITS=self.has_draft_logits,
            FUSED_INSERT=c.fused_insert,
            NUM_PROGRAMS=programs,
            SUB=RESAMPLE_BLOCKS,
            NB_P2=self.nb_p2,
            BLOCK=SAMPLE_BLOCK,
            PDL=self.dependent_launch,
            num_warps=TILE_WARPS,
            launch_pdl=self.dependent_launch,
        )

    def _resample_persistent_args(self) -> dict:
        return dict(
            resampled_mass_ptr=self.resampled_mass,
            resampled_argmax_ptr=self.resampled_argmax,
            resampled_stride=self.num_blocks,
            num_blocks=self.num_blocks,
            num_sampled_ptr=self.num_sampled,
            plan_ptr=self.plan,
            plan_lse_ptr=self.plan_lse,
            **self._logits(),
            cu_num_logits_ptr=self.cu_num_logits,
            idx_mapping_ptr=self.idx_mapping,
            temperature_ptr=self.temperature,
            vocab_size=self.vocab_size,
            num_reqs=self.num_reqs,
            TILES=self.resample_tiles,
            R_P2=triton.next_power_of_2(self.num_reqs),
            HAS_DRAFT_LOGITS=self.has_draft_logits,
            SUB=RESAMPLE_BLOCKS,
            BLOCK=SAMPLE_BLOCK,
            PDL=self.dependent_launch,
            num_warps=TILE_WARPS,
            launch_pdl=self.dependent_launch,
            maxnreg=PERSISTENT_RESAMPLE_REGISTERS,
        )

    # ---- 6. level 1 where not drawn yet, level 2 in the chosen block; num_sampled = tau + 1
    def _insert(self) -> None:
        _insert_kernel[(self.num_reqs,)](
            sampled_ptr=self.sampled,
            sampled_stride=self.sampled.stride(0),
            num_sampled_ptr=self.num_sampled,
            plan_ptr=self.plan,
            **self._plan(),
            resampled_mass_ptr=self.resampled_mass,
            resampled_argmax_ptr=self.resampled_argmax,
            resampled_stride=self.num_blocks,
            num_blocks=self.num_blocks,
            **self._logits(),
            **self._request(),
            vocab_size=self.vocab_size,
            HAS_DRAFT_LOGITS=self.has_draft_logits,
            NB_P2=self.nb_p2,
            BLOCK=SAMPLE_BLOCK,
            PDL=self.dependent_launch,
            num_warps=TILE_WARPS,
            launch_pdl=self.dependent_launch,
        )


def launch(*args, config: Config | None = None, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """Allocate and run one :class:`Pipeline` (the arguments of ``mrv2.launch``)."""
    return Pipeline(*args, config=config, **kwargs).run()
