"""Paired sign-off (specsample.paired): two checkouts loaded side by side, the same inputs to
both, ABBA-interleaved samples, a frame in the results contract. Samplers are fakes here (no
kernel runs), so these tests are fast; scripts/validate_signoff.py's smoke test runs kernels."""

from __future__ import annotations

import re
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from gitrepo import GIT, make_repo

import specsample
from specsample import grid, paired, signoff
from specsample.track.asv_runs import git, worktree
from specsample.kernels import planted
from specsample.track.results import COLUMNS

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git")

# Head's changes in the two-commit repository: a planted value, the replica gone, mrv2 without
# block verification (so its block points are skipped and the replica's are missing).
HEAD_VARIANTS_PATCH = '''

# test: head drops the replica and mrv2's block mode
import dataclasses as _dataclasses

_get = get


def get(name):
    if name == "mrv2-pre50939":
        raise ValueError(f"variant: no {name!r} here")
    v = _get(name)
    return _dataclasses.replace(v, modes=("greedy", "standard")) if name == "mrv2" else v
'''


@pytest.fixture(scope="module")
def two_commits(tmp_path_factory):
    repo = make_repo(tmp_path_factory.mktemp("paired") / "repo")
    base = git(repo, "rev-parse", "HEAD")
    knob = repo / "specsample" / "kernels" / "planted.py"
    knob.write_text(knob.read_text().replace("BALLAST_ITERS = 0", "BALLAST_ITERS = 7"))
    with open(repo / "specsample" / "variants.py", "a") as fh:
        fh.write(HEAD_VARIANTS_PATCH)
    git(repo, *GIT, "commit", "-q", "-am", "head")
    return repo, base, git(repo, "rev-parse", "HEAD")


class FakeSampler:
    """Deterministic per-call seconds; records the global order of samples."""

    def __init__(self, label: str, seconds: np.ndarray, order: list) -> None:
        self.label, self.seconds, self.order = label, list(seconds), order

    def sample(self) -> float:
        self.order.append(self.label)
        return self.seconds.pop(0)


def fake_factory(base, head, order, calls, slower=1.10):
    """Base ~100 us; head `slower` times that at greedy phi=0, the same elsewhere."""

    def make(v, w, copies):
        label = "head" if type(v) is head.variants.Variant else "base"
        assert type(w) is {"base": base, "head": head}[label].workloads.Workload
        calls.append((label, v.name, w.mode, w.placeholder_density, id(copies)))
        rng = np.random.default_rng(len(calls))
        seconds = 100e-6 * rng.lognormal(0.0, 0.002, 50)
        if label == "head" and w.mode == "greedy" and w.placeholder_density == 0.0:
            seconds *= slower
        return FakeSampler(label, seconds, order)

    return make


# ---------------------------------------------------------------------------------------------
# Interleaving
# ---------------------------------------------------------------------------------------------


def test_interleave_flips_the_order_every_round():
    order: list = []
    samplers = {k: FakeSampler(k, np.ones(10), order) for k in ("base", "head")}
    samples, errors = paired.interleave(samplers, {"base": 4, "head": 4})
    assert order == ["base", "head", "head", "base", "base", "head", "head", "base"]
    assert samples == {"base": [1.0] * 4, "head": [1.0] * 4} and errors == {}


def test_interleave_goes_on_when_one_sampler_fails():
    class Broken:
        def sample(self):
            raise RuntimeError("CUDA error: boom\nmore")

    order: list = []
    samples, errors = paired.interleave({"base": Broken(), "head": FakeSampler("head", np.ones(5), order)},
                                        {"base": 3, "head": 3})  # fmt: skip
    assert errors == {"base": "RuntimeError: CUDA error: boom"} and samples["head"] == [1.0] * 3


def test_median_ci_uses_order_statistics():
    x = np.arange(30.0)
    assert paired.median_ci(x) == (7.0, 22.0)  # binomial(30, 1/2) 0.5% quantile is 8
    assert paired.median_ci(np.array([3.0, 1.0, 2.0])) == (1.0, 3.0)  # too few: the range


def test_points_filter_by_sweep_and_variant():
    quick = [s for s in grid.sweeps("quick") if s.kind == "sampler"]
    density = paired.points("quick", sweeps=["density"])
    assert {s.name for s, _ in density} == {"Density"}
    assert len(density) == len(next(s for s in quick if s.name == "Density").points())
    only = paired.points("quick", variants=["mrv2"])
    assert {p["variant"] for _, p in only} == {"mrv2"}
    assert len(only) == sum(p["variant"] == "mrv2" for s in quick for p in s.points())
    with pytest.raises(ValueError, match="sweep: expected some of"):
        paired.points("quick", sweeps=["Nope"])
    assert paired.benchmark_name(density[0][0]) == "bench_sampler.QuickDensityLatency.time_sample"


# ---------------------------------------------------------------------------------------------
# Loading checkouts
# ---------------------------------------------------------------------------------------------


def test_each_checkout_runs_its_own_code(two_commits):
    repo, base_sha, head_sha = two_commits
    running = {k: v for k, v in sys.modules.items() if k.startswith("specsample")}
    with worktree(repo, base_sha) as base_tree, worktree(repo, head_sha) as head_tree:
        base = paired.load_checkout(base_tree, "base", base_sha)
        head = paired.load_checkout(head_tree, "head", head_sha)
        assert base.module("kernels.planted").BALLAST_ITERS == 0
        assert head.module("kernels.planted").BALLAST_ITERS == 7
        # head's pipeline reads head's knob: the functions keep their own module globals
        assert head.module("kernels.mrv2").planted is head.module("kernels.planted")
        assert Path(head.variants.__file__).is_relative_to(head_tree)
        assert Path(base.variants.__file__).is_relative_to(base_tree)
        with pytest.raises(ValueError):
            head.subjects.get("mrv2-pre50939")
        base.subjects.get("mrv2-pre50939")
        # an import at call time resolves to the checkout while it is active
        with head.active():
            import specsample.sampler as during

            assert Path(during.__file__).is_relative_to(head_tree)
    # the running package is untouched
    assert {k: v for k, v in sys.modules.items() if k.startswith("specsample")} == running
    assert sys.modules["specsample"] is specsample and planted.BALLAST_ITERS == 0
    assert not any(isinstance(f, paired._CheckoutFinder) for f in sys.meta_path)


def test_a_checkout_without_the_variants_api_is_refused(tmp_path):
    old = tmp_path / "old" / "specsample"
    old.mkdir(parents=True)
    (old / "__init__.py").write_text("")
    with pytest.raises(paired.CheckoutError, match=r"specsample\.variants"):
        paired.load_checkout(old.parent, "base")
    (old / "workloads.py").write_text("class Workload: pass\n")
    (old / "variants.py").write_text(
        "class Variant:\n    def prepare(self, w, device='cuda'):\n        pass\n\ndef get(name):\n    pass\n"
    )
    with pytest.raises(paired.CheckoutError, match=r"Variant\.prepare\(w, inputs=\.\.\.\)"):
        paired.load_checkout(old.parent, "base")
    assert sys.modules["specsample"] is specsample
    assert not any(isinstance(f, paired._CheckoutFinder) for f in sys.meta_path)


# ---------------------------------------------------------------------------------------------
# The paired measurement and the sign-off
# ---------------------------------------------------------------------------------------------


def test_paired_frame_follows_the_results_contract(two_commits):
    repo, base_sha, head_sha = two_commits
    order, calls, lines = [], [], []
    with worktree(repo, base_sha) as base_tree, worktree(repo, head_sha) as head_tree:
        base = paired.load_checkout(base_tree, "base", base_sha, "2026-01-02T03:04:05+00:00")
        head = paired.load_checkout(head_tree, "head", head_sha, "2026-01-03T03:04:05+00:00")
        frame = paired.measure_paired(
            base, head, tier="smoke", variants=["mrv2", "mrv2-pre50939"], samples=8, machine="cpu", device="cpu", l2="warm",
            make_sampler=fake_factory(base, head, order, calls), environment={"gpu": "fake GPU"},
            log=lines.append,
        )  # fmt: skip
    assert list(frame.columns) == list(COLUMNS)
    assert {c: str(t) for c, t in frame.dtypes.items()} == COLUMNS
    # smoke tier: 2 variants x greedy/block x phi 0/0.5. Head: mrv2 greedy measured, mrv2
    # block skipped, no replica.
    base_rows, head_rows = paired.split_sides(frame)
    assert len(base_rows) == 8 and set(base_rows.status) == {"ok"} and set(base_rows.commit) == {base_sha}
    assert len(head_rows) == 4 and set(head_rows.commit) == {head_sha}
    assert head_rows.groupby("mode").status.agg(set).to_dict() == {"greedy": {"ok"}, "block": {"skipped"}}
    assert set(frame.benchmark) == {"bench_sampler.SmokeGridLatency.time_sample"}
    assert set(frame.tier) == {"smoke"} and set(frame.sweep) == {"Grid"} and set(frame.metric) == {"time_sample"}
    assert set(frame.unit) == {"seconds"} and set(frame.machine) == {"cpu"} and set(frame.gpu) == {"fake GPU"}
    ok = frame[frame.status == "ok"]
    assert (ok.n_samples == 8).all() and ok.samples.map(len).eq(8).all()
    assert np.allclose(ok.value, ok.samples.map(np.median))
    assert (ok.ci_lo <= ok.value).all() and (ok.value <= ok.ci_hi).all() and (ok.q25 <= ok.q75).all()
    assert frame[frame.status == "skipped"].value.isna().all()
    # both sides of a point got the same input copies, and their samples alternated ABBA
    assert [c[:4] for c in calls[:4]] == [("base", "mrv2", "greedy", 0.0), ("head", "mrv2", "greedy", 0.0),
                                          ("base", "mrv2", "greedy", 0.5), ("head", "mrv2", "greedy", 0.5)]
    assert calls[0][4] == calls[1][4] and calls[2][4] == calls[3][4]
    assert order[:16] == ["base", "head", "head", "base"] * 4
    assert len(lines) == 9 and lines[0].startswith("[1/8] mrv2 greedy logits R=2 K=2 V=300 phi=0.0")
    assert re.search(r"base 10\d\.\d us  head 1\d\d\.\d us  x1\.(09|1)", lines[0]), lines[0]
    verdicts = signoff.compare(base_rows, head_rows, min_effect=signoff.PAIRED_MIN_EFFECT)
    by_point = {(r.variant, r.mode, r.phi): r.verdict for r in verdicts.itertuples()}
    assert by_point[("mrv2", "greedy", 0.0)] == "regression"
    assert by_point[("mrv2", "greedy", 0.5)] == "unchanged"
    assert by_point[("mrv2", "block", 0.0)] == "skipped"
    assert by_point[("mrv2-pre50939", "greedy", 0.0)] == "missing"


def test_signoff_commits_a_a_passes_and_cleans_up(two_commits):
    repo, base_sha, _ = two_commits
    order, calls = [], []

    def make(v, w, copies):  # the same distribution for both sides of an A/A run
        calls.append(w)
        return FakeSampler("x", 100e-6 * np.random.default_rng(len(calls)).lognormal(0, 0.002, 50), order)

    result = paired.signoff_commits(repo, base_sha, base_sha, tier="smoke", variants=["mrv2"], samples=8,
                                    machine="cpu", device="cpu", l2="warm", make_sampler=make,
                                    environment={}, log=lambda line: None)  # fmt: skip
    assert result.base == result.head == base_sha and result.exit_code == 0
    assert len(result.frame) == 8 and set(result.frame.env) == set(paired.ENVS.values())
    assert set(result.verdicts.verdict) == {"unchanged"}
    assert "**PASS**" in result.report and "worse by more than 2%" in result.report
    assert "8 samples a side alternated ABBA" in result.report
    assert len(git(repo, "worktree", "list").splitlines()) == 1
    with pytest.raises(ValueError, match="'nope' is not a commit"):
        paired.signoff_commits(repo, "nope", base_sha, make_sampler=make, environment={}, log=lambda line: None)


@pytest.mark.skipif(torch.cuda.is_available(), reason="on a GPU this would run the quick tier")
def test_cli_signoff_of_commits_needs_a_gpu(capsys):
    from specsample.cli import main

    assert main(["signoff", "HEAD", "HEAD"]) == 2
    assert "needs a CUDA GPU" in capsys.readouterr().err
