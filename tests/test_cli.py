"""The command line's own description: ``specsample --help`` lists every command it has."""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import pytest

from specsample import cli, tiers
from specsample.commands import bench, common


def _subparsers(parser):
    """Every command's (and sub-command's) parser, by its prog."""
    found = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in action.choices.values():
                found[sub.prog] = sub
                found.update(_subparsers(sub))
    return found


def test_help_summary_lists_every_command():
    """The command table at the top of ``specsample --help`` names exactly the parser's commands,
    so that a command added to one is not missing from the other; it is written for users."""
    parser = cli.build_parser()
    commands = set(next(a for a in parser._actions if a.dest == "command").choices)
    table = cli.DESCRIPTION.split("--------\n", 1)[1].split("\n\n", 1)[0]
    listed = {re.match(r"(\S+)\s", line).group(1) for line in table.splitlines()}
    assert listed == commands
    assert parser.description == cli.DESCRIPTION and "argument parsing" not in parser.format_help()


def test_every_help_is_wrapped_and_says_each_default_once():
    """No help line runs past the terminal (descriptions are wrapped), no option says its default
    twice, and --vllm-repo speaks of BASE and HEAD only where the command has them."""
    parsers = _subparsers(cli.build_parser())
    assert {"specsample bench", "specsample regressions", "specsample vllm fetch"} <= set(parsers)
    for prog, sub in parsers.items():
        text = sub.format_help()
        assert max(map(len, text.splitlines())) <= 100, prog
        for action in sub._actions:
            if action.help and action.help is not argparse.SUPPRESS:
                shown = sub._get_formatter()._get_help_string(action) % {"default": action.default}
                assert shown.count("default") <= 1 + action.help.count("default"), (prog, action.dest)
                assert "(default: None)" not in shown and "(default: False)" not in shown, (prog, action.dest)
    assert "BASE and HEAD" in parsers["specsample signoff"].format_help()
    assert "signoff" not in parsers["specsample bench"].format_help()


def test_one_spelling_per_concept_with_the_short_symbols_as_aliases():
    parser = cli.build_parser()
    long = parser.parse_args(["compare", "--placeholder-density", "0.5", "1", "--num-speculative-steps", "3"])
    short = parser.parse_args(["compare", "--phi", "0.5", "1", "-K", "3"])
    assert long.phi == short.phi == [0.5, 1.0] and long.K == short.K == [3]
    signoff = parser.parse_args(["signoff", "--results", "mrv2-pre50939", "mrv2", "--results-dir", "elsewhere"])
    assert signoff.results == ["mrv2-pre50939", "mrv2"] and signoff.results_dir == "elsewhere"
    assert parser.parse_args(["signoff", "A", "B", "--subjects", "mrv2", "fast"]).subjects == ["mrv2", "fast"]
    for retired in (["compare", "--variants", "mrv2"], ["signoff", "--variants", "mrv2", "fast"]):
        try:
            parser.parse_args(retired)
        except SystemExit as exc:
            assert exc.code == 2
        else:
            raise AssertionError(f"{retired} parsed")


def test_a_cpu_smoke_run_files_its_results_outside_the_committed_ones(tmp_path):
    """Without --results-dir, a CPU-interpreter run writes under the git-ignored
    specsample-results/, never into results/ (whose benchmarks.json is committed)."""
    repo = Path(__file__).resolve().parents[1]
    args = cli.build_parser().parse_args(["bench", "--tier", "smoke"])
    assert bench._results_dir(args, tmp_path, interpret=True) == tmp_path / common.INTERPRETER_RESULTS
    assert bench._results_dir(args, tmp_path, interpret=False) == tmp_path / "results"
    named = cli.build_parser().parse_args(["backfill", "HEAD", "--results-dir", str(tmp_path / "x")])
    assert bench._results_dir(named, tmp_path, interpret=True) == tmp_path / "x"
    ignored = subprocess.run(
        ["git", "check-ignore", "-q", f"{common.INTERPRETER_RESULTS}/h"], cwd=repo, capture_output=True
    )
    assert ignored.returncode == 0, f"{common.INTERPRETER_RESULTS}/ is not git-ignored"


def test_bench_and_nightly_pass_resume_to_the_run(monkeypatch, tmp_path):
    """``--resume`` reaches run_tier from both commands (off unless given)."""
    from specsample.runs import asv as runs

    seen = []
    monkeypatch.setattr(runs, "run_tier", lambda tier, **kw: seen.append((tier, kw["resume"])) or [])
    monkeypatch.setattr(bench, "_require_gpu", lambda what: None)
    monkeypatch.setattr(bench, "_machine", lambda args: "test")
    monkeypatch.setattr(bench, "_tier_needs", lambda tier, what: False)
    monkeypatch.setattr(bench, "_repo_root", lambda: tmp_path)
    monkeypatch.setattr(runs, "publish", lambda *a: None)
    monkeypatch.setattr(bench, "build_site", lambda *a: None)
    parser = cli.build_parser()
    for argv in (["bench", "--no-fetch"], ["bench", "--no-fetch", "--resume"]):
        args = parser.parse_args(argv)
        assert args.func(args) == 0
    for argv in (["nightly", "--no-fetch", "--no-exactness"], ["nightly", "--no-fetch", "--no-exactness", "--resume"]):
        args = parser.parse_args(argv)
        assert args.func(args) == 0
    assert seen == [("nightly", False), ("nightly", True), ("nightly", False), ("nightly", True)]


# ---- vLLM releases named on the command line ---------------------------------------------------


def test_a_release_the_cache_lacks_is_fetched_once_and_a_cached_one_never(cache, tmp_path, monkeypatch, capsys):
    """A named release missing from the cache is fetched (pip download, here a test-built wheel)
    once, and then loads; ours, refs and cached releases are left alone."""
    from specsample import subjects
    from specsample.subjects.vllm import store
    from vllm_trees import make_wheel

    fetched = []

    def fetch_release(version, log=print):
        fetched.append(version)
        return store.extract_wheel(make_wheel(tmp_path, version))

    monkeypatch.setattr(store, "fetch_release", fetch_release)
    names = ["mrv2", "vllm==9.12.0", "express@1234abcd", "vllm@main", "vllm==9.12.0"]
    common._fetch_releases(names)
    common._fetch_releases(names)
    assert fetched == ["9.12.0"]
    assert "fetching vllm==9.12.0 (--no-fetch: never)" in capsys.readouterr().out
    subjects.get("vllm==9.12.0")  # loads from the cache now


def test_a_release_that_cannot_be_fetched_is_bad_input_or_a_warning(cache, monkeypatch, capsys):
    """--no-fetch fetches nothing; a failed fetch is exit 2 naming pip's reason for a release
    the user named, and a warning for a tier (whose other releases go on)."""
    from specsample.subjects.base import SubjectError
    from specsample.subjects.vllm import store

    tried = []

    def fetch_release(version, log=print):
        tried.append(version)
        raise SubjectError(f"vllm=={version}: no such release on the package index (pip says so)")

    monkeypatch.setattr(store, "fetch_release", fetch_release)
    common._fetch_releases(["vllm==9.12.0"], fetch=False)
    assert tried == []
    with pytest.raises(common.UsageError, match=r"could not be fetched: vllm==9\.12\.0: no such release"):
        common._fetch_releases(["vllm==9.12.0"])
    common._fetch_releases(["vllm==9.12.0", "vllm==9.13.0"], strict=False, why=" (the releases tier measures it)")
    assert tried == ["9.12.0", "9.12.0", "9.13.0"]
    err = capsys.readouterr().err
    assert "vllm==9.12.0 not fetched" in err and "vllm==9.13.0 not fetched" in err


class _Fetched(Exception):
    pass


def test_every_command_that_names_releases_fetches_them_unless_told_not_to(monkeypatch, tmp_path):
    """compare, signoff (two releases), exactness, bench, nightly and backfill pass their releases
    and --no-fetch to the one fetch helper before anything is measured."""
    from specsample.commands import compare, signoff
    from specsample.runs import asv

    seen = []

    def fetch(names, *, fetch=True, strict=True, why=""):
        seen.append((sorted(n for n in names if n.startswith("vllm==")), fetch, strict))
        raise _Fetched

    for module in (compare, signoff, bench):
        monkeypatch.setattr(module, "_fetch_releases", fetch)
    monkeypatch.setattr(compare, "_require_gpu", lambda what: None)
    monkeypatch.setattr(signoff, "_signoff_device", lambda args, tier: {})
    monkeypatch.setattr(bench, "_require_gpu", lambda what: None)
    monkeypatch.setattr(bench, "_machine", lambda args: "test")
    monkeypatch.setattr(bench, "_tier_needs", lambda tier, what: False)
    monkeypatch.setattr(bench, "_discover_releases", lambda: [])
    commit = "0" * 40
    parser = cli.build_parser()
    runs = [
        ["compare", "--subjects", "mrv2", "vllm==0.33.0"],
        ["compare", "--subjects", "mrv2", "vllm==0.33.0", "--no-fetch"],
        ["signoff", "vllm==0.33.0", "vllm==0.34.0"],
        ["signoff", "vllm==0.33.0", "vllm==0.34.0", "--no-fetch"],
        ["exactness", "--subjects", "vllm==0.34.0", "planted", "--device", "cpu", "--commit", commit],
        ["exactness", "--subjects", "vllm==0.34.0", "--device", "cpu", "--commit", commit, "--no-fetch"],
        ["bench", "--tier", "releases"],
        ["nightly"],
        ["backfill", "vllm==0.33.0"],
    ]
    for argv in runs:
        args = parser.parse_args(argv)
        try:
            args.func(args)
        except _Fetched:
            continue
        raise AssertionError(f"{argv} did not reach the fetch")
    assert seen[:6] == [
        (["vllm==0.33.0"], True, True),
        (["vllm==0.33.0"], False, True),
        (["vllm==0.33.0", "vllm==0.34.0"], True, True),
        (["vllm==0.33.0", "vllm==0.34.0"], False, True),
        (["vllm==0.34.0"], True, True),
        (["vllm==0.34.0"], False, True),
    ]
    # The tiers: every release they measure, a failed one a warning (the sweep goes on).
    assert seen[6:8] == [
        ([f"vllm=={v}" for v in sorted(tiers.MRV2_RELEASES)], True, False),
        (["vllm==0.30.0", tiers.NEWEST_RELEASE], True, False),
    ]
    assert seen[8] == (["vllm==0.33.0"], True, True)  # backfill's named releases: exit 2 if not had
    # A release beside something that is not a subject is bad input before any fetch.
    args = parser.parse_args(["signoff", "vllm==0.33.0", "HEAD"])
    with pytest.raises(common.UsageError, match="got 'HEAD'"):
        args.func(args)
    assert len(seen) == 9
    # With --no-fetch bench and nightly never reach it.
    for argv in (["bench", "--tier", "releases", "--no-fetch"], ["nightly", "--no-fetch"]):
        monkeypatch.setattr(asv, "run_lock", lambda results: (_ for _ in ()).throw(_Fetched()))
        args = parser.parse_args(argv)
        try:
            args.func(args)
        except _Fetched:
            pass
    assert len(seen) == 9
