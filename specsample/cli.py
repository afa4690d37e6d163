"""``specsample`` command line: argument parsing and file I/O only; the work lives in modules.

Commands
--------
compare    time variants side by side in one process (interleaved), no asv
bench      run one asv tier at HEAD (GPU box), results into results/
nightly    bench the nightly tier, asv publish, rebuild the dashboards (locked)
backfill   bench past commits, each in its own worktree
dashboard  build dashboards/ from results/ (works without a GPU)
signoff    compare two commits (or two variants) and exit 0/1/2
gpuinfo    print what the machine has
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import subprocess
import sys
import time
from pathlib import Path

DEFAULT_MACHINE = os.environ.get("SPECSAMPLE_MACHINE", "h200")


def _repo_root() -> Path:
    here = Path.cwd()
    for p in (here, *here.parents):
        if (p / "asv.conf.json").exists():
            return p
    return here


# ---- compare ---------------------------------------------------------------------------------


def cmd_compare(args: argparse.Namespace) -> int:
    import torch

    from .grid import workload_of
    from .measure import measure_variants
    from .timing import Timing, TimingConfig, copy_bandwidth

    if not torch.cuda.is_available():
        print("specsample compare: needs a CUDA GPU", file=sys.stderr)
        return 2
    config = TimingConfig(l2=args.l2, num_samples=args.samples)
    bw = copy_bandwidth()
    rows = []
    grid = itertools.product(args.mode, args.draft, args.num_reqs, args.K, args.vocab_size, args.phi)
    for mode, draft, r, k, v, phi in grid:
        point = dict(mode=mode, draft=draft, num_reqs=r, K=k, vocab_size=v, phi=phi, pattern=args.pattern)
        w = workload_of(dict(point, variant=args.variants[0]))
        timings = measure_variants(args.variants, w, config)
        base = timings.get("mrv2")
        for name, t in timings.items():
            row = dict(point, variant=name)
            if isinstance(t, Timing):
                row.update(median_us=t.median * 1e6, method=t.method, l2=t.l2,
                           bandwidth_fraction=t.extra["bytes_required"] / t.median / bw,
                           ratio_to_mrv2=t.median / base.median if isinstance(base, Timing) else None)  # fmt: skip
            else:
                row["skipped"] = t
            rows.append(row)
            print(_format_row(row), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps({"copy_bandwidth_gbps": bw / 1e9, "rows": rows}, indent=1))
    return 0


def _format_row(row: dict) -> str:
    where = f"{row['variant']:>17} {row['mode']:>8} {row['draft']:>7} R={row['num_reqs']:<4} K={row['K']} V={row['vocab_size']:<6} phi={row['phi']:<4}"
    if "skipped" in row:
        return f"{where}  skipped: {row['skipped']}"
    ratio = f"  x{row['ratio_to_mrv2']:.3f} of mrv2" if row.get("ratio_to_mrv2") is not None else ""
    return f"{where}  {row['median_us']:9.1f} us  bw {row['bandwidth_fraction']:.2f}{ratio}  [{row['method']}, {row['l2']} L2]"


# ---- asv runs --------------------------------------------------------------------------------


def cmd_bench(args: argparse.Namespace) -> int:
    from .asv_runs import run_lock, run_tier

    repo = _repo_root()
    results = repo / "results"
    with run_lock(results):
        run_tier(args.tier, repo=repo, results_dir=results, machine=args.machine, bench=args.bench)
    return 0


def cmd_backfill(args: argparse.Namespace) -> int:
    from .asv_runs import backfill, run_lock

    repo = _repo_root()
    results = repo / "results"
    with run_lock(results):
        done = backfill(args.revs, repo=repo, results_dir=results, machine=args.machine, tier=args.tier)
    print(f"specsample backfill: measured {len(done)} commit(s): {' '.join(c[:8] for c in done)}")
    return 0


def cmd_gpuinfo(args: argparse.Namespace) -> int:
    from .machine import gpu_info

    print(json.dumps(gpu_info(), indent=2))
    return 0


# ---- parser ----------------------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specsample", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="command", required=True)

    c = sub.add_parser("compare", help="time variants side by side (interleaved, one process)")
    c.add_argument("--variants", nargs="+", default=["mrv2", "mrv2-pre50939"])
    c.add_argument("--mode", nargs="+", default=["standard", "block"])
    c.add_argument("--draft", nargs="+", default=["logits"])
    c.add_argument("--num-reqs", nargs="+", type=int, default=[128])
    c.add_argument("-K", nargs="+", type=int, default=[4])
    c.add_argument("--vocab-size", nargs="+", type=int, default=[151936])
    c.add_argument("--phi", nargs="+", type=float, default=[0.0, 0.5, 1.0])
    c.add_argument("--pattern", default="trailing", choices=["trailing", "random"])
    c.add_argument("--l2", default="cold", choices=["cold", "warm"])
    c.add_argument("--samples", type=int, default=20)
    c.add_argument("--json", help="also write the rows to this JSON file")
    c.set_defaults(func=cmd_compare)

    b = sub.add_parser("bench", help="run one asv tier at HEAD into results/")
    b.add_argument("--tier", default="nightly", choices=["smoke", "quick", "nightly", "full"])
    b.add_argument("--machine", default=DEFAULT_MACHINE)
    b.add_argument("--bench", help="asv --bench regex (default: the whole tier)")
    b.set_defaults(func=cmd_bench)

    f = sub.add_parser("backfill", help="benchmark past commits, each in its own worktree")
    f.add_argument("revs", nargs="+")
    f.add_argument("--tier", default="quick", choices=["smoke", "quick", "nightly", "full"])
    f.add_argument("--machine", default=DEFAULT_MACHINE)
    f.set_defaults(func=cmd_backfill)

    g = sub.add_parser("gpuinfo", help="print GPU, driver, CUDA, torch, Triton, clocks, copy bandwidth")
    g.set_defaults(func=cmd_gpuinfo)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
