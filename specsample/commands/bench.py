"""``specsample bench``, ``nightly``, ``backfill``, ``dashboard`` and ``regressions``: asv runs and what is built from their results."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

from ..schema import CPU_INTERPRETER_MACHINE, parse_subject
from .common import (
    INTERPRETER_RESULTS,
    UsageError,
    _fetch_releases,
    _machine,
    _repo_root,
    _require_gpu,
    _rev,
    _set_gpus,
    _set_vllm_repo,
    _tier_needs,
)

# ---- asv runs --------------------------------------------------------------------------------


def _fetch_tier_releases(tier: str) -> None:
    """The vLLM releases a tier measures, fetched into the cache if missing (network needed)."""
    from ..tiers import sweeps

    names = sorted({s for sw in sweeps(tier) for s in sw.subjects})
    _fetch_releases(names, strict=False, why=f" (the {tier} tier measures it)")


def _results_dir(args: argparse.Namespace, repo: Path, interpret: bool) -> Path:
    """Where a run files its results: ``--results-dir``, else the committed ``results/`` for a GPU
    run and the git-ignored ``specsample-results/`` for a CPU-interpreter run, so that a smoke run
    neither adds a CPU machine to the committed results nor rewrites their ``benchmarks.json``."""
    if args.results_dir:
        return Path(args.results_dir)
    return repo / (INTERPRETER_RESULTS if interpret else "results")


def cmd_bench(args: argparse.Namespace) -> int:
    _set_gpus(args)
    from ..runs.asv import RunError, run_lock, run_tier, worktree

    _set_vllm_repo(args)
    interpret = _tier_needs(args.tier, "specsample bench")
    machine = args.machine or (CPU_INTERPRETER_MACHINE if interpret else _machine(args))
    repo = _repo_root()
    results = _results_dir(args, repo, interpret)
    if not args.no_fetch:
        _fetch_tier_releases(args.tier)
    try:
        with run_lock(results):
            if args.rev is None:
                run_tier(
                    args.tier,
                    repo=repo,
                    results_dir=results,
                    machine=machine,
                    bench=args.bench,
                    interpret=interpret,
                    resume=args.resume,
                )
            else:
                sha = _rev(args.rev)
                with worktree(repo, sha) as wt:
                    run_tier(
                        args.tier,
                        repo=repo,
                        results_dir=results,
                        machine=machine,
                        checkout=wt,
                        commit=sha,
                        bench=args.bench,
                        interpret=interpret,
                        resume=args.resume,
                    )
    except RunError as exc:
        raise UsageError(f"specsample bench: {exc}") from None
    return 0


def cmd_backfill(args: argparse.Namespace) -> int:
    _set_gpus(args)
    from ..runs.asv import RunError, backfill, run_lock, run_tier

    _set_vllm_repo(args)
    releases = [r for r in args.revs if r.startswith("vllm")]
    commits = [r for r in args.revs if not r.startswith("vllm")]
    for name in releases:
        if parse_subject(name).kind != "vllm-release":
            raise UsageError(
                f"backfill: {name!r}: give vLLM releases as vllm==X.Y.Z (commits of a vLLM "
                f"checkout are measured by `specsample signoff` and `compare`)"
            )
    interpret = _tier_needs(args.tier, "specsample backfill")
    machine = args.machine or (CPU_INTERPRETER_MACHINE if interpret else _machine(args))
    repo = _repo_root()
    results = _results_dir(args, repo, interpret)
    if releases:
        from ..tiers import MRV2_RELEASES

        unknown = [r for r in releases if parse_subject(r).version not in MRV2_RELEASES]
        if unknown:
            raise UsageError(
                f"backfill: {', '.join(unknown)} not in the releases tier (MRV2 releases: {', '.join(MRV2_RELEASES)})"
            )
        _fetch_releases(releases)
    try:
        with run_lock(results):
            done = backfill(commits, repo=repo, results_dir=results, machine=machine, tier=args.tier) if commits else []
            if releases:
                run_tier("releases", repo=repo, results_dir=results, machine=machine)
    except (RunError, ValueError) as exc:
        raise UsageError(f"specsample backfill: {exc}") from None
    print(
        f"specsample backfill: measured {len(done)} commit(s): {' '.join(c[:8] for c in done)}"
        + (f"; the releases tier for {len(releases)} release(s)" if releases else "")
    )
    return 0


def _discover_releases() -> list[str]:
    """Newer MRV2 releases on the index, fetched and appended to the tiers
    (:mod:`specsample.discovery`); the tiers are reloaded so this run measures them."""
    import importlib

    from .. import discovery, tiers
    from ..subjects.vllm import store

    found = discovery.discover(
        tiers.MRV2_RELEASES,
        tiers.discovered_releases_path(),
        index=store.index_releases,
        fetch=lambda version: store.fetch_release(version, log=lambda line: None),
    )
    if found:
        importlib.reload(tiers)
    return found


def cmd_nightly(args: argparse.Namespace) -> int:
    _set_gpus(args)
    from ..runs.asv import RunError, publish, run_lock, run_tier

    _set_vllm_repo(args)
    _require_gpu("specsample nightly")
    machine = _machine(args)
    repo = _repo_root()
    results = repo / "results"
    start = time.monotonic()
    if not args.no_fetch:
        _discover_releases()
        _fetch_tier_releases("nightly")
    try:
        with run_lock(results):
            # One asv run: each sweep is measured once and shared by its Latency, Derived and
            # Stages classes (benchmarks/common.py), so splitting the tier would measure it twice.
            run_tier("nightly", repo=repo, results_dir=results, machine=machine, resume=args.resume)
            if not args.no_exactness:
                _nightly_exactness(results, machine)
            vllm_repo = os.environ.get("SPECSAMPLE_VLLM_REPO")
            if vllm_repo and not args.no_bisect:
                # A change point that showed up on vllm@main tonight: bisect it over vLLM's commits.
                from ..bisect.nightly import auto_bisect

                auto_bisect(results, machine, Path(vllm_repo), log=lambda line: print(line, flush=True))
            publish(repo, results, repo / "html")
            build_site(results, repo / "dashboards")
    except RunError as exc:
        raise UsageError(f"specsample nightly: {exc}") from None
    print(f"specsample nightly: done in {time.monotonic() - start:.0f} s")
    return 0


def _nightly_exactness(results: Path, machine: str) -> None:
    """Each nightly subject's output law (docs/exactness.md), filed beside the night's asv
    results: ours, the tier's vLLM subjects (vllm@main only with a checkout) and the control."""
    from .. import exactness
    from ..tiers import NIGHTLY_VLLM

    vllm = tuple(s for s in NIGHTLY_VLLM if s != "vllm@main" or os.environ.get("SPECSAMPLE_VLLM_REPO"))
    commit = _rev("HEAD")
    start = time.monotonic()
    path, rows = exactness.nightly(results, machine, commit, vllm, log=lambda line: print(line, flush=True))
    biased = sorted({r.subject for r in rows if r.verdict == "biased" and r.subject != exactness.PLANTED})
    print(
        f"specsample nightly: exactness -> {path} in {time.monotonic() - start:.0f} s"
        + (f"; biased: {', '.join(biased)}" if biased else "")
    )


def build_site(results: Path, out: Path, machine: str | None = None) -> Path:
    """``machine``'s site in ``out``; without one, every GPU machine's (the default machine's in
    ``out``, the others' in ``out/<machine>/``). Returns the index in ``out``."""
    from ..dashboard import build_dashboard, build_sites
    from ..track.results import load_results

    if not results.is_dir():
        raise UsageError(f"specsample dashboard: no results directory {results}")
    start = time.monotonic()
    df, problems = load_results(results)
    for problem in problems:
        print(f"specsample: skipped {problem.path}: {problem.reason}", file=sys.stderr)
    if df.empty:
        raise UsageError(f"specsample dashboard: no results under {results}")
    try:
        if machine is None:
            indexes = build_sites(df, out, results_dir=results)
        else:
            indexes = [build_dashboard(df, out, machine=machine, results_dir=results)]
    except ValueError as exc:
        raise UsageError(f"specsample dashboard: {exc}") from None
    pages = ", ".join(
        str(page) for index in indexes for page in (index, index.with_name("releases.html")) if page.exists()
    )
    print(f"specsample dashboard: {len(df)} result rows -> {pages} in {time.monotonic() - start:.1f} s")
    return indexes[0]


def cmd_dashboard(args: argparse.Namespace) -> int:
    build_site(Path(args.results_dir), Path(args.out), args.machine)
    return 0


def cmd_regressions(args: argparse.Namespace) -> int:
    from ..track import changepoints
    from ..track.results import load_results

    results = Path(args.results_dir)
    if not results.is_dir():
        raise UsageError(f"specsample regressions: no results directory {results}")
    df, problems = load_results(results)
    for problem in problems:
        print(f"specsample: skipped {problem.path}: {problem.reason}", file=sys.stderr)
    if df.empty:
        raise UsageError(f"specsample regressions: no results under {results}")
    if args.machine:
        if args.machine not in set(df["machine"]):
            raise UsageError(
                f"specsample regressions: no results for machine {args.machine!r} in {results}; "
                f"known: {', '.join(sorted(set(df['machine'])))}"
            )
        df = df[df["machine"] == args.machine]
    changes = changepoints.detect_all(df)
    newest = changepoints.newest_vs_previous(df)
    print(changepoints.report(changes, newest))
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {
                    "results": str(results),
                    "machines": sorted(set(df["machine"])),
                    "regressions": changepoints.to_records(changepoints.regressions(changes)),
                    "improvements": changepoints.to_records(changepoints.improvements(changes)),
                    "shifts": changepoints.to_records(changepoints.shifts(changes)),
                    "newest_vs_previous": changepoints.to_records(changepoints.newest_summary(newest)),
                    "newest_points": changepoints.to_records(newest[newest["verdict"] != "unchanged"]),
                },
                indent=1,
                default=str,
            )
            + "\n"
        )
    return 1 if len(changepoints.regressions(changes)) else 0
