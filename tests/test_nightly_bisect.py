"""The nightly's automatic bisection: which change points it takes, the vLLM commits it bisects
between, and the culprits the dashboards read back."""

from __future__ import annotations

import json

import pandas as pd

from specsample.bisect import nightly


def _changes(**overrides):
    row = {
        "id": "0123456789",
        "machine": "h200",
        "dimension": "commits",
        "subject": "vllm@main",
        "before": "a" * 40,
        "after": "b" * 40,
        "shift": False,
        "mode": "block",
    }
    return {**row, **overrides}


def test_only_new_main_changes_over_commits_are_taken():
    frame = pd.DataFrame(
        [
            _changes(),
            _changes(id="1", subject="mrv2"),
            _changes(id="2", after="c" * 40),
            _changes(id="3", shift=True),
            _changes(id="4", dimension="releases"),
        ]
    )
    assert nightly.new_main_changes(frame, "b" * 40)["id"].tolist() == ["0123456789"]
    assert nightly.new_main_changes(frame.iloc[0:0], "b" * 40).empty


def test_vllm_commits_come_from_the_two_nights_provenance():
    change = _changes()
    provenance = {
        ("h200", "a" * 8): {"vllm@main": {"kind": "vllm-ref", "commit": "1" * 40}},
        ("h200", "b" * 8): {"vllm@main": {"kind": "vllm-ref", "commit": "2" * 40}},
    }
    assert nightly.vllm_commits(change, provenance) == ("1" * 40, "2" * 40)
    assert nightly.vllm_commits(change, {k: v for k, v in provenance.items() if k[1] == "a" * 8}) is None
    same = {k: {"vllm@main": {"commit": "1" * 40}} for k in provenance}
    assert nightly.vllm_commits(change, same) is None  # vLLM did not move: nothing to bisect


def test_culprits_are_read_back_for_the_dashboards(tmp_path):
    folder = tmp_path / "h200" / nightly.CULPRITS_DIR
    folder.mkdir(parents=True)
    (folder / "0123456789.json").write_text(json.dumps({"status": "found", "culprit": "f" * 40, "candidates": []}))
    (folder / "abcdefabcd.json").write_text(
        json.dumps({"status": "ambiguous", "culprit": None, "candidates": ["1" * 40, "2" * 40]})
    )
    (folder / "broken.json").write_text("{not json")
    found = nightly.load_culprits(tmp_path)
    assert set(found) == {"0123456789", "abcdefabcd"}
    assert nightly.culprit_text(found["0123456789"]) == "culprit vllm " + "f" * 10
    assert nightly.culprit_text(found["abcdefabcd"]).startswith("culprit one of 1111111111, 2222222222")
    assert nightly.culprit_text(None) == "" and nightly.load_culprits(tmp_path / "none") == {}


def test_the_dashboard_names_the_culprit(tmp_path):
    from specsample.dashboard import _with_culprits

    folder = tmp_path / "h200" / nightly.CULPRITS_DIR
    folder.mkdir(parents=True)
    (folder / "0123456789.json").write_text(json.dumps({"status": "found", "culprit": "f" * 40}))
    changes = pd.DataFrame([_changes(), _changes(id="9999999999")])
    out = _with_culprits(changes, tmp_path)
    assert out["culprit"].tolist() == ["culprit vllm " + "f" * 10, ""]
