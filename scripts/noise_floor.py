"""How fast can a resample row be? Its noise alone, its bytes alone, and fast's resample kernel.

GPU box, from the repository root, after ``source scripts/gpu-env.sh``::

    python3 scripts/noise_floor.py --out "$OUT/noise-floor.json"

Issue 7 asks for a sampler that keeps MRV2's random numbers draw for draw (goal 5): the
resample row's Gumbel noise is one Philox-4x32-10 draw (``tl.rand``) and two logarithms per
vocabulary entry, whatever the placeholder density. This script times, on one request grid of
R x V entries (cold L2, CUDA-graph replay, interleaved; :mod:`specsample.timing`):

* ``noise``: the noise of :func:`specsample.kernels.fast._gumbel_noise` (fast logs) for every
  entry and its argmax -- no logits read. The floor of any resample with these draws.
* ``noise-logf``: the same with libdevice's ``logf`` (the interpreter's and mrv2's logs).
* ``philox``: ``tl.rand`` alone and its argmax: the Philox part of the floor.
* ``read``: the fp32 logits row read and its argmax, no noise: the bytes part.
* ``resample``: fast's resample kernel on a phi=1 block-verification batch (every request
  resamples its row 0 from the plain target: read + noise + argmax), from
  :func:`specsample.measure.stage_calls`.

Each kernel uses fast's resample geometry (``Config.resample_block`` entries per program,
``Config.resample_warps`` warps), so the figures compare like with like.
"""

from __future__ import annotations

import argparse
import json
import time

import torch
import triton
import triton.language as tl

from specsample.kernels import fast
from specsample.measure import input_copies, stage_calls
from specsample.timing import TimingConfig, measure_interleaved
from specsample.workloads import Workload


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
        x = x + fast._gumbel_noise(seed, offs, True)
    elif NOISE == 3:
        x = x + fast._gumbel_noise(seed, offs, False)
    x = tl.where(mask, x, float("-inf"))
    value, index = tl.max(x, 0, return_indices=True, return_indices_tie_break_left=True)
    tl.store(best_val_ptr + req * num_blocks + block, value)
    tl.store(best_idx_ptr + req * num_blocks + block, block * BLOCK_V + index)


KINDS = {"noise": (False, 2), "noise-logf": (False, 3), "philox": (False, 1), "read": (True, 0)}


def floor_calls(num_reqs: int, vocab_size: int, config: fast.Config, copies: int) -> dict[str, list]:
    """One call per input copy for each kind in :data:`KINDS` (fresh random logits, cold L2)."""
    nb = triton.cdiv(vocab_size, config.resample_block)
    calls: dict[str, list] = {kind: [] for kind in KINDS}
    for _ in range(copies):
        logits = torch.randn(num_reqs, vocab_size, device="cuda")
        seed = torch.randint(0, 2**31 - 1, (num_reqs,), device="cuda", dtype=torch.int32)  # 32-bit, as fast's row seed
        best_val = torch.empty(num_reqs, nb, device="cuda")
        best_idx = torch.empty(num_reqs, nb, device="cuda", dtype=torch.int32)
        for kind, (read, noise) in KINDS.items():
            def call(logits=logits, seed=seed, best_val=best_val, best_idx=best_idx, read=read, noise=noise):
                _floor_kernel[(num_reqs, nb)](
                    logits, logits.stride(0), seed, best_val, best_idx, nb, vocab_size,
                    READ=read, NOISE=noise, BLOCK_V=config.resample_block, num_warps=config.resample_warps,
                )  # fmt: skip
            calls[kind].append(call)
    return calls


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="noise-floor.json")
    p.add_argument("--num-reqs", type=int, default=128)
    p.add_argument("--vocab-size", type=int, default=151936)
    p.add_argument("--num-speculative-steps", type=int, default=4)
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("noise_floor.py: needs a CUDA GPU")
    start = time.monotonic()
    R, V = args.num_reqs, args.vocab_size
    config = fast.default_config(R)
    w = Workload(num_reqs=R, mode="block", placeholder_density=1.0, vocab_size=V,
                 num_speculative_steps=args.num_speculative_steps)  # fmt: skip
    copies = input_copies(w, "cold")
    pipes = [fast.Pipeline(**inputs) for inputs in copies]
    for pipe in pipes:
        pipe.run()
    ops = {"resample": stage_calls(pipes)["resample"], **floor_calls(R, V, config, len(copies))}
    torch.cuda.synchronize()
    timings = measure_interleaved(ops, TimingConfig("cold", max(10, len(copies)), 15))
    us = {label: t.median * 1e6 for label, t in timings.items()}
    entries = R * V
    result = {
        "device": torch.cuda.get_device_name(), "num_reqs": R, "vocab_size": V,
        "config": {"resample_block": config.resample_block, "resample_warps": config.resample_warps},
        "unit": "us per call, median, cold L2, CUDA-graph replay", "us": us,
        "ns_per_entry": {k: v * 1e3 / entries for k, v in us.items()},
        "read_bandwidth_TBps": R * V * 4 / (us["read"] * 1e-6) / 1e12,
    }  # fmt: skip
    print(f"R={R} V={V} ({entries} entries), resample {config.resample_block}/{config.resample_warps}: "
          + "  ".join(f"{k} {v:.1f} us" for k, v in us.items())
          + f"  | read at {result['read_bandwidth_TBps']:.2f} TB/s", flush=True)  # fmt: skip
    with open(args.out, "w") as f:
        json.dump(result, f, indent=1)
    print(f"noise_floor.py: {time.monotonic() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
