"""scripts/validate_signoff.py: the iteration picker, the run order, and the whole flow on CPU
(--smoke: Triton interpreter, tiny shapes, host timer). Timing on CPU is meaningless: the smoke
test checks the flow (calibration, planted commits, sign-offs, outputs), not detection."""

from __future__ import annotations

import json
import re
import shutil

import pandas as pd
import pytest
from script_loader import script_module
from gitrepo import make_repo

from specsample.track.asv_runs import git
from specsample.track.results import COLUMNS


@pytest.fixture(scope="module")
def script():
    with script_module("validate_signoff") as module:
        yield module


def test_choose_iters_interpolates_the_measured_curve(script):
    linear = [(0, 0.0), (2, 0.01), (4, 0.02), (8, 0.04), (16, 0.08), (32, 0.16)]
    assert script.choose_iters(linear, (0.03, 0.05, 0.10), 4096) == {0.03: 6, 0.05: 10, 0.10: 20}
    # hidden under memory time at first, then linear: the knee is interpolated, not assumed away
    knee = [(0, 0.0), (2, 0.0), (4, -0.001), (8, 0.0), (16, 0.01), (32, 0.06), (64, 0.20)]
    assert script.choose_iters(knee, (0.03, 0.05, 0.10), 4096) == {0.03: 22, 0.05: 29, 0.10: 41}
    # past the largest measurement: the last rising segment's slope
    assert script.choose_iters([(0, 0.0), (2, 0.01), (4, 0.02)], (0.05,), 4096) == {0.05: 10}
    # no measurable effect, or a cap: still distinct and increasing
    assert script.choose_iters([(0, 0.0), (1, -0.2)], (0.03, 0.05, 0.10), 64) == {0.03: 1, 0.05: 2, 0.10: 3}
    assert script.choose_iters(linear, (0.03, 0.05, 0.10), 8) == {0.03: 6, 0.05: 8, 0.10: 8}


def test_run_order_keeps_both_kinds_early(script):
    names = [name for name, _, _ in script.run_order(5, (0.03, 0.05, 0.10))]
    assert names == ["A/A 1", "planted 5%", "planted 10%", "A/A 2", "planted 3%", "A/A 3", "A/A 4", "A/A 5"]
    assert [name for name, _, _ in script.run_order(1, (0.03, 0.05, 0.10))] == [
        "A/A 1", "planted 5%", "planted 10%", "planted 3%"]


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_smoke_validation_end_to_end(script, tmp_path, capsys):
    repo = make_repo(tmp_path / "repo")
    head = git(repo, "rev-parse", "HEAD")
    out = tmp_path / "out"
    code = script.main(["--smoke", "--aa-runs", "1", "--variant", "mrv2", "--repo", str(repo), "--out", str(out)])
    assert code in (0, 1)  # pass/fail is CPU noise here
    # frames.parquet where pyarrow is installed (the GPU box), else frames.csv
    frames_file = "frames.parquet" if (out / "frames.parquet").exists() else "frames.csv"
    assert sorted(p.name for p in out.iterdir()) == sorted([
        "calibration.json", "detection-matrix.md", frames_file, "reports.md", "verdicts.csv"])

    calibration = json.loads((out / "calibration.json").read_text())
    chosen = {float(t): n for t, n in calibration["chosen"].items()}
    assert sorted(chosen) == [0.03, 0.05, 0.10] and sorted(chosen.values()) == list(chosen.values())
    assert set(calibration["measured"]) == set(calibration["chosen"]) and calibration["scan"][0] == [0, 0.0]

    matrix = (out / "detection-matrix.md").read_text()
    rows = [line for line in matrix.splitlines() if line.startswith("| A/A") or line.startswith("| planted")]
    assert [r.split(" | ")[0] for r in rows] == ["| A/A 1", "| planted 3%", "| planted 5%", "| planted 10%"]
    for row in rows:  # touched = mrv2 block + draft logits (2 of the 4 smoke points of mrv2)
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert len(cells) == 8 and re.fullmatch(r"\d / 2", cells[2]) and re.fullmatch(r"\d / 2", cells[3])
        assert cells[7] in ("pass", "FAIL") or cells[7].endswith("(no requirement)")
    assert re.search(r"^\*\*(PASS|FAIL)\*\*", matrix, re.M) and "SMOKE" in matrix

    # planted commits: on HEAD, only BALLAST_ITERS changed, on no branch; worktrees cleaned up
    for target, iters in chosen.items():
        sha8 = re.search(rf"\| {100 * target:g}%: {iters} iterations, [^|]*\(`([0-9a-f]{{8}})`\)", matrix).group(1)
        sha = git(repo, "rev-parse", sha8)
        assert git(repo, "rev-parse", f"{sha}^") == head
        assert git(repo, "diff", "--name-only", head, sha) == "specsample/kernels/planted.py"
        assert f"BALLAST_ITERS = {iters}\n" in git(repo, "show", f"{sha}:specsample/kernels/planted.py") + "\n"
        assert git(repo, "branch", "--contains", sha) == ""
    assert len(git(repo, "worktree", "list").splitlines()) == 1 and git(repo, "rev-parse", "HEAD") == head

    reports = (out / "reports.md").read_text()
    assert reports.count("## specsample sign-off") == 4 and "# planted 10%" in reports
    frames = pd.read_parquet(out / frames_file) if frames_file.endswith(".parquet") else pd.read_csv(out / frames_file)
    assert list(frames.columns) == [*COLUMNS, "run"] and len(frames) == 4 * 2 * 4
    assert set(frames.run) == {"A/A 1", "planted 3%", "planted 5%", "planted 10%"}
    verdicts = pd.read_csv(out / "verdicts.csv")
    assert len(verdicts) == 4 * 4 and {"verdict", "ratio", "run"} <= set(verdicts.columns)
    printed = capsys.readouterr().out
    assert "calibration at mrv2 block logits R=2 K=2 V=300" in printed and "[run 4/4] planted 3%" in printed
