"""``specsample noise-floor``: how fast can a resample row be? Its noise alone, its bytes alone,
and fast's resample kernel, timed on a GPU.

The samplers keep MRV2's random numbers draw for draw, so the resample row's Gumbel noise is
one Philox-4x32-10 draw (``tl.rand``) and two logarithms per vocabulary entry, whatever the
placeholder density: a floor no kernel change can go under. This command times, on one
request grid of R x V entries (cold L2, CUDA-graph replay, interleaved; :mod:`specsample.timing`):

* ``noise``: fast's Gumbel noise (fast logs) for every entry and its argmax -- no logits read.
  The floor of any resample with these draws.
* ``noise-logf``: the same with libdevice's ``logf`` (the interpreter's and mrv2's logs).
* ``philox``: ``tl.rand`` alone and its argmax: the Philox part of the floor.
* ``read``: the fp32 logits row read and its argmax, no noise: the bytes part.
* ``resample``: fast's resample kernel on a phi=1 block-verification batch (every request
  resamples its row 0 from the plain target: read + noise + argmax), from
  :func:`specsample.measure.stage_calls`.

Each kernel uses fast's resample geometry (``Config.resample_block`` entries per program,
``Config.resample_warps`` warps), so the figures compare like with like.

Private kernel code, on purpose: :func:`_floor_kernel` calls ``common._gumbel_noise``, the device
function fast's resample kernel draws its noise with. The pieces of one kernel have no public
seam (only whole launches do: ``stage_calls``), and the floor must time exactly the noise the
sampler computes, not a copy of it that could drift.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import torch
import triton
import triton.language as tl

from ..kernels import common, fast
from ..measure import input_copies, stage_calls
from ..timing import TimingConfig, measure_interleaved
from ..workloads import Workload


@triton.jit
def _floor_kernel(
    # [R, V]
    logits_ptr,
    logits_stride,
    # [R]
    seed_ptr,
    # [R, nb] outputs
    best_val_ptr,
    best_idx_ptr,
    num_blocks,
    vocab_size,
    READ: tl.constexpr,
    NOISE: tl.constexpr,  # 0: none, 1: tl.rand only, 2: Gumbel noise (fast logs), 3: Gumbel (logf)
    BLOCK_V: tl.constexpr,
):
    req = tl.program_id(0).to(tl.int64)
    block = tl.program_id(1)
    offs = block * BLOCK_V + tl.arange(0, BLOCK_V)
    mask = offs < vocab_size
    if READ:
        x = tl.load(logits_ptr + req * logits_stride + offs, mask=mask, other=float("-inf"))
    else:
        x = tl.zeros((BLOCK_V,), tl.float32)
    seed = tl.load(seed_ptr + req)
    if NOISE == 1:
        x = x + tl.rand(seed, offs)
    elif NOISE == 2:
        x = x + common._gumbel_noise(seed, offs, True)
    elif NOISE == 3:
        x = x + common._gumbel_noise(seed, offs, False)
    x = tl.where(mask, x, float("-inf"))
    value, index = tl.max(x, 0, return_indices=True, return_indices_tie_break_left=True)
    tl.store(best_val_ptr + req * num_blocks + block, value)
    tl.store(best_idx_ptr + req * num_blocks + block, block * BLOCK_V + index)


# kind -> (READ, NOISE) of _floor_kernel
KINDS = {"noise": (False, 2), "noise-logf": (False, 3), "philox": (False, 1), "read": (True, 0)}


def floor_calls(num_reqs: int, vocab_size: int, config: fast.Config, copies: int, device: str = "cuda") -> dict:
    """``{kind: [one call per input copy]}`` for each kind in :data:`KINDS` (fresh random logits
    per copy, so a cold L2 finds them evicted)."""
    nb = triton.cdiv(vocab_size, config.resample_block)
    calls: dict[str, list] = {kind: [] for kind in KINDS}
    for _ in range(copies):
        logits = torch.randn(num_reqs, vocab_size, device=device)
        # 32-bit, as fast's row seed
        seed = torch.randint(0, 2**31 - 1, (num_reqs,), device=device, dtype=torch.int32)
        best_val = torch.empty(num_reqs, nb, device=device)
        best_idx = torch.empty(num_reqs, nb, device=device, dtype=torch.int32)
        for kind, (read, noise) in KINDS.items():

            def call(logits=logits, seed=seed, best_val=best_val, best_idx=best_idx, read=read, noise=noise):
                _floor_kernel[(num_reqs, nb)](
                    logits_ptr=logits,
                    logits_stride=logits.stride(0),
                    seed_ptr=seed,
                    best_val_ptr=best_val,
                    best_idx_ptr=best_idx,
                    num_blocks=nb,
                    vocab_size=vocab_size,
                    READ=read,
                    NOISE=noise,
                    BLOCK_V=config.resample_block,
                    num_warps=config.resample_warps,
                )

            calls[kind].append(call)
    return calls


def run(
    num_reqs: int = 128,
    vocab_size: int = 151936,
    num_speculative_steps: int = 4,
    out: Path | None = None,
    log: Callable[[str], None] = print,
) -> dict:
    """Time the floor's pieces beside fast's resample kernel (needs a CUDA GPU); the result is
    also written to ``out`` as JSON."""
    start = time.monotonic()
    R, V = num_reqs, vocab_size
    config = fast.default_config(R)
    w = Workload(
        num_reqs=R, mode="block", placeholder_density=1.0, vocab_size=V, num_speculative_steps=num_speculative_steps
    )
    copies = input_copies(w, "cold")
    pipes = [fast.Pipeline(**inputs, config=config) for inputs in copies]
    for pipe in pipes:
        pipe.run()
    ops = {"resample": stage_calls(pipes)["resample"], **floor_calls(R, V, config, len(copies))}
    torch.cuda.synchronize()
    timings = measure_interleaved(ops, TimingConfig("cold", max(10, len(copies)), 15))
    us = {label: t.median * 1e6 for label, t in timings.items()}
    entries = R * V
    result = {
        "device": torch.cuda.get_device_name(),
        "num_reqs": R,
        "vocab_size": V,
        "config": {"resample_block": config.resample_block, "resample_warps": config.resample_warps},
        "unit": "us per call, median, cold L2, CUDA-graph replay",
        "us": us,
        "ns_per_entry": {k: v * 1e3 / entries for k, v in us.items()},
        "read_bandwidth_TBps": R * V * 4 / (us["read"] * 1e-6) / 1e12,
    }
    log(
        f"R={R} V={V} ({entries} entries), resample {config.resample_block}/{config.resample_warps}: "
        + "  ".join(f"{k} {v:.1f} us" for k, v in us.items())
        + f"  | read at {result['read_bandwidth_TBps']:.2f} TB/s"
    )
    if out is not None:
        out.write_text(json.dumps(result, indent=1))
    log(f"specsample noise-floor: {time.monotonic() - start:.0f} s" + (f" -> {out}" if out else ""))
    return result
