"""specsample bisect: the search against a fake measurer (planted steps, noise, skips,
inconclusive points), the commit range of a checkout, and bad input at the command line."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from gitrepo import GIT

from specsample.bisect import AMBIGUOUS, FOUND, NOT_REPRODUCIBLE, BisectError, Comparison, Probe, bisect
from specsample.bisect import report, runner
from specsample.bisect.search import classify
from specsample.track.signoff.stats import compare_samples

REPO = Path(__file__).resolve().parents[1]


class FakeMeasurer:
    """Commits with true latency levels; each probe draws lognormal samples around them (noise
    shrinking with effort) and judges them with sign-off's statistics, as the real runner does."""

    def __init__(self, levels, *, noise=0.003, samples=30, skip=(), noise_at_effort=None, seed=0):
        self.levels = dict(levels)
        self.order = list(levels)
        self.noise, self.samples, self.skip = noise, samples, set(skip)
        self.noise_at_effort = noise_at_effort or {}
        self.rng = np.random.default_rng(seed)
        self.calls: list[tuple[str, int]] = []

    def draw(self, commit, effort):
        sigma = self.noise_at_effort.get(effort, self.noise)
        n = self.samples * 2**effort
        return self.levels[commit] * np.exp(self.rng.normal(0, sigma, n))

    def __call__(self, commit, effort):
        self.calls.append((commit, effort))
        if commit in self.skip:
            return Probe(commit, skipped="failed: ImportError: the commit does not load", seconds=1.0, effort=effort)
        good, bad = self.order[0], self.order[-1]
        mid = self.draw(commit, effort)
        out = {}
        for end, ref in (("good", good), ("bad", bad)):
            j = compare_samples(self.draw(ref, effort), mid, min_abs=0.0)
            out[end] = Comparison(j["verdict"], j["ratio"], j["p_value"], j["equivalence_p"])
        return Probe(commit, vs_good=out["good"], vs_bad=out["bad"], seconds=2.0, effort=effort)


def _commits(n):
    return [f"{i:040x}" for i in range(n)]


def _step_levels(n, culprit, good=100e-6, factor=1.07):
    commits = _commits(n)
    return {c: (good if i < culprit else good * factor) for i, c in enumerate(commits)}


@pytest.mark.parametrize("culprit", [1, 7, 16, 31])
def test_finds_a_planted_slowdown_in_log_steps(culprit):
    levels = _step_levels(32, culprit)
    fake = FakeMeasurer(levels, seed=culprit)
    result = bisect(list(levels), fake)
    assert result.status == FOUND and result.direction == "slower"
    assert result.culprit == list(levels)[culprit] and result.last_good == list(levels)[culprit - 1]
    assert len(result.steps) <= math.ceil(math.log2(32)) and not result.skipped
    assert result.seconds == pytest.approx(2.0 * result.measurements)


def test_finds_a_planted_speedup():
    levels = _step_levels(20, 12, factor=0.9)
    result = bisect(list(levels), FakeMeasurer(levels, seed=3))
    assert result.status == FOUND and result.direction == "faster" and result.culprit == list(levels)[12]


def test_a_change_that_does_not_reproduce_is_exit_1():
    levels = dict.fromkeys(_commits(10), 100e-6)
    result = bisect(list(levels), FakeMeasurer(levels))
    assert result.status == NOT_REPRODUCIBLE and "same" in result.why and not result.steps
    assert report.exit_code(result) == 1


def test_noise_makes_steps_inconclusive_and_they_measure_more():
    # At effort 0 the noise (5%) hides a 4% step; at effort 1 and 2 it is 0.3%.
    levels = _step_levels(16, 9, factor=1.04)
    fake = FakeMeasurer(levels, noise_at_effort={0: 0.05, 1: 0.003, 2: 0.003}, seed=5)
    result = bisect(list(levels), fake)
    assert result.status == FOUND and result.culprit == list(levels)[9]
    assert any(effort > 0 for _, effort in fake.calls)  # inconclusive steps were measured again
    retried = [s for s in result.steps if len(s.probes) > 1]
    assert retried and all(p.effort == i for s in retried for i, p in enumerate(s.probes))


def test_inconclusive_everywhere_is_not_reproducible_after_every_retry():
    levels = _step_levels(8, 4, factor=1.01)  # 1% under 20% noise: never decided
    fake = FakeMeasurer(levels, noise=0.2, samples=6, seed=1)
    result = bisect(list(levels), fake, max_effort=1)
    assert result.status == NOT_REPRODUCIBLE and "inconclusive" in result.why
    assert [e for _, e in fake.calls] == [0, 1]


def test_skipped_commits_are_stepped_around():
    levels = _step_levels(32, 20)
    commits = list(levels)
    skip = {commits[15], commits[16], commits[23]}
    result = bisect(commits, FakeMeasurer(levels, skip=skip, seed=2))
    assert result.status == FOUND and result.culprit == commits[20]
    assert {c for c, _ in result.skipped} <= skip and result.skipped
    assert all("does not load" in why for _, why in result.skipped)


def test_a_skipped_culprit_leaves_the_candidates():
    levels = _step_levels(16, 8)
    commits = list(levels)
    result = bisect(commits, FakeMeasurer(levels, skip={commits[8]}, seed=4))
    assert result.status == AMBIGUOUS and result.candidates == [commits[8], commits[9]]
    assert result.last_good == commits[7] and report.exit_code(result) == 0


def test_an_end_that_cannot_be_measured_is_an_error():
    levels = _step_levels(4, 2)
    with pytest.raises(BisectError, match="cannot be measured at GOOD and BAD"):
        bisect(list(levels), FakeMeasurer(levels, skip={list(levels)[-1]}))
    with pytest.raises(BisectError, match="two different commits"):
        bisect(["a" * 40], FakeMeasurer({"a" * 40: 1.0}))


def test_classify_decides_in_between_levels_by_the_nearer_one_only_at_the_end():
    near_bad = Probe("c", Comparison("slower", 1.06), Comparison("faster", 0.99))
    assert classify(near_bad, "slower", final=False)[0] == "more"
    decision, why = classify(near_bad, "slower", final=True)
    assert decision == "bad" and "nearer BAD" in why
    assert classify(Probe("c", Comparison("same", 1.0), Comparison("faster", 0.93)), "slower", final=False)[0] == "good"
    assert classify(Probe("c", Comparison("slower", 1.07), Comparison("same", 1.0)), "slower", final=False)[0] == "bad"
    one_sided = Probe("c", Comparison("inconclusive", 1.01), Comparison("faster", 0.94))
    assert classify(one_sided, "slower", final=True)[0] == "good"


def test_report_has_every_step_and_the_culprit(tmp_path):
    levels = _step_levels(16, 5)
    commits = list(levels)
    result = bisect(commits, FakeMeasurer(levels, skip={commits[7]}, seed=6))
    js, md = report.write(result, {"subject": "vllm@<commit>", "point": {"num_reqs": 1}}, tmp_path)
    data = json.loads(js.read_text())
    assert data["culprit"] == commits[5] and data["steps_count"] == len(result.steps)
    assert data["device_seconds"] == pytest.approx(result.seconds)
    text = md.read_text()
    assert f"culprit: {commits[5][:10]}" in text and text.count("\n| ") >= len(result.steps) + 1


# ---- the commit range of a checkout --------------------------------------------------------


def _git(repo, *args):
    return subprocess.run(["git", "-C", str(repo), *GIT, *args], capture_output=True, text=True, check=True).stdout


@pytest.fixture()
def linear_repo(tmp_path):
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    shas = []
    for i in range(6):
        (repo / "f.txt").write_text(str(i))
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"c{i}")
        shas.append(_git(repo, "rev-parse", "HEAD").strip())
    _git(repo, "checkout", "-q", "-b", "side", shas[2])
    (repo / "g.txt").write_text("side")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "side")
    return repo, shas, _git(repo, "rev-parse", "HEAD").strip()


def test_commit_range_is_good_to_bad_oldest_first(linear_repo):
    repo, shas, side = linear_repo
    assert runner.commit_range(repo, shas[1], shas[4]) == shas[1:5]
    with pytest.raises(BisectError, match="not an ancestor"):
        runner.commit_range(repo, shas[4], shas[1])
    with pytest.raises(BisectError, match="not an ancestor"):
        runner.commit_range(repo, side, shas[5])
    with pytest.raises(BisectError, match="not a commit"):
        runner.commit_range(repo, "no-such-ref", shas[5])
    with pytest.raises(BisectError, match="same commit"):
        runner.commit_range(repo, shas[3], shas[3])


# ---- the command line: bad input is exit 2 and writes nothing -------------------------------


def _cli(*args, cwd):
    return subprocess.run(
        [sys.executable, "-m", "specsample", "bisect", *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        env={**__import__("os").environ, "PYTHONPATH": str(REPO)},
    )


@pytest.mark.parametrize(
    "args, message",
    [
        (["--noise-target", "0"], "--noise-target must be > 0"),
        (["--noise-target", "-0.01"], "--noise-target must be > 0"),
        (["--time-cap", "0"], "--time-cap must be > 0"),
    ],
)
def test_cli_bad_noise_options(linear_repo, tmp_path, args, message):
    repo, shas, _ = linear_repo
    out = tmp_path / "out"
    proc = _cli(shas[0], shas[5], "--vllm-repo", str(repo), "--out", str(out), *args, cwd=tmp_path)
    assert proc.returncode == 2 and message in proc.stderr and not out.exists()


def test_cli_bad_refs(linear_repo, tmp_path):
    repo, shas, side = linear_repo
    out = tmp_path / "out"
    cases = [
        ((shas[4], shas[1]), "is not an ancestor of BAD"),
        (("nope", shas[1]), "'nope' is not a commit"),
        ((side, shas[5]), "is not an ancestor of BAD"),
    ]
    for (good, bad), message in cases:
        proc = _cli(good, bad, "--vllm-repo", str(repo), "--out", str(out), cwd=tmp_path)
        assert proc.returncode == 2 and message in proc.stderr, proc.stderr
        assert len(proc.stderr.strip().splitlines()) == 1 and not out.exists()


def test_cli_point_neither_side_can_run(linear_repo, tmp_path):
    # The checkout has no vLLM sampler at either end: neither can run any point.
    repo, shas, _ = linear_repo
    out = tmp_path / "out"
    proc = _cli(shas[0], shas[5], "--vllm-repo", str(repo), "--out", str(out), cwd=tmp_path)
    assert proc.returncode == 2 and "neither end can run the point" in proc.stderr, proc.stderr
    assert not out.exists()


def test_cli_unknown_change_id(tmp_path):
    out = tmp_path / "out"
    proc = _cli("--change", "abcdef", "--results-dir", str(REPO / "results"), "--out", str(out), cwd=REPO)
    assert proc.returncode == 2 and "change id 'abcdef'" in proc.stderr and not out.exists()


# ---- end to end on the CPU: real workers, a test-built checkout with a planted delay ---------

PLANT = """

# ---- test-only plant (tests/test_bisect.py) ----
from .planted import PlantedSubject as _Planted

SUBJECTS = tuple(
    _Planted(s.name, s.summary, s.capabilities, s.prepare_inputs, provenance=s.provenance, base=s, extra=1024)
    if s.name == "mrv2" else s
    for s in SUBJECTS
)
"""


def test_bisect_end_to_end_finds_the_planted_commit(tmp_path, monkeypatch):
    """Five commits of this specsample/, the planted delay added to mrv2 in the third: the command
    measures with real worker processes (host timer under the interpreter) and names it."""
    from gitrepo import make_repo

    monkeypatch.setenv("SPECSAMPLE_CACHE", str(tmp_path / "cache"))
    repo = make_repo(tmp_path / "repo")
    (repo / "asv.conf.json").write_text("{}")  # the command's repository root
    shas = [_git(repo, "rev-parse", "HEAD").strip()]
    for i in range(1, 5):
        if i == 2:
            ours = repo / "specsample" / "subjects" / "ours.py"
            ours.write_text(ours.read_text() + PLANT)
        else:
            (repo / "CHANGES").write_text(str(i))
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", f"c{i}")
        shas.append(_git(repo, "rev-parse", "HEAD").strip())
    out = tmp_path / "out"
    proc = _cli(
        shas[0], shas[-1], "--host", "--mode", "block", "--draft", "logits", "--num-reqs", "2",
        "--num-speculative-steps", "2", "--vocab-size", "300", "--placeholder-density", "0",
        "--samples", "8", "--min-effect", "0.5", "--min-abs-us", "0", "--max-effort", "1", "--out", str(out),
        cwd=repo,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    data = json.loads((out / "bisect.json").read_text())
    assert data["culprit"] == shas[2] and data["status"] == "found" and data["direction"] == "slower"
    assert data["commits"] == shas and 1 <= data["steps_count"] <= 3
    assert f"culprit: {shas[2][:10]}" in proc.stdout and (out / "bisect.md").is_file()


def test_paired_measurer_times_good_commit_and_bad_in_one_unit_and_scales_effort(tmp_path):
    """The runner's measurer against a stand-in for the worker: what it asks for, how it judges."""
    rng = np.random.default_rng(7)
    asked = []

    def run_units(units, options, log):
        (unit,) = units
        asked.append((unit, options))
        from specsample.worker import Outcome

        out = Outcome()
        levels = {"good": 100e-6, "mid": 107e-6, "bad": 107e-6}
        if "dead" in unit.subjects[1]:
            out.records[unit.key] = {
                "good": {"status": "ok", "samples": [1e-4] * 9},
                "mid": {"status": "crashed", "reason": "killed by SIGSEGV"},
            }
            return out
        out.records[unit.key] = {
            label: {"status": "ok", "samples": list(level * np.exp(rng.normal(0, 0.003, options.num_samples)))}
            for label, level in levels.items()
        }
        return out

    target = runner.Target(tmp_path, "mrv2", {"mode": "block"}, vllm=False)
    measurer = runner.PairedMeasurer(
        target, "g" * 40, "b" * 40, samples=20, noise_target=0.004, run_units=run_units, log=lambda line: None
    )
    probe = measurer("m" * 40, 1)
    unit, options = asked[-1]
    assert unit.subjects == ("mrv2@" + "g" * 40, "mrv2@" + "m" * 40, "mrv2@" + "b" * 40)
    assert unit.labels == runner.LABELS and unit.point == {"mode": "block"}
    assert options.num_samples == 40 and options.noise_target == 0.002 and options.time_cap_s == 10.0
    assert probe.vs_good.verdict == "slower" and probe.vs_bad.verdict == "same" and probe.effort == 1
    assert probe.figures["mid"]["n_samples"] == 40
    dead = measurer("dead" + "0" * 36, 0)
    assert dead.skipped.startswith("crashed: killed by SIGSEGV") and dead.vs_good is None
    vllm = runner.Target(tmp_path, "vllm", {}, vllm=True)
    assert vllm.name_at("abc") == "vllm@abc"
