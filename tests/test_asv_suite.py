"""The asv suite itself: ``asv check`` passes and the CPU smoke tier runs end to end.

The smoke tier runs the Triton interpreter on CPU (tiny shapes); on a CUDA machine it runs the
compiled kernels. Results go to a temporary directory, never into results/.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from specsample.runs.asv import run_tier
from specsample.tiers import sweeps
from specsample.track.results import load_results

REPO = Path(__file__).resolve().parents[1]

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="asv needs git")


# The interpreter only where there is no GPU (conftest sets it then); on a GPU box the smoke
# tier runs the compiled kernels.
INTERPRET = os.environ.get("TRITON_INTERPRET", "0" if torch.cuda.is_available() else "1")


def _env() -> dict:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    return dict(os.environ, ASV_PYTHONPATH=path, PYTHONPATH=path, TRITON_INTERPRET=INTERPRET)


def test_asv_check_passes():
    subprocess.run(
        [sys.executable, "-m", "asv", "machine", "--yes", "--machine", "ci"], check=True, cwd=REPO, capture_output=True
    )
    proc = subprocess.run(
        [sys.executable, "-m", "asv", "check", "-E", f"existing:{sys.executable}"],
        cwd=REPO,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "No problems found" in proc.stdout


def test_smoke_tier_runs_and_loads(tmp_path, monkeypatch):
    """``specsample bench --tier smoke`` machinery: asv run in the existing environment, staged
    results promoted into a results dir, GPU info written, and the loader reads them back."""
    monkeypatch.setenv("TRITON_INTERPRET", INTERPRET)
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    results = tmp_path / "results"
    written = run_tier("smoke", repo=REPO, results_dir=results, machine="ci", commit=commit, log=lambda _: None)
    assert any(p.name.startswith(commit[:8]) and p.suffix == ".json" for p in written)
    assert json.loads((results / "ci" / f"{commit[:8]}.gpuinfo").read_text())["torch"]
    df, problems = load_results(results)
    assert not problems
    smoke = df[df["tier"] == "smoke"]
    assert len(smoke) == sum(len(s.points()) for s in sweeps("smoke")) and (smoke["status"] == "ok").all()
    assert (smoke["value"] > 0).all()


def test_the_tier_table_in_the_docs_counts_what_the_tiers_declare():
    """docs/measurement.md's tier table lists each tier's sweeps with their points, and the asv
    results they make (a Latency point: time_sample and three track_ metrics; a derived-only
    point: three; a stage point and a smoke point: one), as tiers.py declares them now."""
    from specsample.schema import TIERS

    rows = {}
    for line in (REPO / "docs" / "measurement.md").read_text().splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0].strip("`")] = cells
    assert set(rows) == set(TIERS)
    for tier, (_, listed, results, _) in rows.items():
        declared = [
            f"{s.name} ({len(s.points())}"
            + (", derived only" if s.kind == "sampler" and not s.latency and tier != "smoke" else "")
            + ")"
            for s in sweeps(tier)
        ]
        count = sum(
            len(s.points()) * (1 if tier == "smoke" or s.kind == "stages" else 4 if s.latency else 3)
            for s in sweeps(tier)
        )
        assert listed.split(":")[0] == ", ".join(declared), tier
        assert int(results) == count, tier
