"""``specsample signoff``, ``bisect``, ``signoff-validate`` and ``exactness``."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from ..schema import CPU_INTERPRETER_MACHINE, parse_subject
from .common import (
    UsageError,
    _fetch_releases,
    _machine,
    _repo_root,
    _require_gpu,
    _rev,
    _set_vllm_repo,
    _subject_names,
    _tier_needs,
)

# ---- sign-off --------------------------------------------------------------------------------


def cmd_signoff(args: argparse.Namespace) -> int:
    from ..runs import paired, resolve
    from ..track import signoff

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
            # A release the cache lacks is fetched once the GPU is known to be there.
            releases = [n for n in (base, head) if _is_subject(n) and parse_subject(n).kind == "vllm-release"]
            for name in (base, head):
                if name not in releases:
                    resolve.check_subject(name)
            where = _signoff_device(args, tier)
            _fetch_releases(releases, fetch=not args.no_fetch)
            for name in releases:
                resolve.check_subject(name)
            result = paired.signoff_subjects(base, head, **where, **common)
        else:
            repo = _repo_root()
            for rev in (args.base, args.head):
                resolve.resolve_rev(repo, rev)
            where = _signoff_device(args, tier)
            result = paired.signoff_commits(repo, args.base, args.head, subjects=args.subjects, **where, **common)
    except resolve.SignoffError as exc:
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
    from .. import exactness
    from ..track.signoff import exactness_rows

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
    from .. import exactness

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
    _fetch_releases([n for n in names if n != exactness.PLANTED], fetch=not args.no_fetch)
    out = Path(args.results_dir) / machine / f"{commit[:8]}{exactness.SUFFIX}"
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
        done=lambda rows: exactness.write(rows, out, machine, commit),  # after each subject, the last one too
    )
    print(f"wrote {out}")
    return exactness.exit_code(rows)


def cmd_bisect(args: argparse.Namespace) -> int:
    from ..bisect import BisectError, bisect, report, runner
    from ..track import signoff

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
    from ..track.changepoints import point_label

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
    from ..bisect import BisectError
    from ..schema import BASE_POINT

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
        from ..track import changepoints
        from ..track.results import load_results

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
    from ..track import signoff
    from ..track.results import load_results, machine_environment

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
        for c, d in zip(commits["commit"][::-1][:10], commits["date"][::-1][:10])
    )
    if args.commit:
        matches = [c for c in commits["commit"] if c.startswith(args.commit)]
        if len(matches) != 1:
            what = "no results" if not matches else f"{len(matches)} commits"
            raise UsageError(
                f"specsample signoff: {what} at commit {args.commit!r} in {where}; commits there, newest first: {listing}"
            )
        commit, how = matches[0], "given by --commit"
        lacking = [s for s in (base, head) if s not in set(df[df["commit"] == commit]["subject"])]
        if lacking:
            raise UsageError(
                f"specsample signoff: commit {commit[:8]} has no time_sample results for "
                f"{', '.join(lacking)} in {where}; commits there, newest first: {listing}"
            )
    else:
        commit, how = signoff.newest_commit_with(df, [base, head]), "the newest with results for both"
        if commit is None:
            raise UsageError(
                f"specsample signoff: no commit has time_sample results for both {base} and {head} "
                f"in {where}; commits there, newest first: {listing}"
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
    from ..runs import plants, validate

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
    opts = plants.options(
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
    except plants.ValidationError as exc:
        raise UsageError(f"specsample signoff-validate: {exc}") from None


def _git_toplevel() -> Path:
    import subprocess

    proc = subprocess.run(["git", "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    if proc.returncode != 0:
        raise UsageError("specsample signoff-validate: run it inside a git checkout of specsample, or give --repo")
    return Path(proc.stdout.strip())
