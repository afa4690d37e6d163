"""``specsample tune``, ``noise-floor`` and ``goals`` (:mod:`specsample.devtools`)."""

from __future__ import annotations

import argparse
from pathlib import Path

from .common import UsageError, _require_gpu

# ---- developer tools (specsample.devtools) ----------------------------------------------------


def cmd_tune(args: argparse.Namespace) -> int:
    from ..devtools import tune

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
    from ..devtools import noise_floor

    noise_floor.run(
        args.num_reqs,
        args.vocab_size,
        args.num_speculative_steps,
        Path(args.out),
        log=lambda line: print(line, flush=True),
    )
    return 0


def cmd_goals(args: argparse.Namespace) -> int:
    from ..devtools import goals
    from ..track.results import load_results

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
