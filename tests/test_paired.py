"""Paired sign-off (specsample.runs.paired) end to end on the CPU: commits of a
throw-away repository (tests/gitrepo.py) measured in worker processes under the Triton
interpreter with a host timer (device="cpu", host=True), on the smoke tier's tiny points.

Host timings under the interpreter are noisy (other jobs share the cores): the tests that judge
timing pass thresholds far above that noise (``min_effect`` 0.5, no absolute floor) and plant
slowdowns far above them, so they test the flow, the pairing and the strict verdicts, not
detection power (that is ``specsample signoff-validate``'s job on the GPU).
"""

from __future__ import annotations

import re

import shutil
from pathlib import Path

import numpy as np
import pytest
import torch
from gitrepo import GIT, make_repo

from specsample.cli import main
from specsample.track import signoff
from specsample.runs.asv import git, worktree
from specsample.track.results import COLUMNS
from specsample.runs import paired

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

CPU = dict(device="cpu", host=True, l2="warm", environment={}, log=lambda line: None)
LENIENT = dict(min_effect=0.5, min_abs_seconds=0.0)  # far above the interpreter's host-timer noise
PLANTED_ITERS = 1024  # the delay kernel's iterations: well over 1.5x a smoke block point's call here

# Head of the "planted" commit: mrv2 wrapped in the planted delay (specsample.subjects.planted),
# which runs in block verification with draft logits only.
PLANTED_OURS = f"""

# ---- test-only plant (tests/test_paired.py) ----
from .planted import PlantedSubject as _Planted

SUBJECTS = tuple(
    _Planted(s.name, s.summary, s.capabilities, s.prepare_inputs, provenance=s.provenance, base=s, extra={PLANTED_ITERS})
    if s.name == "mrv2" else s
    for s in SUBJECTS
)
"""

# Head of the "broken" commit: mrv2 kills its process in block mode, and accepts every draft
# (past the -1 placeholders too) where a request has placeholders; mrv2-pre50939 is gone.
BROKEN_OURS = """

# ---- test-only breakage (tests/test_paired.py) ----
import dataclasses as _dataclasses
import os as _os
import sys as _sys

import torch as _torch


def _broken_launch(**inputs):
    if inputs["use_block_verification"]:
        print("planted crash: os._exit(134) in block mode", file=_sys.stderr, flush=True)
        _os._exit(134)
    sampled, num_sampled = mrv2.launch(**inputs)
    # on the device, no host sync: a breakage of the output, not a slower call
    has_placeholder = (inputs["draft_sampled"] < 0).any()
    num_sampled.copy_(_torch.where(has_placeholder, inputs["num_speculative_steps"] + 1, num_sampled))
    return sampled, num_sampled


SUBJECTS = tuple(
    _dataclasses.replace(s, prepare_inputs=functools.partial(_sampler_call, launch=_broken_launch))
    if s.name == "mrv2" else s
    for s in SUBJECTS if s.name != "mrv2-pre50939"
)
"""


def _commit_on(repo: Path, base: str, message: str, edit) -> str:
    """A commit on ``base`` made in a detached worktree (no branch moves); ``edit(tree)``."""
    with worktree(repo, base) as wt:
        edit(wt)
        git(wt, *GIT, "commit", "-q", "-am", message)
        return git(wt, "rev-parse", "HEAD")


def _plant(tree: Path) -> None:
    ours = tree / "specsample" / "subjects" / "ours.py"
    ours.write_text(ours.read_text() + PLANTED_OURS)


def _break(tree: Path) -> None:
    ours = tree / "specsample" / "subjects" / "ours.py"
    ours.write_text(ours.read_text() + BROKEN_OURS)
    schema = tree / "specsample" / "schema.py"
    text = schema.read_text()
    assert text.count('"mrv2-pre50939", ') == 1
    schema.write_text(text.replace('"mrv2-pre50939", ', "", 1))


@pytest.fixture(scope="module")
def repo(tmp_path_factory):
    """base: the working tree's specsample/; planted: base with mrv2 wrapped in a planted delay;
    broken: base with BROKEN_OURS and mrv2-pre50939 dropped from the schema."""
    root = tmp_path_factory.mktemp("paired")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("SPECSAMPLE_CACHE", str(root / "cache"))
        path = make_repo(root / "repo")
        base = git(path, "rev-parse", "HEAD")
        planted = _commit_on(path, base, "planted delay", _plant)
        broken = _commit_on(path, base, "broken head", _break)
        yield {"path": path, "base": base, "planted": planted, "broken": broken}


# ---------------------------------------------------------------------------------------------
# Selection and names: no measurement
# ---------------------------------------------------------------------------------------------


def test_points_select_by_sweep_subject_and_axis():
    quick = paired.points("quick")
    density = paired.points("quick", sweeps=["density"])
    assert {s.name for s, _ in density} == {"Density"} and 0 < len(density) < len(quick)
    only = paired.points("smoke", subjects=["mrv2"], only={"mode": ["block"]})
    assert [(p["subject"], p["mode"], p["placeholder_density"]) for _, p in only] == [
        ("mrv2", "block", 0.0),
        ("mrv2", "block", 0.5),
    ]
    assert paired.benchmark_name(density[0][0]) == "bench_sampler.QuickDensityLatency.time_sample"
    with pytest.raises(paired.SignoffError, match=r"sweep: Nope not in tier 'quick'; its sweeps: Density, Shape"):
        paired.points("quick", sweeps=["Nope"])
    with pytest.raises(
        paired.SignoffError, match=r"subject: nosuch not measured .* they measure express, fast, mrv2, mrv2-pre50939"
    ):
        paired.points("smoke", subjects=["mrv2", "nosuch"])
    with pytest.raises(paired.SignoffError, match=r"mode: standard not measured .* they measure block, greedy"):
        paired.points("smoke", only={"mode": ["standard"]})
    with pytest.raises(paired.SignoffError, match="tier: expected one of"):
        paired.points("weekly")


def test_unknown_commits_and_subjects_are_refused_naming_them(repo, capsys, monkeypatch):
    with pytest.raises(
        paired.SignoffError,
        match=r"'nope' is not a commit of .*; known refs: .*; newest commits: "
        r"[0-9a-f]{7,} base",
    ):
        paired.signoff_commits(repo["path"], "nope", repo["base"], tier="smoke", **CPU)
    with pytest.raises(paired.SignoffError, match=r"vllm==0\.99\.0 is not in the cache .*; known subjects: mrv2, fast"):
        paired.signoff_subjects("vllm==0.99.0", "mrv2", tier="smoke", **CPU)
    with pytest.raises(paired.SignoffError, match=r"subject: expected one of .*got 'nosuch'; known subjects: "):
        paired.signoff_subjects("mrv2", "nosuch", tier="smoke", **CPU)
    with pytest.raises(paired.SignoffError, match=r"subject: vllm==0\.33\.0 not ours: two commits sign off our"):
        paired.signoff_commits(repo["path"], "HEAD", "HEAD", tier="nightly", subjects=["vllm==0.33.0"], **CPU)
    # the command line: exit 2 and one line naming it, before anything is measured
    monkeypatch.chdir(repo["path"])
    assert main(["signoff", "nope", "HEAD", "--tier", "smoke"]) == 2
    err = capsys.readouterr().err
    assert "specsample signoff: 'nope' is not a commit of" in err and "newest commits: " in err
    assert main(["signoff", "vllm==0.99.0", "vllm==0.33.0", "--tier", "smoke", "--no-fetch"]) == 2
    err = capsys.readouterr().err
    assert "vllm==0.99.0 is not in the cache" in err and "known subjects: mrv2, fast" in err
    # Without --no-fetch the release is fetched first, and the index's answer is the error.
    from specsample.subjects.base import SubjectError
    from specsample.subjects.vllm import store

    def no_such_release(version, log=print):
        raise SubjectError(f"vllm=={version}: no such release on the package index")

    monkeypatch.setattr(store, "fetch_release", no_such_release)
    assert main(["signoff", "vllm==0.99.0", "vllm==0.33.0", "--tier", "smoke"]) == 2
    err = capsys.readouterr().err
    assert "vllm==0.99.0 is not in the cache and could not be fetched: vllm==0.99.0: no such release" in err
    assert main(["signoff", "HEAD", "HEAD", "--tier", "smoke", "--subjects", "nosuch"]) == 2
    assert "subject: nosuch not measured" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU this would run the quick tier")
def test_cli_signoff_of_a_tier_other_than_smoke_needs_a_gpu(repo, capsys, monkeypatch):
    monkeypatch.chdir(repo["path"])
    assert main(["signoff", "HEAD", "HEAD"]) == 2
    assert "specsample signoff times kernels on a GPU" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------
# Measured sign-offs
# ---------------------------------------------------------------------------------------------


def test_a_a_signoff_of_a_commit_against_itself_passes(repo):
    lines = []
    result = paired.signoff_commits(
        repo["path"],
        repo["base"],
        repo["base"],
        tier="smoke",
        subjects=["mrv2"],
        only={"mode": ["greedy"]},
        samples=7,
        **{**CPU, "log": lines.append},
        **LENIENT,
    )
    assert result.base == result.head == repo["base"] and result.exit_code == 0, result.report
    frame = result.frame
    assert list(frame.columns) == list(COLUMNS) and {c: str(t) for c, t in frame.dtypes.items()} == COLUMNS
    base_rows, head_rows = paired.split_sides(frame)
    assert len(base_rows) == len(head_rows) == 2 and set(frame.commit) == {repo["base"]}
    assert set(frame.status) == {"ok"} and set(frame.semantics) == {"same draws"}
    assert set(frame.subject) == {"mrv2"} and set(frame.benchmark) == {"bench_sampler.SmokeGridLatency.time_sample"}
    assert (frame.n_samples == 7).all() and np.allclose(frame.value, frame.samples.map(np.median))
    assert (frame.ci_lo <= frame.value).all() and (frame.value <= frame.ci_hi).all()
    # A/A: never slower or faster; equivalence within the margin needs quiet enough host timing
    assert set(result.verdicts.verdict) <= {"same", "inconclusive"} and set(result.verdicts.test) == {"mann-whitney"}
    text = result.report
    assert f"**PASS** (exit 0): nothing slower out of 2 points (A/A: `{repo['base'][:8]}` against itself)" in text
    assert "| same draws | same draws | 2 |" in text and "7 samples a side alternated ABBA" in text
    assert "host clock under the Triton interpreter" in text
    assert any(line.startswith("[1/2] greedy logits R=2 K=2 V=300 phi=0.0") for line in lines), lines
    assert frame.attrs["workers"] == 1 and len(git(repo["path"], "worktree", "list").splitlines()) == 1


def test_a_planted_commit_is_reported_at_its_touched_points_only(repo):
    """A commit whose mrv2 runs a planted delay kernel at block points with draft logits: that
    point is slower; its greedy point, measured in the same run, is not."""
    result = paired.signoff_commits(
        repo["path"],
        repo["base"],
        repo["planted"],
        tier="smoke",
        subjects=["mrv2"],
        only={"placeholder_density": [0.0]},
        samples=8,
        **CPU,
        **LENIENT,
    )
    by_mode = result.verdicts.set_index("mode")
    assert by_mode.verdict["block"] == "slower" and by_mode.verdict["greedy"] in ("same", "inconclusive"), result.report
    assert by_mode.ratio["block"] > 1.5 and by_mode.head_commit["block"] == repo["planted"]
    assert by_mode.test["block"] == "mann-whitney"
    assert result.exit_code == 1
    assert "**FAIL** (exit 1): 1 slower out of 2 points" in result.report
    assert "### Slower (1)" in result.report and "| same draws |" in result.report


def test_crashed_sides_semantics_violations_and_missing_subjects_exit_2(repo, monkeypatch, capsys, tmp_path):
    """Through the command line: head's mrv2 kills its worker in block mode (recorded crashed
    with the reason; a fresh worker goes on), violates placeholder semantics in greedy mode with
    placeholders, and head has no mrv2-pre50939 (its points are one-sided, not measured)."""
    monkeypatch.chdir(repo["path"])
    out = tmp_path / "report.md"
    code = main(
        [
            "signoff",
            repo["base"][:10],
            repo["broken"][:10],
            "--tier",
            "smoke",
            "--subjects",
            "mrv2",
            "mrv2-pre50939",
            "--samples",
            "3",
            "--min-effect",
            "10.0",
            "--min-abs-us",
            "0",
            "--report",
            str(out),
        ]
    )
    # Timing is not what this test checks: on a GPU one of the broken head's points can be over
    # 2x slower than base's, a regression at --min-effect 1.0 that the interpreter's slow calls
    # hide.
    printed = capsys.readouterr()
    text = out.read_text()
    assert code == 2, text
    assert text in printed.out
    assert (
        "**FAIL** (exit 2): 2 crashed points, 1 semantics violation at head, 4 points measured on one side only" in text
    )
    crashed = text.split("### Crashed (2)")[1].split("###")[0]
    assert crashed.count("| head | exited with code 134: planted crash: os._exit(134) in block mode |") == 2
    assert "mrv2 block logits R=2 K=2 V=300 phi=0.0 trailing" in crashed
    violations = text.split("### Semantics violations at head (1)")[1].split("###")[0]
    assert "mrv2 greedy logits R=2 K=2 V=300 phi=0.5 trailing | same draws | request " in violations
    one_sided = text.split("### Measured on one side only (4: 4 missing at head, 0 new at head)")[1].split("###")[0]
    assert one_sided.count("| `bench_sampler.SmokeGridLatency.time_sample` | mrv2-pre50939 ") == 4
    assert one_sided.count("| no result |") == 4
    assert "skipped: not measured: head has no subject mrv2-pre50939" in one_sided
    assert f"Not measured: subject `mrv2-pre50939` is not at head `{repo['broken'][:8]}`" in text
    # The one point both sides measured, on the interpreter's host clock: same or inconclusive.
    assert "Compared points — slower: 0, faster: 0, " in text and "Skipped: 0" in text
    assert "specsample worker: head (mrv2@" in printed.out and "crashed at block" in printed.out  # progress log


def test_allow_missing_passes_one_sided_points_and_lists_them(repo):
    """The broken head at its one point that is fine (greedy, no placeholders) and the
    replica's points it no longer has: strict exit 2, allowed by the compared points' verdict
    alone, listed either way."""
    common = dict(
        tier="smoke",
        subjects=["mrv2", "mrv2-pre50939"],
        only={"mode": ["greedy"], "placeholder_density": [0.0]},
        samples=3,
        **CPU,
        **LENIENT,
    )
    allowed = paired.signoff_commits(repo["path"], repo["base"], repo["broken"], allow_missing=True, **common)
    verdicts = allowed.verdicts.set_index("subject").verdict.to_dict()
    # mrv2 against itself: compared, and whichever of the four verdicts the host timer gives
    # (3 samples on a busy CPU cannot always show equivalence); the replica's point is missing
    assert verdicts["mrv2-pre50939"] == "missing" and verdicts["mrv2"] in signoff.COMPARED_VERDICTS
    assert allowed.exit_code == signoff.exit_code(allowed.verdicts, allow_missing=True)
    assert allowed.exit_code in (0, 1) and signoff.exit_code(allowed.verdicts) == 2
    assert "(allowed by --allow-missing)" in allowed.report
    assert "Allowed by --allow-missing: these points were not compared." in allowed.report
    assert "mrv2-pre50939 greedy logits R=2 K=2 V=300 phi=0.0 trailing" in allowed.report
    # the replica's base side was never run: nothing to compare it with
    replica = allowed.frame[allowed.frame.subject == "mrv2-pre50939"]
    assert list(replica.status) == ["skipped"] and list(replica.env) == ["paired-base"]


def test_signoff_of_two_subjects_pairs_them_at_the_template_points():
    """Subject against subject (what vllm==A vs vllm==B runs), here two of ours that draw the same
    random numbers: the points are the tier's mrv2 points, the subject column names each side."""
    result = paired.signoff_subjects(
        "mrv2", "fast", tier="smoke", only={"mode": ["greedy"]}, samples=3, **CPU, **LENIENT
    )
    base_rows, head_rows = paired.split_sides(result.frame)
    assert list(base_rows.subject) == ["mrv2", "mrv2"] and list(head_rows.subject) == ["fast", "fast"]
    assert base_rows.commit.isna().all() and set(result.frame.semantics) == {"same draws"}
    verdicts = result.verdicts
    assert "subject" not in verdicts.columns and len(verdicts) == 2
    assert set(verdicts.verdict) <= set(signoff.COMPARED_VERDICTS)
    assert result.exit_code == (1 if "slower" in set(verdicts.verdict) else 0)
    assert result.report.startswith("## specsample sign-off: fast vs mrv2\n")
    assert "at each point `mrv2` and `fast` in one worker process" in result.report


# ---------------------------------------------------------------------------------------------
# --results: committed results, no measurement
# ---------------------------------------------------------------------------------------------

RESULTS = Path(__file__).parent / "fixtures" / "asv_results"


def test_results_refuses_an_unknown_subject_and_commit(capsys):
    assert main(["signoff", "--results", "mrv2", "nosuch", "--results-dir", str(RESULTS)]) == 2
    err = capsys.readouterr().err
    assert "no time_sample results for nosuch" in err and "subjects there: flashinfer, mrv2, mrv2-pre50939" in err
    assert (
        main(["signoff", "--results", "mrv2-pre50939", "mrv2", "--results-dir", str(RESULTS), "--commit", "deadbeef"])
        == 2
    )
    assert (
        "no results at commit 'deadbeef'" in (err := capsys.readouterr().err) and "commits there, newest first: " in err
    )
    dates = re.findall(r"[0-9a-f]{8} \((\d{4}-\d{2}-\d{2})\)", err)
    assert len(dates) > 1 and dates == sorted(dates, reverse=True)
    assert (
        main(["signoff", "--results", "mrv2-pre50939", "mrv2", "--results-dir", str(RESULTS), "--sweep", "Nope"]) == 2
    )
    assert "sweeps there: Batch, Shape" in capsys.readouterr().err


def test_results_compares_the_newest_commit_with_both_and_is_strict_about_missing_points(capsys, tmp_path):
    """The fixture's newest commit (45f881e1) has the Shape sweep's two R=8 points for mrv2 but
    not for the replica: one-sided, so exit 2 unless --allow-missing; the table has a commit
    column."""
    report = tmp_path / "variants.md"
    code = main(
        ["signoff", "--results", "mrv2-pre50939", "mrv2", "--results-dir", str(RESULTS), "--report", str(report)]
    )
    text = report.read_text()
    assert code == 2 and "2 points measured on one side only" in text
    assert "(`mrv2-pre50939` → `mrv2` at `45f881e1`)" in text
    assert "commit `45f881e1` (2026-11-05 02:00 UTC), the newest with results for both" in text
    assert "| commit | benchmark | point | base | head |" in text and "| `45f881e1` | `bench_sampler." in text
    capsys.readouterr()
    code = main(["signoff", "--results", "mrv2-pre50939", "mrv2", "--results-dir", str(RESULTS), "--allow-missing"])
    assert code == 0 and "**PASS** (exit 0)" in capsys.readouterr().out
    code = main(
        [
            "signoff",
            "--results",
            "mrv2-pre50939",
            "mrv2",
            "--results-dir",
            str(RESULTS),
            "--sweep",
            "Batch",
            "--commit",
            "5618cc2b",
        ]
    )
    printed = capsys.readouterr().out
    assert code == 0 and "at `5618cc2b`" in printed and "given by --commit" in printed
