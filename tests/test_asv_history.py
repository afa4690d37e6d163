"""Consistency check against the committed results: the asv suite keeps every benchmark's history.

asv plots a benchmark's results over commits only while its name, parameter names and version
(a hash of its source) stay the same, and a parameter value that disappears hides that point's
history. For every benchmark that has results in ``results/``, the suite as it is now must have
the same name, the same parameter names, the same version, and every parameter value it had
(new values may be appended).
"""

from __future__ import annotations

import glob
import json
import sys
from pathlib import Path

import pytest
from asv_runner.discovery import disc_benchmarks

REPO = Path(__file__).resolve().parents[1]


def _measured() -> dict[str, dict]:
    old = json.loads((REPO / "results" / "benchmarks.json").read_text())
    with_results = set()
    for path in glob.glob(str(REPO / "results" / "*" / "*-*.json")):
        with_results |= set(json.loads(Path(path).read_text()).get("results", {}))
    return {name: meta for name, meta in old.items() if name in with_results}


@pytest.fixture(scope="module")
def suite() -> dict:
    sys.path.insert(0, str(REPO))
    try:
        return {b.name: b for b in disc_benchmarks(str(REPO / "benchmarks"))}
    finally:
        sys.path.remove(str(REPO))


MEASURED = _measured()


def test_there_is_history_to_keep():
    assert len(MEASURED) >= 30  # quick and nightly classes with H200 results


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_benchmark_keeps_its_history(suite, name):
    old = MEASURED[name]
    assert name in suite, f"{name} has results in results/ but no benchmark any more"
    now = suite[name]
    assert list(now.param_names) == old["param_names"]
    assert now.version == old["version"], "the benchmark's code changed: asv would hide its history"
    for axis, (was, is_now) in enumerate(zip(old["params"], now.params)):
        missing = [v for v in was if v not in is_now]
        assert not missing, f"parameter {old['param_names'][axis]} lost values {missing}"
