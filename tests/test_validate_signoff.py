"""``specsample signoff-validate`` (specsample.runs.validate): the iteration picker, the
run order, the separate-process comparisons, and the whole flow on CPU (--smoke: Triton
interpreter, tiny shapes, host timer). Timing on CPU is meaningless: the smoke test checks the
flow (calibration, planted commits, sign-offs, separate-process rows, outputs), not detection."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import pandas as pd
import pytest
from gitrepo import make_repo

from specsample.cli import main
from specsample.track import signoff
from specsample.runs.asv import git
from specsample.track.results import COLUMNS, to_frame
from specsample.runs import calibration, detection, paired, plants


def test_choose_iters_interpolates_the_measured_curve():
    linear = [(0, 0.0), (2, 0.01), (4, 0.02), (8, 0.04), (16, 0.08), (32, 0.16)]
    assert calibration.choose_iters(linear, (0.03, 0.05, 0.10), 4096) == {0.03: 6, 0.05: 10, 0.10: 20}
    # hidden under memory time at first, then linear: the knee is interpolated, not assumed away
    knee = [(0, 0.0), (2, 0.0), (4, -0.001), (8, 0.0), (16, 0.01), (32, 0.06), (64, 0.20)]
    assert calibration.choose_iters(knee, (0.03, 0.05, 0.10), 4096) == {0.03: 22, 0.05: 29, 0.10: 41}
    # past the largest measurement: the last rising segment's slope
    assert calibration.choose_iters([(0, 0.0), (2, 0.01), (4, 0.02)], (0.05,), 4096) == {0.05: 10}
    # no measurable effect, or a cap: still distinct and increasing
    assert calibration.choose_iters([(0, 0.0), (1, -0.2)], (0.03, 0.05, 0.10), 64) == {0.03: 1, 0.05: 2, 0.10: 3}
    assert calibration.choose_iters(linear, (0.03, 0.05, 0.10), 8) == {0.03: 6, 0.05: 8, 0.10: 8}


def test_linear_fit_is_least_squares():
    assert calibration.linear_fit([(0, 0.0), (10, 0.05), (20, 0.1)]) == pytest.approx((0.0, 0.005))
    assert calibration.linear_fit([(0, 0.0)]) == (0.0, 0.0)


def test_run_order_keeps_both_kinds_early():
    names = [name for name, _, _ in plants.run_order(5, (0.03, 0.05, 0.10))]
    assert names == ["A/A 1", "planted 5%", "planted 10%", "A/A 2", "planted 3%", "A/A 3", "A/A 4", "A/A 5"]
    assert [name for name, _, _ in plants.run_order(1, (0.03, 0.05, 0.10))] == [
        "A/A 1",
        "planted 5%",
        "planted 10%",
        "planted 3%",
    ]


def _side_rows(env: str, commit: str, seconds: dict[tuple[str, str], float], seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    rows = []
    for (subject, mode), median in seconds.items():
        samples = list(median * rng.lognormal(0.0, 0.002, 20))
        rows.append(
            {
                "commit": commit,
                "machine": "h200",
                "env": env,
                "benchmark": "bench_sampler.QuickDensityLatency.time_sample",
                "metric": "time_sample",
                "unit": "seconds",
                "subject": subject,
                "mode": mode,
                "draft": "logits",
                "num_reqs": 128,
                "num_speculative_steps": 4,
                "vocab_size": 151936,
                "placeholder_density": 0.0,
                "placeholder_pattern": "trailing",
                "status": "ok",
                "samples": samples,
                "value": float(np.median(samples)),
                "semantics": "same draws",
            }
        )
    return rows


def _run(name: str, target, order: int, base_seconds: dict, head_seconds: dict, seed: int) -> detection.Run:
    frame = to_frame(
        _side_rows(paired.ENVS["base"], "h" * 40, base_seconds, seed)
        + _side_rows(paired.ENVS["head"], "p" * 40, head_seconds, seed + 1)
    )
    verdicts = signoff.compare(*paired.split_sides(frame), min_effect=signoff.PAIRED_MIN_EFFECT)
    result = paired.SignoffResult("h" * 40, "p" * 40, frame, verdicts, "", signoff.exit_code(verdicts), 1.0)
    return detection.Run(name, target, "p" * 40, result=result, order=order)


def test_separate_process_rows_pair_other_runs_sides_at_the_asv_threshold(tmp_path):
    """Two runs' base sides are the same code in separate processes (A/A); a plant's head side
    against the previous run's base side is the plant seen unpaired, at 5% and no floor."""
    points = {("mrv2", "block"): 100e-6, ("mrv2", "greedy"): 50e-6, ("fast", "block"): 80e-6}
    drifted = {k: v * 1.06 for k, v in points.items()}  # a 6% process-to-process drift
    planted = {**points, ("mrv2", "block"): 110e-6}
    runs = [
        _run("A/A 1", None, 0, points, points, seed=1),
        _run("planted 10%", 0.10, 1, points, planted, seed=3),
        _run("A/A 2", None, 2, drifted, drifted, seed=5),
    ]
    opts = plants.options(tmp_path, tmp_path, cuda=False)
    seps = detection.separate_comparisons(runs, opts)
    assert [(s.name, s.base_of, s.head_of) for s in seps] == [
        ("A/A (separate) 1", "A/A 1", "planted 10%"),
        ("planted 10% (separate)", "A/A 1", "planted 10%"),
        ("A/A (separate) 2", "planted 10%", "A/A 2"),
    ]
    assert all(
        {k: s.verdicts.attrs["thresholds"][k] for k in ("alpha", "min_effect", "min_abs_seconds")}
        == {"alpha": 0.002, "min_effect": 0.05, "min_abs_seconds": 0.0}
        for s in seps
    )
    rows = {s.name: detection.judge_separate(s) for s in seps}
    assert rows["A/A (separate) 1"]["verdict"] == "no false alarm"
    assert (
        rows["planted 10% (separate)"]["verdict"] == "caught everywhere"
        and rows["planted 10% (separate)"]["touched"] == "1 / 1"
    )
    assert rows["A/A (separate) 2"]["verdict"] == "3 false alarms"  # the drift, flagged at 5%
    assert detection._false_alarm_line(seps, opts).startswith(
        "Separate-process false alarms at 5% (no absolute floor): 3 regressions flagged in 6 A/A point comparisons"
    )
    # the paired criterion is not theirs: the paired runs pass
    assert [detection.judge(r)["verdict"] for r in runs] == ["pass", "pass", "pass"]
    assert detection.overall(runs) == "PASS"
    matrix = detection.matrix_markdown(runs, seps, None, opts, "h" * 40, "HEAD", 1.0)
    assert (
        "| A/A (separate) 2 | planted 10% (base) | A/A 2 (base; —) | 1 / 1 | 2 / 2 | 0 | 0 | 3 false alarms |" in matrix
    )


def test_paired_rows_judge_a_a_required_and_reported_plants():
    points = {("mrv2", "block"): 100e-6, ("mrv2", "greedy"): 50e-6, ("fast", "block"): 80e-6}
    slow = {**points, ("mrv2", "block"): 110e-6}
    everywhere = {k: v * 1.10 for k, v in points.items()}
    aa, caught = _run("A/A 1", None, 0, points, points, 1), _run("planted 5%", 0.05, 1, points, slow, 3)
    missed, loud = _run("planted 3%", 0.03, 2, points, points, 5), _run("planted 10%", 0.10, 3, points, everywhere, 7)
    rows = {r.name: detection.judge(r) for r in (aa, caught, missed, loud)}
    assert rows["A/A 1"] == {
        "touched": "0 / 1",
        "untouched": "0 / 2",
        "improvements": 0,
        "unverified": 0,
        "exit": 0,
        "verdict": "pass",
    }
    assert rows["planted 5%"]["verdict"] == "pass" and rows["planted 5%"]["touched"] == "1 / 1"
    assert rows["planted 3%"]["verdict"] == "missed 1 (no requirement)"
    assert rows["planted 10%"]["verdict"] == "FAIL" and rows["planted 10%"]["untouched"] == "2 / 2"
    assert detection.overall([aa, caught, missed]) == "PASS" and detection.overall([aa, loud]) == "FAIL"
    cut = detection.Run("A/A 2", None, "h" * 40, skipped="time budget: ...")
    assert (
        detection.judge(cut) == {"verdict": "not run (time budget: ...)"}
        and detection.overall([aa, cut]) == "INCOMPLETE"
    )


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_smoke_validation_end_to_end(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("SPECSAMPLE_CACHE", str(tmp_path / "cache"))
    repo = make_repo(tmp_path / "repo")
    head = git(repo, "rev-parse", "HEAD")
    out = tmp_path / "out"
    code = main(
        [
            "signoff-validate",
            "--smoke",
            "--aa-runs",
            "1",
            "--subjects",
            "mrv2",
            "--targets",
            "0.1",
            "--repo",
            str(repo),
            "--out",
            str(out),
        ]
    )
    assert code in (0, 1)  # pass/fail is CPU noise here
    # frames.parquet where pyarrow is installed (the GPU box), else frames.csv
    frames_file = "frames.parquet" if (out / "frames.parquet").exists() else "frames.csv"
    assert sorted(p.name for p in out.iterdir()) == sorted(
        ["calibration.json", "detection-matrix.md", frames_file, "reports.md", "verdicts.csv"]
    )

    calibration = json.loads((out / "calibration.json").read_text())
    chosen = {float(t): n for t, n in calibration["chosen"].items()}
    assert sorted(chosen) == [0.10] and chosen[0.10] >= 1
    assert set(calibration["measured"]) == set(calibration["chosen"]) and calibration["scan"][0] == [0, 0.0]
    assert calibration["point"]["mode"] == "block" and calibration["point"]["vocab_size"] == 300

    matrix = (out / "detection-matrix.md").read_text()
    paired_part, separate_part = matrix.split("## Separate-process comparisons")
    rows = [line for line in paired_part.splitlines() if line.startswith(("| A/A", "| planted"))]
    assert [r.split(" | ")[0] for r in rows] == ["| A/A 1", "| planted 10%"]
    for row in rows:  # touched = mrv2 block + draft logits (2 of the 4 smoke points of mrv2)
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 8 and re.fullmatch(r"\d / 2", cells[2]) and re.fullmatch(r"\d / 2", cells[3])
        assert cells[7] in ("pass", "FAIL")
    assert re.search(r"^\*\*(PASS|FAIL)\*\*", matrix, re.M) and "SMOKE" in matrix
    # separate-process rows: A/A 1's base side against planted 10%'s base and head sides
    seps = [line.split(" | ")[:3] for line in separate_part.splitlines() if line.startswith("| ") and "---" not in line]
    assert seps[:2] == [
        ["| comparison", "base side of", "head side of"],
        ["| A/A (separate) 1", "A/A 1 (base)", "planted 10% (base; —)"],
    ]
    assert len(seps) == 3 and seps[2][:2] == ["| planted 10% (separate)", "A/A 1 (base)"]
    assert seps[2][2].startswith(f"planted 10% (head; 10%: {chosen[0.10]} iterations, ")
    assert "Separate-process false alarms at 5% (no absolute floor): " in separate_part

    # plants are head sides wrapped in the delay subject: nothing committed, no branch, no worktree
    assert git(repo, "rev-list", "--all", "--count") == "1"
    assert len(git(repo, "worktree", "list").splitlines()) == 1 and git(repo, "rev-parse", "HEAD") == head
    frames_all = (
        pd.read_parquet(out / frames_file) if frames_file.endswith(".parquet") else pd.read_csv(out / frames_file)
    )
    assert set(frames_all.commit) == {head}

    reports = (out / "reports.md").read_text()
    assert reports.count("## specsample sign-off: ") == 2 and "# planted 10%" in reports
    assert reports.count("## separate-process comparison: ") == 2
    frames = pd.read_parquet(out / frames_file) if frames_file.endswith(".parquet") else pd.read_csv(out / frames_file)
    assert list(frames.columns) == [*COLUMNS, "run"] and len(frames) == 2 * 2 * 4
    assert set(frames.run) == {"A/A 1", "planted 10%"}
    verdicts = pd.read_csv(out / "verdicts.csv")
    assert {"verdict", "ratio", "run", "comparison"} <= set(verdicts.columns)
    assert verdicts.groupby("comparison").size().to_dict() == {"paired": 2 * 4, "separate": 2 * 4}
    printed = capsys.readouterr().out
    assert "calibration at mrv2 block logits R=2 K=2 V=300" in printed and "[run 2/2] planted 10%" in printed


def test_validate_refuses_what_it_cannot_validate(tmp_path, capsys):
    assert main(["signoff-validate", "--smoke", "--repo", str(tmp_path), "--out", str(tmp_path / "out")]) == 2
    assert "is not a git repository" in capsys.readouterr().err
