"""``specsample`` command line: argument parsing and I/O only; the work lives in the modules.

Commands
--------
compare      time subjects side by side in one process (interleaved), no asv
bench        run one asv tier at HEAD (GPU box), results into results/
nightly      bench the nightly tier, asv publish, rebuild the dashboards (locked)
backfill     bench past commits, each from its own checkout; or fetch and bench vLLM releases
dashboard    build dashboards/ from results/ (works without a GPU)
regressions  change points in the committed results' history (works without a GPU)
signoff      compare two commits, two subjects (vLLM releases, refs), or two subjects' results
bisect       the first commit where a point's latency moved (vLLM refs or our commits)
signoff-validate  A/A sign-offs and planted slowdowns: the sign-off's detection matrix
exactness    does each subject's output follow the target's law? (GPU; docs/exactness.md)
vllm         fetch vLLM releases into the cache; list what is cached
gpuinfo      print what the machine has
tune         time fast's or express's launch configurations and kernel variants (developers, GPU)
noise-floor  a resample row's noise, its bytes and fast's resample kernel, each alone (developers, GPU)
goals        one commit's committed results against the performance goals (works without a GPU)

Exit codes: 0 success (sign-off: pass), 1 a regression, 2 bad input, a missing GPU, a failed or
crashed point, or nothing measured (sign-off: also head violating placeholder semantics where
base does not, a head biased where base is exact, or a point measured on one side only, unless
``--allow-missing``; exactness: 1 a subject biased or the planted control not flagged). Nothing is
written to ``results/`` by a run that measured nothing.
"""

from __future__ import annotations

import argparse
import itertools
import json
import os
import sys
import time
from pathlib import Path

from . import __version__
from .schema import CPU_INTERPRETER_MACHINE, MODES, OUR_SUBJECTS, PATTERNS, TIERS, parse_subject


# A CPU-interpreter run's results: git-ignored, beside (never inside) the committed results/.
INTERPRETER_RESULTS = "specsample-results"


class UsageError(Exception):
    """Bad input: printed as one line, exit 2."""


def _repo_root() -> Path:
    here = Path.cwd()
    for p in (here, *here.parents):
        if (p / "asv.conf.json").exists():
            return p
    return here


def _require_gpu(command: str) -> None:
    from .machine import cuda_unavailable

    reason = cuda_unavailable()
    if reason:
        raise UsageError(
            f"{command} times kernels on a GPU and this machine has {reason}; nothing was "
            f"measured or written (only the smoke tier runs on a CPU: bench, signoff or backfill --tier smoke)"
        )


def _machine(args: argparse.Namespace) -> str:
    """``--machine``, else the name of the GPU found (never a default that could be wrong)."""
    if getattr(args, "machine", None):
        return args.machine
    from .machine import machine_name

    return machine_name()


def _subject_names(names: list[str]) -> list[str]:
    """Parse every subject name first, so a typo fails before anything runs."""
    for name in names:
        try:
            parse_subject(name)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return names


def _set_gpus(args: argparse.Namespace) -> None:
    """``--gpus all|0,1,...``: measurements shard their points over these GPUs (one worker per
    GPU, deterministic shards), through $SPECSAMPLE_GPUS, which the asv benchmark processes see."""
    spec = getattr(args, "gpus", None)
    if not spec:
        return
    import torch

    count = torch.cuda.device_count()
    if spec == "all":
        gpus = [str(i) for i in range(count)]
    else:
        gpus = [g.strip() for g in spec.split(",") if g.strip()]
        bad = [g for g in gpus if not g.isdigit() or int(g) >= count]
        if bad or not gpus:
            raise UsageError(f"--gpus: expected 'all' or indices below {count} (GPUs here), got {spec!r}")
    os.environ["SPECSAMPLE_GPUS"] = ",".join(gpus)


def _set_vllm_repo(args: argparse.Namespace) -> None:
    repo = getattr(args, "vllm_repo", None)
    if repo:
        if not Path(repo).is_dir():
            raise UsageError(f"--vllm-repo: {repo} is not a directory")
        os.environ["SPECSAMPLE_VLLM_REPO"] = str(Path(repo).resolve())


def _resolve_subjects(names: list[str]) -> None:
    """Load every named subject once here, so an unknown release, a missing ref or a corrupt
    cache entry is one clear error before any measurement starts."""
    from . import subjects

    for name in names:
        try:
            subjects.get(name)
        except (subjects.SubjectError, subjects.NotSupported, ValueError) as exc:
            raise UsageError(str(exc)) from None


# ---- compare ---------------------------------------------------------------------------------


def cmd_compare(args: argparse.Namespace) -> int:
    from . import worker
    from .timing import copy_bandwidth

    _set_vllm_repo(args)
    names = _subject_names(args.subjects)
    paths = _path_grid(args)  # bad path input is a usage error before anything else
    _check_path_requests(paths, names)
    _require_gpu("specsample compare")
    _resolve_subjects(names)
    grid = itertools.product(args.mode, args.draft, args.num_reqs, args.K, args.vocab_size, args.phi)
    units = []
    for i, ((mode, draft, r, k, v, phi), path) in enumerate(itertools.product(grid, paths)):
        point = dict(
            mode=mode,
            draft=draft,
            num_reqs=r,
            num_speculative_steps=k,
            vocab_size=v,
            placeholder_density=phi,
            placeholder_pattern=args.pattern,
            **path,
        )
        units.append(worker.Unit(f"compare/{i}", point, tuple(names)))
    bw = copy_bandwidth()
    options = worker.JobOptions(l2=args.l2, num_samples=args.samples)
    outcome = worker.run_units(units, options, log=lambda line: print(line, flush=True))
    rows = []
    for unit in units:
        base = outcome.records[unit.key].get("mrv2", {})
        for name in names:
            record = outcome.records[unit.key].get(name, {"status": "failed", "reason": "not measured"})
            row = dict(unit.point, subject=name, status=record["status"])
            if record["status"] == "ok":
                row.update(
                    median_us=record["median"] * 1e6,
                    method=record["method"],
                    l2=record["l2"],
                    bandwidth_fraction=record["bytes"] / record["median"] / bw,
                    ratio_to_mrv2=record["median"] / base["median"] if base.get("status") == "ok" else None,
                    semantics=record.get("semantics"),
                    acceptance_rate=record.get("acceptance_rate"),
                    deferral_rate=record.get("deferral_rate"),
                )
            else:
                row["reason"] = record.get("reason")
            rows.append(row)
            print(_format_row(row), flush=True)
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                {"copy_bandwidth_gbps": bw / 1e9, "provenance": outcome.provenance, "rows": rows}, indent=1, default=str
            )
        )
    return 2 if any(r["status"] in ("failed", "crashed") for r in rows) else 0


_PATH_OPTIONS = {  # path axis -> (option dest, how a value is read)
    "logits_shape": ("logits_shape", str),
    "row_entropy": ("row_entropy", str),
    "masked_vocab_fraction": ("masked_vocab_fraction", float),
    "skip_masked_vocab_blocks": ("skip_masked_vocab_blocks", lambda v: v == "on"),
    "fly_window_size": ("fly_window_size", int),
    "watermark": ("watermark", lambda v: v == "on"),
    "draft_cache": ("draft_cache", str),
}


def _path_grid(args: argparse.Namespace) -> list[dict]:
    """The path axes' combinations asked for (each at its default unless given); a combination
    that is not a workload (vLLM forbids it, a value out of range) is a usage error."""
    from .workloads import workload_of

    axes = {}
    for axis, (dest, read) in _PATH_OPTIONS.items():
        try:
            axes[axis] = [read(v) for v in getattr(args, dest)]
        except ValueError:
            raise UsageError(
                f"specsample compare: --{dest.replace('_', '-')}: not a number: {getattr(args, dest)}"
            ) from None
    grid = [dict(zip(axes, combo)) for combo in itertools.product(*axes.values())]
    for mode, draft, path in itertools.product(args.mode, args.draft, grid):
        try:
            workload_of(
                dict(
                    mode=mode,
                    draft=draft,
                    num_reqs=args.num_reqs[0],
                    num_speculative_steps=args.K[0],
                    vocab_size=args.vocab_size[0],
                    placeholder_density=args.phi[0],
                    placeholder_pattern=args.pattern,
                    **path,
                )
            )
        except ValueError as exc:
            raise UsageError(f"specsample compare: {mode} mode, {draft} drafts: {exc}") from None
    return grid


def _check_path_requests(paths: list[dict], names: list[str]) -> None:
    """A path asked for on a subject that lacks it: one clear usage error, before measuring (a
    subject that cannot be loaded is left to :func:`_resolve_subjects`)."""
    from . import subjects
    from .schema import paths_of

    asked = {p for point in paths for p in paths_of(point)}
    if not asked:
        return
    for name in names:
        try:
            have = subjects.get(name).capabilities.paths
        except (subjects.SubjectError, subjects.NotSupported, ValueError):
            continue
        missing = [p for p in sorted(asked) if p not in have]
        if missing:
            raise UsageError(
                f"specsample compare: {name} has no {' or '.join(missing)} path (its paths: "
                f"{', '.join(have) or 'none'}); drop it from --subjects or leave the path off"
            )


def _format_row(row: dict) -> str:
    where = (
        f"{row['subject']:>17} {row['mode']:>8} {row['draft']:>7} R={row['num_reqs']:<4} "
        f"K={row['num_speculative_steps']} V={row['vocab_size']:<6} phi={row['placeholder_density']:<4}"
    )
    from .schema import PATH_DEFAULTS

    paths = [f"{k}={row[k]}" for k, v in PATH_DEFAULTS.items() if k in row and row[k] != v]
    if paths:
        where += " " + " ".join(paths)
    if row["status"] != "ok":
        return f"{where}  {row['status']}: {row.get('reason')}"
    ratio = f"  x{row['ratio_to_mrv2']:.3f} of mrv2" if row.get("ratio_to_mrv2") is not None else ""
    for key, label in (("acceptance_rate", "accept"), ("deferral_rate", "defer")):
        if row.get(key) is not None:
            ratio += f"  {label} {row[key]:.2f}"
    return (
        f"{where}  {row['median_us']:9.1f} us  bw {row['bandwidth_fraction']:.2f}{ratio}  "
        f"[{row['semantics']}; {row['method']}, {row['l2']} L2]"
    )


# ---- asv runs --------------------------------------------------------------------------------


def _tier_needs(tier: str, command: str) -> bool:
    """True when the tier runs under Triton's interpreter here (smoke without a GPU); refuses
    every other tier without a GPU."""
    from .machine import cuda_unavailable

    if tier == "smoke" and cuda_unavailable():
        return True
    _require_gpu(command)
    return False


def _fetch_tier_releases(tier: str) -> None:
    """The vLLM releases a tier measures, fetched into the cache if missing (network needed)."""
    from .subjects.vllm import store
    from .tiers import sweeps

    wanted = sorted(
        {
            parse_subject(s).version
            for sw in sweeps(tier)
            for s in sw.subjects
            if parse_subject(s).kind == "vllm-release"
        }
    )
    missing = [v for v in wanted if v not in store.cached_releases()]
    for version in missing:
        print(f"specsample: fetching vllm=={version} (the {tier} tier measures it)", flush=True)
        try:
            store.fetch_release(version)
        except Exception as exc:  # noqa: BLE001 - measured as failed points if it cannot be had
            print(f"specsample: vllm=={version} not fetched ({exc}); its points will fail", file=sys.stderr)


def _results_dir(args: argparse.Namespace, repo: Path, interpret: bool) -> Path:
    """Where a run files its results: ``--results-dir``, else the committed ``results/`` for a GPU
    run and the git-ignored ``specsample-results/`` for a CPU-interpreter run, so that a smoke run
    neither adds a CPU machine to the committed results nor rewrites their ``benchmarks.json``."""
    if args.results_dir:
        return Path(args.results_dir)
    return repo / (INTERPRETER_RESULTS if interpret else "results")


def cmd_bench(args: argparse.Namespace) -> int:
    _set_gpus(args)
    from .runs.asv import RunError, run_lock, run_tier, worktree

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
                    args.tier, repo=repo, results_dir=results, machine=machine, bench=args.bench, interpret=interpret
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
                    )
    except RunError as exc:
        raise UsageError(f"specsample bench: {exc}") from None
    return 0


def cmd_backfill(args: argparse.Namespace) -> int:
    _set_gpus(args)
    from .runs.asv import RunError, backfill, run_lock, run_tier

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
        from .tiers import MRV2_RELEASES

        unknown = [r for r in releases if parse_subject(r).version not in MRV2_RELEASES]
        if unknown:
            raise UsageError(
                f"backfill: {', '.join(unknown)} not in the releases tier (MRV2 releases: {', '.join(MRV2_RELEASES)})"
            )
        from .subjects.vllm import fetch

        for name in releases:
            try:
                fetch([parse_subject(name).version])
            except Exception as exc:  # noqa: BLE001
                raise UsageError(f"backfill: {exc}") from None
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

    from . import discovery, tiers
    from .subjects.vllm import store

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
    from .runs.asv import RunError, publish, run_lock, run_tier

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
            run_tier("nightly", repo=repo, results_dir=results, machine=machine)
            vllm_repo = os.environ.get("SPECSAMPLE_VLLM_REPO")
            if vllm_repo and not args.no_bisect:
                # A change point that showed up on vllm@main tonight: bisect it over vLLM's commits.
                from .bisect.nightly import auto_bisect

                auto_bisect(results, machine, Path(vllm_repo), log=lambda line: print(line, flush=True))
            publish(repo, results, repo / "html")
            build_site(results, repo / "dashboards")
    except RunError as exc:
        raise UsageError(f"specsample nightly: {exc}") from None
    print(f"specsample nightly: done in {time.monotonic() - start:.0f} s")
    return 0


def build_site(results: Path, out: Path, machine: str | None = None) -> Path:
    from .dashboard import build_dashboard
    from .track.results import load_results

    if not results.is_dir():
        raise UsageError(f"specsample dashboard: no results directory {results}")
    start = time.monotonic()
    df, problems = load_results(results)
    for problem in problems:
        print(f"specsample: skipped {problem.path}: {problem.reason}", file=sys.stderr)
    if df.empty:
        raise UsageError(f"specsample dashboard: no results under {results}")
    try:
        index = build_dashboard(df, out, machine=machine, results_dir=results)
    except ValueError as exc:
        raise UsageError(f"specsample dashboard: {exc}") from None
    print(f"specsample dashboard: {len(df)} result rows -> {index} in {time.monotonic() - start:.1f} s")
    return index


def cmd_dashboard(args: argparse.Namespace) -> int:
    build_site(Path(args.results_dir), Path(args.out), args.machine)
    return 0


def cmd_regressions(args: argparse.Namespace) -> int:
    from .track import changepoints
    from .track.results import load_results

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


# ---- sign-off --------------------------------------------------------------------------------


def cmd_signoff(args: argparse.Namespace) -> int:
    from .runs import paired
    from .track import signoff

    _set_vllm_repo(args)
    if args.results:
        return _signoff_results(args)
    if not (args.base and args.head):
        raise UsageError(
            "specsample signoff: give BASE HEAD (commits, or subjects such as vllm==0.32.0 "
            "vllm==0.33.0), or --results BASE HEAD"
        )
    _check_noise_options(args, "specsample signoff")
    tier = args.tier or "quick"
    min_effect = signoff.PAIRED_MIN_EFFECT if args.min_effect is None else args.min_effect
    min_abs = signoff.PAIRED_MIN_ABS_SECONDS if args.min_abs_us is None else args.min_abs_us * 1e-6
    common = dict(
        tier=tier,
        sweeps=args.sweep,
        samples=args.samples,
        alpha=args.alpha,
        min_effect=min_effect,
        min_abs_seconds=min_abs,
        allow_missing=args.allow_missing,
        fail_on_inconclusive=args.fail_on_inconclusive,
        sampling={"noise_target": args.noise_target, "time_cap_s": args.time_cap, "lock_clocks": args.lock_clocks},
        log=lambda line: print(line, flush=True),
    )
    try:
        # Every name is resolved first, so an unknown commit or subject is exit 2 before any
        # measurement (and on a machine without a GPU too).
        if _is_subject(args.base) or _is_subject(args.head) or args.vllm_repo:
            if args.subjects:
                raise UsageError(
                    "specsample signoff: --subjects selects our subjects of two commits; with "
                    "subjects as BASE HEAD the points are those of the tier's mrv2"
                )
            base, head = (_as_ref_subject(x, args.vllm_repo) for x in (args.base, args.head))
            for name in (base, head):
                paired.check_subject(name)
            where = _signoff_device(args, tier)
            result = paired.signoff_subjects(base, head, **where, **common)
        else:
            repo = _repo_root()
            for rev in (args.base, args.head):
                paired.resolve_rev(repo, rev)
            where = _signoff_device(args, tier)
            result = paired.signoff_commits(repo, args.base, args.head, subjects=args.subjects, **where, **common)
    except paired.SignoffError as exc:
        raise UsageError(f"specsample signoff: {exc}") from None
    report, code = result.report, result.exit_code
    if not args.no_exactness:
        report, code = _signoff_exactness(args, where, report, code)
    print(report)
    if args.report:
        Path(args.report).write_text(report)
    return code


def _signoff_exactness(args: argparse.Namespace, where: dict, report: str, code: int) -> tuple[str, int]:
    """Sign-off's exactness rows (docs/exactness.md): each side's subjects checked on the GPU; a
    head that turns biased where its base was exact is exit 2. Skipped, with a note, where the
    sign-off ran under the interpreter."""
    from . import exactness
    from .track.signoff import exactness_rows

    if where.get("device") == "cpu":
        return report + "\n## Exactness\n\nNot checked: no GPU (`--no-exactness` skips it).\n", code
    if _is_subject(args.base) or _is_subject(args.head) or args.vllm_repo:
        sides = [[_as_ref_subject(x, args.vllm_repo)] for x in (args.base, args.head)]
    else:
        names = args.subjects or ["mrv2", "fast", "express"]
        sides = [[f"{n}@{_rev(rev)}" for n in names] for rev in (args.base, args.head)]
    draftings = ["independent", "production"]
    base_rows, head_rows = (
        [r.to_json() for r in exactness.run(names, draftings, log=lambda line: print(line, flush=True))]
        for names in sides
    )
    text, turned = exactness_rows.section(base_rows, head_rows)
    return report + "\n" + text, exactness_rows.exit_code(code, turned)


def cmd_exactness(args: argparse.Namespace) -> int:
    """``specsample exactness``: the output law of each subject against the target's
    (docs/exactness.md). Exit 0: every real subject exact and the planted control flagged; 1: a
    real subject biased or failed, or the control not flagged; 2: bad input, nothing written."""
    from . import exactness

    names = list(dict.fromkeys(args.subjects))
    _subject_names([n for n in names if n != exactness.PLANTED])
    if args.num_trials < 1 or args.vocab_size < 2 or args.num_speculative_steps < 1:
        raise UsageError("specsample exactness: --num-trials, --num-speculative-steps >= 1 and --vocab-size >= 2")
    if "block" in args.modes and args.vocab_size**args.num_speculative_steps > exactness.MAX_ENUMERATED:
        raise UsageError(
            f"specsample exactness: block mode enumerates V ** K draft sequences; "
            f"{args.vocab_size} ** {args.num_speculative_steps} is over {exactness.MAX_ENUMERATED}"
        )
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before anything imports Triton
        machine = args.machine or "cpu-interpreter"
    else:
        _require_gpu("specsample exactness")
        machine = _machine(args)
    # A full hash is taken as given: the GPU box may get a copy of the tree without its .git.
    full = args.commit is not None and len(args.commit) == 40 and all(c in "0123456789abcdef" for c in args.commit)
    commit = args.commit if full else _rev(args.commit or "HEAD")
    _set_vllm_repo(args)
    rows = exactness.run(
        names,
        list(dict.fromkeys(args.drafting)),
        list(dict.fromkeys(args.modes)),
        num_trials=args.num_trials,
        vocab_size=args.vocab_size,
        num_speculative_steps=args.num_speculative_steps,
        device=args.device,
        seed=args.seed,
        log=lambda line: print(line, flush=True),
    )
    out = Path(args.results_dir) / machine / f"{commit[:8]}{exactness.SUFFIX}"
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("w") as f:
        for row in rows:
            row.machine, row.commit = machine, commit
            f.write(json.dumps(row.to_json(), sort_keys=True) + "\n")
    print(f"wrote {out}")
    return exactness.exit_code(rows)


def cmd_bisect(args: argparse.Namespace) -> int:
    from .bisect import BisectError, bisect, report, runner
    from .track import signoff

    _set_vllm_repo(args)
    _check_noise_options(args, "specsample bisect")
    try:
        subject, point, good, bad, change = _bisect_what(args)
        vllm = bool(args.vllm_repo)
        repo = Path(args.vllm_repo).resolve() if vllm else _repo_root()
        commits = runner.commit_range(repo, good, bad)
        target = runner.Target(repo, "vllm" if vllm else subject, point, vllm)
        runner.check_point(target, commits[0], commits[-1])
    except BisectError as exc:
        raise UsageError(f"specsample bisect: {exc}") from None
    host = args.host
    if not host:
        _require_gpu("specsample bisect")
    machine = "cpu-interpreter" if host else _machine(args)
    measurer = runner.PairedMeasurer(
        target,
        commits[0],
        commits[-1],
        samples=args.samples,
        noise_target=args.noise_target,
        time_cap_s=args.time_cap,
        lock_clocks=args.lock_clocks,
        device="cpu" if host else "cuda",
        host=host,
        l2="warm" if host else "cold",
        min_effect=signoff.PAIRED_MIN_EFFECT if args.min_effect is None else args.min_effect,
        min_abs_seconds=signoff.PAIRED_MIN_ABS_SECONDS if args.min_abs_us is None else args.min_abs_us * 1e-6,
        log=lambda line: print(line, flush=True),
    )
    print(
        f"specsample bisect: {len(commits)} commits {commits[0][:10]}..{commits[-1][:10]} of {repo}, "
        f"{target.name_at('<commit>')} at {_point_text(point)}",
        flush=True,
    )
    try:
        result = bisect(commits, measurer, max_effort=args.max_effort)
    except BisectError as exc:
        raise UsageError(f"specsample bisect: {exc}") from None
    context = {
        "repo": str(repo),
        "vllm": vllm,
        "subject": target.name_at("<commit>"),
        "point": point,
        "point_label": _point_text(point),
        "change": change,
        "machine": machine,
        "gpu_state": measurer.gpu,
        "options": {
            "samples": args.samples,
            "min_effect": measurer.min_effect,
            "min_abs_seconds": measurer.min_abs_seconds,
            "noise_target": args.noise_target,
            "time_cap_s": args.time_cap,
            "lock_clocks": args.lock_clocks,
            "max_effort": args.max_effort,
        },
    }
    out = Path(args.out)
    json_path, md_path = report.write(result, context, out)
    print(report.headline(result))
    print(f"specsample bisect: wrote {json_path} and {md_path}")
    return report.exit_code(result)


def _point_text(point: dict) -> str:
    from .track.changepoints import point_label

    return point_label(point)


def _check_noise_options(args: argparse.Namespace, command: str) -> None:
    target = getattr(args, "noise_target", None)
    if target is not None and not target > 0:
        raise UsageError(f"{command}: --noise-target must be > 0 (a relative half-width, e.g. 0.005), got {target}")
    cap = getattr(args, "time_cap", None)
    if cap is not None and not cap > 0:
        raise UsageError(f"{command}: --time-cap must be > 0 seconds, got {cap}")


def _bisect_what(args: argparse.Namespace) -> tuple[str, dict, str, str, dict | None]:
    """(subject, point, GOOD, BAD, change) from the options, or from ``--change ID``."""
    from .bisect import BisectError
    from .schema import BASE_POINT

    point = {
        axis: value
        for axis, value in (
            ("mode", args.mode),
            ("draft", args.draft),
            ("num_reqs", args.num_reqs),
            ("num_speculative_steps", args.num_speculative_steps),
            ("vocab_size", args.vocab_size),
            ("placeholder_density", args.placeholder_density),
            ("placeholder_pattern", args.placeholder_pattern),
        )
        if value is not None
    }
    subject = args.subjects or "mrv2"
    good, bad, change = args.good, args.bad, None
    if args.change:
        from .track import changepoints
        from .track.results import load_results

        results = Path(args.results_dir)
        if not results.is_dir():
            raise BisectError(f"--change: no results directory {results}")
        df, _ = load_results(results)
        if args.machine:
            df = df[df["machine"] == args.machine]
        try:
            change = changepoints.find_change(changepoints.detect_all(df), args.change)
        except ValueError as exc:
            raise BisectError(str(exc)) from None
        found = {k: change[k] for k in BASE_POINT if change.get(k) is not None}
        point = {**found, **point}
        if not args.subjects and change.get("subject") and "@" not in str(change["subject"]):
            subject = change["subject"]
        if good is None or bad is None:
            if change["dimension"] != "commits" or (args.vllm_repo and str(change.get("subject")).startswith("vllm@")):
                raise BisectError(
                    f"--change {args.change}: give GOOD and BAD (vLLM refs) for a change of {change.get('subject')}"
                )
            good, bad = change["before"], change["after"]
    if good is None or bad is None:
        raise BisectError("give GOOD and BAD (refs), or --change ID of a change point of our commits")
    missing = [axis for axis in BASE_POINT if axis not in point]
    point.update({axis: BASE_POINT[axis] for axis in missing})
    return subject, point, good, bad, change


def _signoff_device(args: argparse.Namespace, tier: str) -> dict:
    """Where a paired sign-off measures: the GPU; or, for the smoke tier on a machine without
    one, CPU tensors under the Triton interpreter with a host timer (checks the flow only)."""
    if _tier_needs(tier, "specsample signoff"):
        return dict(device="cpu", host=True, l2="warm", environment={}, machine=args.machine or CPU_INTERPRETER_MACHINE)
    return dict(machine=_machine(args))


def _is_subject(text: str) -> bool:
    try:
        return parse_subject(text).kind != "ours@commit"
    except ValueError:
        return False


def _as_ref_subject(text: str, vllm_repo: str | None) -> str:
    """With ``--vllm-repo``, a bare ref names a commit of that checkout (``main`` -> ``vllm@main``)."""
    if vllm_repo and not _is_subject(text):
        return f"vllm@{text}"
    return text


def _signoff_results(args: argparse.Namespace) -> int:
    """``signoff --results BASE HEAD``: two subjects' committed asv results at one commit (the
    newest with both, or ``--commit``), judged at asv's threshold."""
    from .track import signoff
    from .track.results import load_results, machine_environment

    results = Path(args.results_dir)
    if not results.is_dir():
        raise UsageError(f"specsample signoff: no results directory {results}")
    if args.base or args.subjects:
        raise UsageError(
            "specsample signoff: --results BASE HEAD takes the two subjects itself (no positional "
            "BASE HEAD, no --subjects)"
        )
    base, head = args.results
    df, _ = load_results(results)
    df = df[df["metric"] == "time_sample"]
    where = f"{results}"
    if args.tier:
        df = df[df["tier"] == args.tier]
        where += f", tier {args.tier}"
    if args.sweep:
        known_sweeps = sorted(set(df["sweep"].dropna()))
        unknown = [s for s in args.sweep if s.lower() not in {k.lower() for k in known_sweeps}]
        if unknown:
            raise UsageError(
                f"specsample signoff: no time_sample results of sweep {', '.join(unknown)} in {where}; "
                f"sweeps there: {', '.join(known_sweeps) or 'none'}"
            )
        df = df[df["sweep"].str.lower().isin({s.lower() for s in args.sweep})]
        where += f", sweeps {', '.join(args.sweep)}"
    known = sorted(set(df["subject"].dropna()), key=str)
    unknown = [s for s in (base, head) if s not in known]
    if unknown:
        raise UsageError(
            f"specsample signoff: no time_sample results for {', '.join(unknown)} in {where}; "
            f"subjects there: {', '.join(known) or 'none'}"
        )
    commits = df.drop_duplicates("commit").sort_values("date", kind="stable")[["commit", "date"]]
    listing = "; ".join(
        f"{c[:8]} ({_when(d, '%Y-%m-%d')}): {', '.join(sorted(set(df[df['commit'] == c]['subject']), key=str))}"
        for c, d in zip(commits["commit"][-10:], commits["date"][-10:])
    )
    if args.commit:
        matches = [c for c in commits["commit"] if c.startswith(args.commit)]
        if len(matches) != 1:
            what = "no results" if not matches else f"{len(matches)} commits"
            raise UsageError(
                f"specsample signoff: {what} at commit {args.commit!r} in {where}; newest commits there: {listing}"
            )
        commit, how = matches[0], "given by --commit"
        lacking = [s for s in (base, head) if s not in set(df[df["commit"] == commit]["subject"])]
        if lacking:
            raise UsageError(
                f"specsample signoff: commit {commit[:8]} has no time_sample results for "
                f"{', '.join(lacking)} in {where}; newest commits there: {listing}"
            )
    else:
        commit, how = signoff.newest_commit_with(df, [base, head]), "the newest with results for both"
        if commit is None:
            raise UsageError(
                f"specsample signoff: no commit has time_sample results for both {base} and {head} "
                f"in {where}; newest commits there: {listing}"
            )
    df = df[df["commit"] == commit]
    min_effect = signoff.ASV_MIN_EFFECT if args.min_effect is None else args.min_effect
    min_abs = 0.0 if args.min_abs_us is None else args.min_abs_us * 1e-6
    verdicts = signoff.compare_variants(
        df, base, head, alpha=args.alpha, min_effect=min_effect, min_abs_seconds=min_abs
    )
    date = df["date"].iloc[0]
    notes = [
        f"From the committed asv results in {where}: commit `{commit[:8]}` ({_when(date, '%Y-%m-%d %H:%M UTC')}), {how}; "
        f"the two subjects as measured in that run."
    ]
    report = signoff.report_markdown(
        verdicts,
        machine_environment(df),
        allow_missing=args.allow_missing,
        fail_on_inconclusive=args.fail_on_inconclusive,
        title=f"specsample sign-off: {head} vs {base}",
        notes=notes,
    )
    print(report)
    if args.report:
        Path(args.report).write_text(report)
    return signoff.exit_code(verdicts, allow_missing=args.allow_missing, fail_on_inconclusive=args.fail_on_inconclusive)


def _when(date, fmt: str) -> str:
    """A results-frame date for a message (``"no date"`` where asv recorded none)."""
    import pandas as pd

    return "no date" if pd.isna(date) else date.strftime(fmt)


def cmd_signoff_validate(args: argparse.Namespace) -> int:
    from .runs import validate

    if args.smoke:
        import torch

        cuda = torch.cuda.is_available()
        if not cuda:  # before anything imports Triton: its language functions are decorated at import
            os.environ["TRITON_INTERPRET"] = "1"
    else:
        _require_gpu("specsample signoff-validate")
        cuda = True
    repo = Path(args.repo) if args.repo else _git_toplevel()
    machine = args.machine or (CPU_INTERPRETER_MACHINE if not cuda else _machine(args))
    opts = validate.options(
        Path(args.out),
        repo,
        smoke=args.smoke,
        cuda=cuda,
        tier=args.tier,
        sweeps=tuple(args.sweep or ()),
        subjects=tuple(args.subjects or ()),
        samples=args.samples,
        aa_runs=args.aa_runs,
        targets=args.targets,
        budget=args.budget,
        machine=machine,
        alpha=args.alpha,
        min_effect=args.min_effect,
        min_abs_seconds=None if args.min_abs_us is None else args.min_abs_us * 1e-6,
    )
    try:
        return validate.validate(opts)
    except validate.ValidationError as exc:
        raise UsageError(f"specsample signoff-validate: {exc}") from None


def _git_toplevel() -> Path:
    import subprocess

    proc = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise UsageError("specsample signoff-validate: run it inside a git checkout of specsample, or give --repo")
    return Path(proc.stdout.strip())


def _rev(rev: str) -> str:
    import subprocess

    from .runs.asv import git

    try:
        return git(_repo_root(), "rev-parse", "--verify", f"{rev}^{{commit}}")
    except subprocess.CalledProcessError:
        raise UsageError(f"{rev!r} is not a commit of {_repo_root()}") from None


# ---- vLLM cache ------------------------------------------------------------------------------


def cmd_vllm_fetch(args: argparse.Namespace) -> int:
    from .subjects import SubjectError
    from .subjects.vllm import fetch

    if not args.releases and not args.from_wheel:
        raise UsageError("specsample vllm fetch: give releases (X.Y.Z ...) or --from-wheel PATH")
    versions = [r.removeprefix("vllm==") for r in args.releases]
    failed = 0
    for version in versions or [None]:
        start = time.monotonic()
        try:
            (entry,) = fetch([version] if version else [], from_wheel=args.from_wheel)
        except SubjectError as exc:
            print(f"specsample vllm fetch: {exc}", file=sys.stderr)
            failed += 1
            continue
        print(
            f"{entry.label}: {len(entry.files)} files ({', '.join(entry.files)}) -> {entry.root.parent} "
            f"in {time.monotonic() - start:.1f} s"
        )
    return 2 if failed else 0


def cmd_vllm_list(args: argparse.Namespace) -> int:
    from .subjects import SubjectError
    from .subjects.cache import cache_root
    from .subjects.vllm import store

    print(f"cache: {cache_root()}")
    for version in store.cached_releases():
        # Exit 1 of --index means "a newer release exists" to the nightly glue, so a bad cache
        # entry must not end in a traceback (exit 1): one line, exit 2.
        try:
            entry = store.release(version)
        except SubjectError as exc:
            raise UsageError(f"specsample vllm list: {exc}") from None
        left_out = f" ({len(entry.stand_ins)} modules it imports left out)" if entry.stand_ins else ""
        print(
            f"vllm=={version}: {len(entry.files)} files from {entry.manifest.get('wheel')}{left_out}; "
            f"paths: {_release_paths(version)}"
        )
    if not args.index:
        return 0
    return _vllm_index(store)


def _release_paths(version: str) -> str:
    """The sampler paths (docs/paths.md) a cached release has, read from its signature."""
    from . import subjects

    try:
        return ", ".join(subjects.get(f"vllm=={version}").capabilities.paths) or "none"
    except (subjects.SubjectError, subjects.NotSupported) as exc:
        return f"unknown ({exc})"


def _vllm_index(store) -> int:
    """``vllm list --index``: the index's releases beside the tiers'; 1 if the index has a newer
    one than :data:`specsample.tiers.MRV2_RELEASES` (the tiers do not measure it yet)."""
    from .schema import release_key
    from .subjects import SubjectError
    from .tiers import MRV2_RELEASES

    try:
        released = store.index_releases()
    except SubjectError as exc:
        print(f"specsample vllm list: {exc}", file=sys.stderr)
        return 2
    cached = set(store.cached_releases())
    newest = release_key(MRV2_RELEASES[-1])
    newer = [v for v in released if release_key(v) > newest]
    print(f"package index: {len(released)} releases from {released[0] if released else '-'} on")
    for version in released:
        where = ["tiers" if version in MRV2_RELEASES else "not in the tiers", "cached" if version in cached else ""]
        print(f"  vllm=={version}: {', '.join(w for w in where if w)}")
    if newer:
        print(
            f"specsample vllm list: the index has {', '.join('vllm==' + v for v in newer)}, newer than the newest "
            f"release the tiers measure (vllm=={MRV2_RELEASES[-1]}): append it to specsample.tiers.MRV2_RELEASES "
            f"once its sampler loads (specsample vllm fetch {newer[-1]})",
            file=sys.stderr,
        )
        return 1
    return 0


def cmd_gpuinfo(args: argparse.Namespace) -> int:
    from .machine import gpu_info

    print(json.dumps(gpu_info(), indent=2))
    return 0


# ---- developer tools (specsample.devtools) ----------------------------------------------------


def cmd_tune(args: argparse.Namespace) -> int:
    from .devtools import tune

    try:
        opts = tune.options(args.workload, args.candidate, args.stages, args.before, args.sampler)
    except ValueError as exc:
        raise UsageError(f"specsample tune: {exc}") from None
    _require_gpu("specsample tune")
    out = args.out or f"tune-{opts.sampler}.json"
    tune.run(opts, Path(out), log=lambda line: print(line, flush=True))
    return 0


def cmd_noise_floor(args: argparse.Namespace) -> int:
    _require_gpu("specsample noise-floor")
    from .devtools import noise_floor

    noise_floor.run(
        args.num_reqs,
        args.vocab_size,
        args.num_speculative_steps,
        Path(args.out),
        log=lambda line: print(line, flush=True),
    )
    return 0


def cmd_goals(args: argparse.Namespace) -> int:
    from .devtools import goals
    from .track.results import load_results

    results = Path(args.results_dir)
    if not results.is_dir():
        raise UsageError(f"specsample goals: no results directory {results}")
    try:
        spec = goals.load_goals(args.goals)
        df, _ = load_results(results)
        rows, machine = goals.select(df, args.commit, args.machine, args.tier)
    except goals.GoalsError as exc:
        raise UsageError(f"specsample goals: {exc}") from None
    print(goals.header(rows, machine, args.tier))
    print(goals.report(rows, spec))
    if args.readme:
        # The marker names the command that wrote the block, so that it can be regenerated.
        named = [args.commit, *(["--goals", args.goals] if args.goals else []), "--tier", args.tier]
        named += ["--machine", args.machine] if args.machine else []
        named += ["--results-dir", args.results_dir] if args.results_dir != "results" else []
        block = goals.readme_block(rows, spec, machine, args.tier, " ".join(named))
        try:
            changed = goals.rewrite_readme(args.readme, block)
        except goals.GoalsError as exc:
            raise UsageError(f"specsample goals: {exc}") from None
        print(f"specsample goals: {args.readme}: figures block {'rewritten' if changed else 'already up to date'}")
    return 0


# ---- parser ----------------------------------------------------------------------------------


class _Formatter(argparse.ArgumentDefaultsHelpFormatter, argparse.RawDescriptionHelpFormatter):
    pass


def _add_path_options(p: argparse.ArgumentParser) -> None:
    """vLLM's newer sampler paths as workload axes (docs/paths.md); each defaults to off."""
    from .schema import DRAFT_CACHES, LOGITS_SHAPES, PATH_DEFAULTS, ROW_ENTROPIES

    g = p.add_argument_group("sampler paths (docs/paths.md)")
    g.add_argument("--logits-shape", nargs="+", default=[PATH_DEFAULTS["logits_shape"]], choices=LOGITS_SHAPES)
    g.add_argument(
        "--row-entropy",
        nargs="+",
        default=[PATH_DEFAULTS["row_entropy"]],
        choices=ROW_ENTROPIES,
        help="target rows' top-3 entropy against FLy's threshold: how often FLy may defer",
    )
    g.add_argument("--masked-vocab-fraction", nargs="+", default=["0.0"], help="vocabulary masked to -inf, in ranges")
    g.add_argument("--skip-masked-vocab-blocks", nargs="+", default=["off"], choices=["off", "on"])
    g.add_argument("--fly-window-size", nargs="+", default=["0"], help="FLy deferral window W (0: off)")
    g.add_argument("--watermark", nargs="+", default=["off"], choices=["off", "on"])
    g.add_argument("--draft-cache", nargs="+", default=[PATH_DEFAULTS["draft_cache"]], choices=DRAFT_CACHES)


def _add_vllm_repo(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--vllm-repo",
        metavar="PATH",
        default=None,
        help="vLLM git checkout whose refs vllm@REF names (without it: $SPECSAMPLE_VLLM_REPO); "
        "for signoff, BASE and HEAD are then refs of that checkout",
    )


def _add_gpus(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--gpus",
        metavar="all|0,1,...",
        default=None,
        help="shard the points over these GPUs, one worker process each (default: one GPU)",
    )


def _add_results_dir(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--results-dir",
        default=None,
        help=f"where results are filed; None: results/ on a GPU, {INTERPRETER_RESULTS}/ for a CPU smoke run",
    )


def _add_noise_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--noise-target",
        type=float,
        default=None,
        help="sample until the median's 99%% CI half-width is below this fraction (e.g. 0.005), at least "
        "--samples; None: exactly --samples",
    )
    p.add_argument(
        "--time-cap", type=float, default=20.0, help="seconds per point before a noise target gives up (inconclusive)"
    )
    p.add_argument(
        "--lock-clocks",
        action="store_true",
        help="lock the SM clock where the box allows it (NVML); the results say whether it did",
    )


def _add_machine(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--machine",
        default=os.environ.get("SPECSAMPLE_MACHINE"),
        help="asv machine name (default: $SPECSAMPLE_MACHINE, else named after the GPU found, e.g. h200)",
    )


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="specsample", description=__doc__, formatter_class=_Formatter)
    p.add_argument("--version", action="version", version=f"specsample {__version__}")
    sub = p.add_subparsers(dest="command", required=True, metavar="COMMAND")
    subjects_help = f"subjects: {', '.join(OUR_SUBJECTS)}, NAME@COMMIT, vllm==X.Y.Z, vllm@REF, vllm"

    c = sub.add_parser(
        "compare",
        help="time subjects side by side (interleaved, one process)",
        formatter_class=_Formatter,
        description=subjects_help,
    )
    c.add_argument("--subjects", nargs="+", default=["mrv2", "mrv2-pre50939"], help="what to time")
    c.add_argument("--mode", nargs="+", default=["standard", "block"], choices=MODES, help="verification modes")
    c.add_argument("--draft", nargs="+", default=["logits"], choices=["logits", "one-hot"], help="draft kinds")
    c.add_argument("--num-reqs", nargs="+", type=int, default=[128], help="batch sizes R")
    c.add_argument(
        "--num-speculative-steps", "-K", dest="K", nargs="+", type=int, default=[4], help="speculative steps K"
    )
    c.add_argument("--vocab-size", nargs="+", type=int, default=[151936], help="vocab sizes V")
    c.add_argument(
        "--placeholder-density",
        "--phi",
        dest="phi",
        nargs="+",
        type=float,
        default=[0.0, 0.5, 1.0],
        help="placeholder densities phi",
    )
    c.add_argument(
        "--pattern", default="trailing", choices=[p for p in PATTERNS if p != "all"], help="where placeholders sit"
    )
    c.add_argument("--l2", default="cold", choices=["cold", "warm"], help="L2 state of every call")
    _add_path_options(c)
    c.add_argument("--samples", type=int, default=20, help="samples per subject and point")
    c.add_argument("--json", help="also write the rows to this JSON file")
    _add_vllm_repo(c)
    c.set_defaults(func=cmd_compare)

    b = sub.add_parser("bench", help="run one asv tier at HEAD into results/", formatter_class=_Formatter)
    b.add_argument("--tier", default="nightly", choices=TIERS, help="which tier (smoke runs on a CPU)")
    _add_machine(b)
    b.add_argument("--bench", help="asv --bench regex (default: the whole tier)")
    b.add_argument("--rev", help="measure this commit from a worktree instead of the checkout")
    b.add_argument("--no-fetch", action="store_true", help="do not fetch missing vLLM releases first")
    _add_results_dir(b)
    _add_vllm_repo(b)
    _add_gpus(b)
    b.set_defaults(func=cmd_bench)

    f = sub.add_parser(
        "backfill",
        help="benchmark past commits (each from its own worktree) or vLLM releases",
        formatter_class=_Formatter,
    )
    f.add_argument("revs", nargs="+", help="commits or ranges of this repository, or vllm==X.Y.Z releases")
    f.add_argument("--tier", default="quick", choices=TIERS, help="tier measured at each commit")
    _add_results_dir(f)
    _add_machine(f)
    _add_vllm_repo(f)
    _add_gpus(f)
    f.set_defaults(func=cmd_backfill)

    n = sub.add_parser(
        "nightly", help="bench the nightly tier, asv publish, rebuild dashboards/", formatter_class=_Formatter
    )
    _add_machine(n)
    n.add_argument("--no-fetch", action="store_true", help="do not fetch missing vLLM releases first")
    n.add_argument(
        "--no-bisect",
        action="store_true",
        help="do not bisect a new change point of vllm@main (with a checkout: results/<machine>/culprits/)",
    )
    _add_vllm_repo(n)
    _add_gpus(n)
    n.set_defaults(func=cmd_nightly)

    d = sub.add_parser("dashboard", help="build dashboards/ from results/ (no GPU needed)", formatter_class=_Formatter)
    d.add_argument("--results-dir", default="results", help="asv results directory")
    d.add_argument("--out", default="dashboards", help="where the site is written")
    d.add_argument(
        "--machine",
        default=None,
        help="the machine shown; None: the one with the newest results, never a CPU-interpreter one",
    )
    d.set_defaults(func=cmd_dashboard)

    r = sub.add_parser(
        "regressions",
        help="change points in the results' history: exit 1 if a regression, 0 if none, 2 bad input",
        formatter_class=_Formatter,
        description="Steps in every series (machine, benchmark, point) over commits, and over vLLM releases, "
        "found with asv's step detection, each above the measured noise "
        "(specsample.track.changepoints): ranked regressions and improvements still present at the "
        "newest commit or release, and the newest commit against the previous one. Latency series "
        "only (a ratio to mrv2 or a bandwidth fraction moves with what it is divided by); a stage "
        "that steps while its call does not is listed as a stage shift and does not count.",
    )
    r.add_argument("--results-dir", default="results", help="asv results directory")
    r.add_argument("--machine", help="only this machine's results; None: every machine in --results-dir")
    r.add_argument("--json", metavar="FILE", help="also write every change and the newest-vs-previous summary here")
    r.set_defaults(func=cmd_regressions)

    s = sub.add_parser(
        "signoff",
        help="did anything get slower? exit 0 pass, 1 regression, 2 not verified",
        formatter_class=_Formatter,
        description=subjects_help,
    )
    s.add_argument("base", nargs="?", help="base: a commit, a subject (vllm==0.32.0), or with --vllm-repo a ref")
    s.add_argument("head", nargs="?", help="head: the same kind as base (head == base: an A/A run)")
    s.add_argument(
        "--results",
        nargs=2,
        metavar=("BASE", "HEAD"),
        help="compare two subjects' committed results instead of measuring (newest commit with both)",
    )
    s.add_argument("--commit", help="with --results: this commit's results instead of the newest with both")
    s.add_argument("--results-dir", default="results", help="asv results directory (--results)")
    s.add_argument(
        "--tier",
        default=None,
        choices=TIERS,
        help="the points measured (default quick; smoke runs on a CPU); with --results, only this tier's results",
    )
    s.add_argument("--sweep", action="append", metavar="NAME", help="only this sweep of the tier, e.g. Density")
    s.add_argument(
        "--subjects",
        nargs="+",
        action="extend",
        metavar="NAME",
        help="two commits: only these subjects of the tier, e.g. mrv2",
    )
    s.add_argument("--samples", type=int, default=30, help="samples per side and point")
    s.add_argument("--alpha", type=float, default=0.002, help="significance level of the Mann-Whitney U test")
    s.add_argument(
        "--min-effect",
        type=float,
        default=None,
        help="smallest relative change that counts (default 0.02 paired, 0.05 for --results)",
    )
    s.add_argument(
        "--min-abs-us",
        type=float,
        default=None,
        help="time points must also change by more than this many us (default 0.5 paired, 0 for --results)",
    )
    s.add_argument(
        "--allow-missing",
        action="store_true",
        help="pass points measured on one side only (listed in the report) instead of exit 2",
    )
    s.add_argument(
        "--fail-on-inconclusive",
        action="store_true",
        help="exit 2 when a point is inconclusive (neither slower, faster, nor shown the same)",
    )
    _add_noise_options(s)
    _add_machine(s)
    s.add_argument("--report", help="also write the markdown report here")
    s.add_argument("--no-exactness", action="store_true", help="skip the exactness rows (docs/exactness.md)")
    _add_vllm_repo(s)
    s.set_defaults(func=cmd_signoff)

    bi = sub.add_parser(
        "bisect",
        help="the first commit where a point's latency moved: exit 0 found, 1 not reproducible, 2 error",
        formatter_class=_Formatter,
        description="Bisect GOOD..BAD (refs of --vllm-repo, or our commits) at one point: each step "
        "times the middle commit against GOOD and BAD in one worker process and judges it with "
        "sign-off's four-way verdict; an inconclusive step is measured again with more samples; a "
        "commit that does not load or crashes is skipped. Writes bisect.json and bisect.md to --out.",
    )
    bi.add_argument("good", nargs="?", help="a commit where the point was fine")
    bi.add_argument("bad", nargs="?", help="a later commit where it moved (GOOD must be its ancestor)")
    bi.add_argument(
        "--change",
        metavar="ID",
        help="a change point id from `specsample regressions` (its point; "
        "and GOOD and BAD for a change over our commits)",
    )
    bi.add_argument("--results-dir", default="results", help="asv results directory (--change)")
    bi.add_argument(
        "--subjects", metavar="NAME", default=None, help="our subject bisected over our commits (default mrv2)"
    )
    bi.add_argument("--mode", choices=MODES, default=None, help="verification mode (default standard)")
    bi.add_argument("--draft", choices=["logits", "one-hot"], default=None, help="draft kind (default logits)")
    bi.add_argument("--num-reqs", type=int, default=None, help="R (default 128)")
    bi.add_argument("--num-speculative-steps", "-K", type=int, default=None, help="K (default 4)")
    bi.add_argument("--vocab-size", type=int, default=None, help="V (default 151936)")
    bi.add_argument("--placeholder-density", "--phi", type=float, default=None, help="phi (default 0.5)")
    bi.add_argument(
        "--placeholder-pattern",
        choices=[p for p in PATTERNS if p != "all"],
        default=None,
        help="where placeholders sit (default trailing)",
    )
    bi.add_argument("--samples", type=int, default=30, help="samples per side at the first try of each step")
    bi.add_argument(
        "--min-effect",
        type=float,
        default=None,
        help="smallest relative change that counts, and the margin of 'same' (default 0.02)",
    )
    bi.add_argument("--min-abs-us", type=float, default=None, help="time changes must also exceed this (default 0.5)")
    _add_noise_options(bi)
    bi.add_argument(
        "--max-effort", type=int, default=2, help="retries of an inconclusive step, each with twice the samples"
    )
    bi.add_argument("--out", default="bisect", help="directory for bisect.json and bisect.md")
    bi.add_argument("--host", action="store_true", help=argparse.SUPPRESS)  # CPU interpreter: checks the flow only
    _add_machine(bi)
    _add_vllm_repo(bi)
    bi.set_defaults(func=cmd_bisect)

    ex = sub.add_parser(
        "exactness",
        help="does each subject's output follow the target's law? exit 0 exact, 1 biased, 2 bad input",
        formatter_class=_Formatter,
        description=subjects_help + ", planted (a biased control)",
    )
    ex.add_argument("--subjects", nargs="+", required=True, metavar="NAME", help="subjects to check")
    ex.add_argument(
        "--drafting",
        nargs="+",
        default=["independent"],
        choices=("independent", "production", "production-unsalted"),
        help="how drafts are drawn: independently, or by the subject's own gumbel_sample with or without its drafting flag",
    )
    ex.add_argument("--modes", nargs="+", default=["standard", "block"], choices=("standard", "block"))
    ex.add_argument("--num-trials", type=int, default=200_000, help="trials (requests) per check")
    ex.add_argument("--vocab-size", type=int, default=16)
    ex.add_argument("--num-speculative-steps", type=int, default=3)
    ex.add_argument("--seed", type=int, default=0, help="seed of the law and of the trials")
    ex.add_argument("--device", default="cuda", choices=("cuda", "cpu"), help="cpu: Triton's interpreter (tiny sizes)")
    ex.add_argument("--results-dir", default="results", help="writes <results-dir>/<machine>/<sha8>.exactness")
    ex.add_argument(
        "--commit", default=None, help="the commit the file is named after (default HEAD; a full hash needs no git)"
    )
    _add_machine(ex)
    _add_vllm_repo(ex)
    ex.set_defaults(func=cmd_exactness)

    sv = sub.add_parser(
        "signoff-validate",
        help="validate the sign-off: A/A runs and planted slowdowns",
        formatter_class=_Formatter,
        description="Calibrate the planted slowdown, plant it as throw-away commits, sign each "
        "off against head, run A/A sign-offs, and write the detection matrix "
        "(specsample.runs.validate). Exit 0 when it says PASS, else 1.",
    )
    sv.add_argument("--out", default=os.environ.get("OUT") or "validation", help="output ($OUT, else ./validation)")
    sv.add_argument("--repo", help="the specsample checkout whose HEAD is validated (default: the one around the cwd)")
    sv.add_argument("--tier", default=None, choices=TIERS, help="default quick (smoke with --smoke)")
    sv.add_argument("--sweep", action="append", metavar="NAME", help="only this sweep of the tier (repeatable)")
    sv.add_argument(
        "--subjects",
        nargs="+",
        action="extend",
        metavar="NAME",
        help="only these subjects of the tier",
    )
    sv.add_argument("--samples", type=int, default=None, help="samples per side and point (default 30; 2 with --smoke)")
    sv.add_argument("--aa-runs", type=int, default=5, help="A/A sign-offs")
    sv.add_argument("--targets", type=float, nargs="+", default=None, help="planted slowdowns (default 0.03 0.05 0.1)")
    sv.add_argument("--budget", type=float, default=450.0, help="seconds in all; runs that would not fit are left out")
    _add_machine(sv)
    sv.add_argument("--alpha", type=float, default=0.002, help="significance level of the Mann-Whitney U test")
    sv.add_argument("--min-effect", type=float, default=None, help="paired min_effect (default 0.02)")
    sv.add_argument("--min-abs-us", type=float, default=None, help="paired absolute floor in us (default 0.5)")
    sv.add_argument("--smoke", action="store_true", help="CPU: interpreter, tiny shapes, host timer (checks the flow)")
    sv.set_defaults(func=cmd_signoff_validate)

    v = sub.add_parser("vllm", help="vLLM releases in the cache ($SPECSAMPLE_CACHE)", formatter_class=_Formatter)
    vsub = v.add_subparsers(dest="vllm_command", required=True, metavar="ACTION")
    vf = vsub.add_parser(
        "fetch", help="pip download releases and extract the sampler's closure", formatter_class=_Formatter
    )
    vf.add_argument("releases", nargs="*", metavar="X.Y.Z", help="releases to fetch")
    vf.add_argument("--from-wheel", metavar="PATH", help="extract from this wheel instead of downloading")
    vf.set_defaults(func=cmd_vllm_fetch)
    vl = vsub.add_parser(
        "list",
        help="what the cache holds; --index: and the package index's releases (exit 1 if one is newer than the tiers')",
        formatter_class=_Formatter,
    )
    vl.add_argument(
        "--index",
        action="store_true",
        help="also list the package index's releases from 0.22.0 on; exit 1 if one is newer than "
        "specsample.tiers.MRV2_RELEASES' newest, 2 if the index cannot be read",
    )
    vl.set_defaults(func=cmd_vllm_list)

    g = sub.add_parser(
        "gpuinfo", help="print GPU, driver, CUDA, torch, Triton, clocks, copy bandwidth", formatter_class=_Formatter
    )
    g.set_defaults(func=cmd_gpuinfo)

    t = sub.add_parser(
        "tune",
        help="time fast's (or express's) candidate configurations beside mrv2: whole calls and kernels (GPU)",
        formatter_class=_Formatter,
        description="Time a sampler's configurations (fast: large, small, tiny; express: large, small; and any "
        "--candidate) and mrv2 on each workload, whole calls and kernels alone, interleaved, cold L2 "
        "(specsample.devtools.tune).",
    )
    t.add_argument(
        "--sampler",
        default="fast",
        choices=["fast", "express"],
        help="whose Pipeline the candidates configure (fast.Config or express.Config)",
    )
    t.add_argument(
        "--out", default=None, help="JSON of every median, rewritten after each workload; None: tune-SAMPLER.json"
    )
    t.add_argument(
        "--workload",
        action="append",
        metavar="NAME",
        help="only this workload (repeatable); None: every one of specsample.devtools.tune.WORKLOADS",
    )
    t.add_argument(
        "--candidate",
        action="append",
        default=[],
        metavar="NAME=BASE:FIELD=VALUE,...",
        help="an extra candidate: BASE (fast: large, small or tiny; express: large or small) with those "
        "Config fields replaced, e.g. w8=large:stats_warps=8, or with --sampler express "
        "b8=small:stats_blocks=8 (repeatable)",
    )
    t.add_argument(
        "--stages",
        default="large,small,before",
        metavar="NAME,...",
        help="candidates whose kernels are also timed alone (a --before module's NAME too)",
    )
    t.add_argument(
        "--before",
        action="append",
        metavar="[NAME=]MODULE",
        help="another fast.py (or express package with --sampler express), importable as this module, timed in "
        "its own defaults as NAME ('before' when not given), e.g. specsample.kernels._fast_before from "
        "`git show REF:specsample/kernels/fast.py`; repeatable, to time several variants in one measurement",
    )
    t.set_defaults(func=cmd_tune)

    nf = sub.add_parser(
        "noise-floor",
        help="a resample row's Gumbel noise alone, its bytes alone, and fast's resample kernel (GPU)",
        formatter_class=_Formatter,
        description="Time the floor of a resample with mrv2's random numbers beside fast's resample kernel, "
        "on one R x V grid in fast's resample geometry (specsample.devtools.noise_floor).",
    )
    nf.add_argument("--out", default="noise-floor.json", help="where the JSON result is written")
    nf.add_argument("--num-reqs", type=int, default=128, help="requests R")
    nf.add_argument("--vocab-size", type=int, default=151936, help="vocab size V")
    nf.add_argument("--num-speculative-steps", type=int, default=4, help="speculative steps K of the resample batch")
    nf.set_defaults(func=cmd_noise_floor)

    gl = sub.add_parser(
        "goals",
        help="one commit's committed results against the performance goals (no GPU needed)",
        formatter_class=_Formatter,
        description="Report how one commit's results stand against goals read from a JSON file "
        "(default: specsample/devtools/goals.json; its form: specsample.devtools.goals).",
    )
    gl.add_argument("commit", help="a commit hash or its prefix, as in results/<machine>/")
    gl.add_argument("--machine", default=None, help="asv machine name (default: the one with results for the commit)")
    gl.add_argument("--tier", default="nightly", choices=TIERS, help="whose results (quick: its points only)")
    gl.add_argument("--results-dir", default="results", help="asv results directory")
    gl.add_argument("--goals", metavar="FILE", default=None, help="goals file (default: the packaged goals.json)")
    gl.add_argument(
        "--readme",
        metavar="FILE",
        default=None,
        help="also rewrite FILE's figures block (between its figures markers) with a table of the goals",
    )
    gl.set_defaults(func=cmd_goals)
    return p


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except UsageError as exc:
        print(exc, file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
