"""The releases page's path section (specsample.dashboard.paths): which release has which path,
its latency off and on, and the rates measured there, from frames the test builds."""

from __future__ import annotations

import numpy as np
import pandas as pd
import synthetic_results as sr

from specsample.dashboard import paths, select


def _fly_rows() -> pd.DataFrame:
    """The releases tier's FLy sweep for three releases (FLy from the third) and express: window
    0 everywhere, window 2 skipped where the subject lacks FLy."""
    rng = np.random.default_rng(3)
    rows = []
    for subject, has_fly in (
        ("vllm==0.32.0", False),
        ("vllm==0.33.0", True),
        ("vllm==0.9.0", False),
        ("express", False),
    ):
        for window in (0, 2):
            ok = window == 0 or has_fly
            row = sr.row(
                commit=sr.commit_hash("releases-run"),
                date=pd.Timestamp("2026-11-10", tz="UTC"),
                tier="releases",
                sweep="PathsFly",
                metric="track_latency_us",
                point={"subject": subject, "mode": "standard", "fly_window_size": window, "row_entropy": "mixed"},
                seconds=(2.4e-3 if window else 270e-6) if ok else None,
                rng=rng,
                status="ok" if ok else "skipped",
                reason=None if ok else f"{subject} has no fly path",
            )
            row["acceptance_rate"] = 0.5 if ok else np.nan
            row["deferral_rate"] = 0.03 if ok and window else np.nan
            rows.append(row)
    return sr.to_frame(rows)


def test_each_release_shows_the_paths_it_has_with_latency_and_rates():
    (table,) = paths.path_tables(select.release_rows(_fly_rows()))
    assert table["sweep"] == "PathsFly" and table["columns"] == ["window 0", "window 2"]
    assert "row_entropy=mixed" in table["point"] and "fly_window_size" not in table["point"]
    by_subject = {r["subject"]: r["cells"] for r in table["rows"]}
    # releases in version order, then ours
    assert [r["subject"] for r in table["rows"]] == ["vllm==0.9.0", "vllm==0.32.0", "vllm==0.33.0", "express"]
    off, on = by_subject["vllm==0.33.0"]
    assert off["text"] == "270.0 µs" and off["rates"] == "accept 0.50"
    assert on["text"] == "2400.0 µs" and on["rates"] == "accept 0.50 · defer 0.03"
    lacking = by_subject["vllm==0.32.0"][1]
    assert lacking["text"] == "—" and lacking["title"] == "vllm==0.32.0 has no fly path"
    assert by_subject["express"][1]["status"] == "skipped"


def test_no_path_sweeps_no_tables():
    assert paths.path_tables(select.release_rows(sr.releases_frame())) == []
