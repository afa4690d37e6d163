"""Measure the fast sampler's configurations on a GPU: whole calls and kernels, interleaved.

GPU box, from the repository root, after ``source scripts/gpu-env.sh``::

    python3 scripts/tune_fast.py --out "$OUT/tune-fast.json"

For each workload it builds one :class:`specsample.kernels.fast.Pipeline` per candidate
:class:`~specsample.kernels.fast.Config` (and mrv2's pipeline as the reference), runs each once
(so every stage finds its intermediates), then times, all interleaved in one measurement (cold
L2, CUDA-graph replay; :mod:`specsample.timing`): the whole call of every candidate, and each
kernel alone for mrv2 and the candidates in :data:`STAGE_CANDIDATES` (on pipelines of their own,
:func:`specsample.measure.stage_calls`: a stage timed on a pipeline that already ran insert
would read tau + 1). It prints one line per
workload and writes every median to JSON; the defaults (``fast.default_config``) are chosen
from it by hand and recorded in ``notes/performance.md``.

Candidates beyond ``large``, ``small`` and ``tiny`` are given on the command line as a named
copy of one of them with some fields replaced, e.g. ``--candidate w8=large:stats_warps=8``
(``--candidate NAME=BASE:FIELD=VALUE,...``); ``--stages`` names the candidates whose kernels are
also timed alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import importlib
import json
import time

import torch

from specsample.kernels import fast, mrv2
from specsample.measure import input_copies, stage_calls
from specsample.timing import TimingConfig, measure_interleaved
from specsample.workloads import Workload

BASE = dict(num_speculative_steps=4, vocab_size=151936)
WORKLOADS = {
    # small batches: one partial wave, latency chains
    "R1-standard-phi0": Workload(num_reqs=1, mode="standard", **BASE),
    "R1-block-phi0.5": Workload(num_reqs=1, mode="block", placeholder_density=0.5, **BASE),
    "R1-greedy-phi0.5": Workload(num_reqs=1, mode="greedy", placeholder_density=0.5, **BASE),
    "R8-standard-phi0": Workload(num_reqs=8, mode="standard", **BASE),
    "R8-standard-phi0.5": Workload(num_reqs=8, mode="standard", placeholder_density=0.5, **BASE),
    "R8-greedy-phi0.5": Workload(num_reqs=8, mode="greedy", placeholder_density=0.5, **BASE),
    "R8-block-phi0.5": Workload(num_reqs=8, mode="block", placeholder_density=0.5, **BASE),
    "R16-block-phi0": Workload(num_reqs=16, mode="block", **BASE),
    "R32-standard-phi0": Workload(num_reqs=32, mode="standard", **BASE),
    "R32-block-phi0.5": Workload(num_reqs=32, mode="block", placeholder_density=0.5, **BASE),
    # the base point and its placeholder densities (issue 7 goals 1 and 2)
    "base-block-phi0": Workload(num_reqs=128, mode="block", **BASE),
    "base-block-phi0.5": Workload(num_reqs=128, mode="block", placeholder_density=0.5, **BASE),
    "base-block-phi1": Workload(num_reqs=128, mode="block", placeholder_density=1.0, **BASE),
    "base-standard-phi0": Workload(num_reqs=128, mode="standard", **BASE),
    "base-standard-phi0.5": Workload(num_reqs=128, mode="standard", placeholder_density=0.5, **BASE),
    "base-standard-phi1": Workload(num_reqs=128, mode="standard", placeholder_density=1.0, **BASE),
    "base-greedy-phi0": Workload(num_reqs=128, mode="greedy", **BASE),
    "base-greedy-phi1": Workload(num_reqs=128, mode="greedy", placeholder_density=1.0, **BASE),
    "V32000-block-phi0": Workload(num_reqs=128, mode="block", num_speculative_steps=4, vocab_size=32000),
    "R512-standard-phi0.5": Workload(num_reqs=512, mode="standard", placeholder_density=0.5, **BASE),
}  # fmt: skip

L, S = fast.LARGE_BATCH_CONFIG, fast.SMALL_BATCH_CONFIG
CANDIDATES = {"large": L, "small": S, "tiny": fast.TINY_BATCH_CONFIG}
STAGE_CANDIDATES = ("large", "small", "before")
CONFIG = TimingConfig(l2="cold", calls_per_sample=10, num_samples=15)
# --before: the fast module of an earlier commit, timed beside the candidates in its own defaults
BEFORE = None


def parse_candidate(text: str) -> tuple[str, fast.Config]:
    """``NAME=BASE:FIELD=VALUE,...`` -> (NAME, BASE's config with those fields replaced)."""
    try:
        name, rest = text.split("=", 1)
        base, _, fields = rest.partition(":")
        changes = dict(kv.split("=", 1) for kv in fields.split(",") if kv)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected NAME=BASE:FIELD=VALUE,..., got {text!r}") from None
    if base not in CANDIDATES:
        raise argparse.ArgumentTypeError(f"{text!r}: base must be one of {sorted(CANDIDATES)}, got {base!r}")
    config = CANDIDATES[base]
    types = {f.name: type(getattr(config, f.name)) for f in dataclasses.fields(config)}
    unknown = sorted(set(changes) - set(types))
    if unknown:
        raise argparse.ArgumentTypeError(f"{text!r}: unknown Config fields {unknown}; known: {sorted(types)}")
    try:
        values = {k: (v.lower() in ("1", "true", "yes")) if types[k] is bool else types[k](v) for k, v in changes.items()}
        return name, dataclasses.replace(config, **values)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"{text!r}: {e}") from None


def tune(name: str, w: Workload) -> dict[str, float]:
    copies = input_copies(w, "cold")
    factories = {"mrv2": mrv2.Pipeline, **{k: functools.partial(fast.Pipeline, config=c) for k, c in CANDIDATES.items()}}
    if BEFORE is not None:
        factories["before"] = BEFORE.Pipeline  # its own default_config
    ops = {}
    for label, factory in factories.items():
        pipes = [factory(**inputs) for inputs in copies]
        for p in pipes:
            p.run()
        ops[f"{label}:call"] = [p.run for p in pipes]
        if label == "mrv2" or label in STAGE_CANDIDATES:
            # Kernels alone, on pipelines of their own (measure.stage_calls)
            for stage, calls in stage_calls([factory(**inputs) for inputs in copies]).items():
                ops[f"{label}:{stage}"] = calls
    torch.cuda.synchronize()
    cfg = TimingConfig(CONFIG.l2, max(CONFIG.calls_per_sample, len(copies)), CONFIG.num_samples)
    out = {label: t.median * 1e6 for label, t in measure_interleaved(ops, cfg).items()}
    calls = {k.split(":")[0]: v for k, v in out.items() if k.endswith(":call")}
    best = min((v, k) for k, v in calls.items() if k != "mrv2")
    print(f"{name}: " + "  ".join(f"{k} {v:.1f}" for k, v in calls.items())
          + f"  | best {best[1]} {best[0]:.1f} us ({calls['mrv2'] / best[0]:.2f}x mrv2)", flush=True)  # fmt: skip
    for label in ("mrv2", *(c for c in STAGE_CANDIDATES if c in factories)):
        stages = {k.split(":")[1]: v for k, v in out.items() if k.startswith(label + ":") and not k.endswith(":call")}
        print(f"    {label} stages: " + "  ".join(f"{k} {v:.1f}" for k, v in stages.items()), flush=True)
    return out


def main() -> None:
    global STAGE_CANDIDATES, BEFORE
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default="tune-fast.json")
    p.add_argument("--workload", action="append", choices=sorted(WORKLOADS), help="default: all")
    p.add_argument("--candidate", action="append", type=parse_candidate, default=[],
                   metavar="NAME=BASE:FIELD=VALUE,...", help="an extra candidate (see above)")
    p.add_argument("--stages", help=f"comma-separated candidates whose kernels are timed alone "
                   f"(default: {','.join(STAGE_CANDIDATES)}; 'before' needs --before)")
    p.add_argument("--before", metavar="MODULE", help="an earlier fast.py, importable as this module "
                   "(e.g. specsample.kernels._fast_before from `git show REF:specsample/kernels/fast.py`)")
    args = p.parse_args()
    for name, config in args.candidate:
        if name in CANDIDATES or name in ("mrv2", "before"):
            p.error(f"--candidate {name}: the name is taken")
        CANDIDATES[name] = config
    if args.stages is not None:
        STAGE_CANDIDATES = tuple(s for s in args.stages.split(",") if s)
        unknown = sorted(set(STAGE_CANDIDATES) - set(CANDIDATES) - {"before"})
        if unknown:
            p.error(f"--stages: unknown candidates {unknown}")
    if args.before:
        BEFORE = importlib.import_module(args.before)
    if not torch.cuda.is_available():
        raise SystemExit("tune_fast.py: needs a CUDA GPU")
    results = {"device": torch.cuda.get_device_name(), "unit": "us per call, median, cold L2",
               "candidates": {k: dataclasses.asdict(v) for k, v in CANDIDATES.items()}, "workloads": {}}  # fmt: skip
    start = time.monotonic()
    for name in args.workload or list(WORKLOADS):
        results["workloads"][name] = tune(name, WORKLOADS[name])
        with open(args.out, "w") as f:
            json.dump(results, f, indent=1)
    print(f"tune_fast.py: {time.monotonic() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
