"""Measure the fast sampler's tunables on a GPU: one factor at a time, kernels timed alone.

GPU box, from the repository root, after ``source scripts/gpu-env.sh``::

    python3 scripts/tune_fast.py --out "$OUT/tune-fast.json"

For each workload it builds one :class:`specsample.kernels.fast.Pipeline` per candidate
:class:`~specsample.kernels.fast.Config`, runs it once (so every stage finds its intermediates),
and times the stage the candidate changes (stats or resample) for all candidates interleaved
(cold L2, CUDA-graph replay; :mod:`specsample.timing`). mrv2's own stage is timed beside them as
the reference. It prints one table per workload and writes every median to JSON; the defaults
in ``Config`` are then chosen from it by hand and recorded in ``notes/performance.md``.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time

import torch

from specsample.kernels import fast, mrv2
from specsample.measure import input_copies
from specsample.timing import TimingConfig, measure_interleaved
from specsample.workloads import Workload

WORKLOADS = {
    "base-block-logits-phi0.5": Workload(num_reqs=128, num_speculative_steps=4, vocab_size=151936, mode="block",
                                         placeholder_density=0.5),
    "base-standard-logits-phi0": Workload(num_reqs=128, num_speculative_steps=4, vocab_size=151936,
                                          mode="standard"),
    "R8-standard-logits-phi0": Workload(num_reqs=8, num_speculative_steps=4, vocab_size=151936, mode="standard"),
    # R=1: where fast measured 0.90-0.96x of mrv2 in the nightly tier (notes/performance.md)
    "R1-standard-logits-phi0": Workload(num_reqs=1, num_speculative_steps=4, vocab_size=151936, mode="standard"),
    "R1-block-logits-phi0.5": Workload(num_reqs=1, num_speculative_steps=4, vocab_size=151936, mode="block",
                                       placeholder_density=0.5),
    "V32000-block-logits-phi0": Workload(num_reqs=128, num_speculative_steps=4, vocab_size=32000, mode="block"),
    "base-greedy-phi0": Workload(num_reqs=128, num_speculative_steps=4, vocab_size=151936, mode="greedy"),
}  # fmt: skip

D = fast.Config()
CANDIDATES = {
    "stats": {
        f"{b}/{w}w": dataclasses.replace(D, stats_block=b, stats_warps=w)
        for b, w in ((8192, 8), (8192, 16), (4096, 4), (4096, 8), (16384, 16), (2048, 4))
    },
    "resample": {
        **{f"{b}/{w}w": dataclasses.replace(D, resample_block=b, resample_warps=w)
           for b, w in ((1024, 4), (1024, 8), (2048, 4), (2048, 8), (4096, 8), (512, 2))},
        "logf": dataclasses.replace(D, fast_log=False),
    },
}  # fmt: skip
CONFIG = TimingConfig(l2="cold", calls_per_sample=10, num_samples=15)


def _stage_calls(pipes: list, stage: str) -> list:
    return [dict(p.stages())[stage] for p in pipes]


def tune(name: str, w: Workload) -> dict[str, dict[str, float]]:
    copies = input_copies(w, "cold")
    out: dict[str, dict[str, float]] = {}
    for stage, candidates in CANDIDATES.items():
        ops = {}
        ref = [mrv2.Pipeline(**inputs) for inputs in copies]
        for p in ref:
            p.run()
        ops["mrv2"] = _stage_calls(ref, stage)
        for label, config in candidates.items():
            pipes = [fast.Pipeline(**inputs, config=config) for inputs in copies]
            for p in pipes:
                p.run()
            ops[label] = _stage_calls(pipes, stage)
        torch.cuda.synchronize()
        cfg = TimingConfig(CONFIG.l2, max(CONFIG.calls_per_sample, len(copies)), CONFIG.num_samples)
        timings = measure_interleaved(ops, cfg)
        out[stage] = {label: t.median * 1e6 for label, t in timings.items()}
        best = min((v, k) for k, v in out[stage].items() if k != "mrv2")
        print(f"{name} {stage}: " + "  ".join(f"{k} {v:.1f}" for k, v in out[stage].items())
              + f"  | best {best[1]} {best[0]:.1f} us", flush=True)  # fmt: skip
    return out


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="tune-fast.json")
    p.add_argument("--workload", action="append", choices=sorted(WORKLOADS), help="default: all")
    args = p.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("tune_fast.py: needs a CUDA GPU")
    results = {"device": torch.cuda.get_device_name(), "unit": "us per call, median, cold L2", "workloads": {}}
    start = time.monotonic()
    for name in args.workload or list(WORKLOADS):
        results["workloads"][name] = tune(name, WORKLOADS[name])
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    print(f"tune_fast.py: {time.monotonic() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
