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
    from .asv_runs import run_lock, run_tier, worktree

    repo = _repo_root()
    results = repo / "results"
    with run_lock(results):
        if args.rev is None:
            run_tier(args.tier, repo=repo, results_dir=results, machine=args.machine, bench=args.bench)
        else:
            sha = _rev(args.rev)
            with worktree(repo, sha) as wt:
                run_tier(args.tier, repo=repo, results_dir=results, machine=args.machine, checkout=wt,
                         commit=sha, bench=args.bench)  # fmt: skip
    return 0


def cmd_backfill(args: argparse.Namespace) -> int:
    from .asv_runs import backfill, run_lock

    repo = _repo_root()
    results = repo / "results"
    with run_lock(results):
        done = backfill(args.revs, repo=repo, results_dir=results, machine=args.machine, tier=args.tier)
    print(f"specsample backfill: measured {len(done)} commit(s): {' '.join(c[:8] for c in done)}")
    return 0


# The nightly tier runs in two asv invocations: the asv-statistics latency classes first, then
# the derived and per-kernel classes. Results are promoted after each, so an interrupted second
# half keeps the first.
def cmd_nightly(args: argparse.Namespace) -> int:
    from .asv_runs import publish, run_lock, run_tier

    repo = _repo_root()
    results = repo / "results"
    start = time.monotonic()
    with run_lock(results):
        # One asv run: each sweep is measured once and shared by its Latency, Derived and
        # Stages classes (benchmarks/common.py), so splitting the tier would measure it twice.
        run_tier("nightly", repo=repo, results_dir=results, machine=args.machine)
        publish(repo, results, repo / "html")
        build_site(results, repo / "dashboards", html_dir=repo / "html")
    print(f"specsample nightly: done in {time.monotonic() - start:.0f} s")
    return 0


def build_site(results: Path, out: Path, html_dir: Path | None = None) -> Path:
    from .dashboard import build_dashboard
    from .results import load_results

    start = time.monotonic()
    df, problems = load_results(results)
    for problem in problems:
        print(f"specsample: skipped {problem.path}: {problem.reason}", file=sys.stderr)
    if df.empty:
        raise SystemExit(f"specsample dashboard: no results under {results}")
    regressions = html_dir if html_dir is not None and (html_dir / "regressions.json").exists() else None
    index = build_dashboard(df, out, regressions=regressions)
    print(f"specsample dashboard: {len(df)} result rows -> {index} in {time.monotonic() - start:.1f} s")
    return index


def cmd_dashboard(args: argparse.Namespace) -> int:
    build_site(Path(args.results), Path(args.out), Path(args.html) if args.html else None)
    return 0


def cmd_signoff(args: argparse.Namespace) -> int:
    from . import signoff

    if args.variants:
        from .results import load_results, machine_environment

        df, _ = load_results(Path(args.results))
        if args.commit:
            df = df[df["commit"].str.startswith(args.commit)]
        df = df[df["metric"] == "time_sample"]
        base, head = args.variants
        min_effect = signoff.ASV_MIN_EFFECT if args.min_effect is None else args.min_effect
        min_abs = 0.0 if args.min_abs_us is None else args.min_abs_us * 1e-6
        verdicts = signoff.compare_variants(df, base, head, alpha=args.alpha, min_effect=min_effect,
                                            min_abs_seconds=min_abs)  # fmt: skip
        report = signoff.report_markdown(verdicts, machine_environment(df),
                                         title=f"specsample sign-off: {head} vs {base}")  # fmt: skip
        code = signoff.exit_code(verdicts)
    else:
        import torch

        from .paired import DEFAULT_SAMPLES, CheckoutError, signoff_commits

        if not (args.base and args.head):
            raise SystemExit("specsample signoff: give BASE HEAD commits, or --variants BASE HEAD")
        if not torch.cuda.is_available():
            print("specsample signoff: BASE HEAD needs a CUDA GPU", file=sys.stderr)
            return 2
        min_effect = signoff.PAIRED_MIN_EFFECT if args.min_effect is None else args.min_effect
        min_abs = signoff.PAIRED_MIN_ABS_SECONDS if args.min_abs_us is None else args.min_abs_us * 1e-6
        try:
            result = signoff_commits(_repo_root(), args.base, args.head, tier=args.tier, sweeps=args.sweep,
                                     samples=args.samples or DEFAULT_SAMPLES, machine=args.machine, alpha=args.alpha,
                                     min_effect=min_effect, min_abs_seconds=min_abs,
                                     log=lambda line: print(line, flush=True))  # fmt: skip
        except (CheckoutError, ValueError) as exc:
            print(f"specsample signoff: {exc}", file=sys.stderr)
            return 2
        report, code = result.report, result.exit_code
    print(report)
    if args.report:
        Path(args.report).write_text(report)
    return code


def _rev(rev: str) -> str:
    from .asv_runs import git

    return git(_repo_root(), "rev-parse", rev)


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
    b.add_argument("--rev", help="measure this commit from a worktree instead of the checkout")
    b.set_defaults(func=cmd_bench)

    f = sub.add_parser("backfill", help="benchmark past commits, each in its own worktree")
    f.add_argument("revs", nargs="+")
    f.add_argument("--tier", default="quick", choices=["smoke", "quick", "nightly", "full"])
    f.add_argument("--machine", default=DEFAULT_MACHINE)
    f.set_defaults(func=cmd_backfill)

    n = sub.add_parser("nightly", help="bench the nightly tier, asv publish, rebuild dashboards/")
    n.add_argument("--machine", default=DEFAULT_MACHINE)
    n.set_defaults(func=cmd_nightly)

    d = sub.add_parser("dashboard", help="build dashboards/ from results/ (no GPU needed)")
    d.add_argument("--results", default="results")
    d.add_argument("--out", default="dashboards")
    d.add_argument("--html", help="asv publish output, for its detected regressions (default: none)")
    d.set_defaults(func=cmd_dashboard)

    s = sub.add_parser("signoff", help="did anything get slower? exit 0 pass, 1 regression, 2 failure")
    s.add_argument("base", nargs="?", help="base commit (both are checked out in worktrees and timed paired, in one process)")
    s.add_argument("head", nargs="?", help="head commit (may equal base: an A/A run)")
    s.add_argument("--variants", nargs=2, metavar=("BASE", "HEAD"), help="compare two variants in results/ instead")
    s.add_argument("--commit", help="with --variants: only this commit's results")
    s.add_argument("--results", default="results")
    s.add_argument("--tier", default="quick", choices=["smoke", "quick", "nightly", "full"])
    s.add_argument("--sweep", action="append", metavar="NAME", help="only this sweep of the tier, e.g. Density (repeatable)")
    s.add_argument("--samples", type=int, help="samples per side and point (default 30)")
    s.add_argument("--alpha", type=float, default=0.002)
    s.add_argument("--min-effect", type=float, default=None,
                   help="smallest relative change that counts (default 0.02 for BASE HEAD, 0.05 for --variants)")
    s.add_argument("--min-abs-us", type=float, default=None,
                   help="time points must also change by more than this many us (default 0.5 for BASE HEAD, "
                        "0 for --variants)")  # fmt: skip
    s.add_argument("--machine", default=DEFAULT_MACHINE)
    s.add_argument("--report", help="also write the markdown report here")
    s.set_defaults(func=cmd_signoff)

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
