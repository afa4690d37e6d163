"""Loader tests: real asv 0.6.6 files (tests/fixtures/asv_results) and hand-made broken ones."""

import itertools
import json
import logging
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsample.schema import axis_name

from specsample.track import results
from specsample.track.results import loader
from specsample.track.results import (
    COLUMNS,
    Problem,
    commit_order,
    load_asv_regressions,
    load_results,
    machine_environment,
    parse_param,
    split_benchmark_name,
)

FIXTURES = Path(__file__).parent / "fixtures"
RESULTS = FIXTURES / "asv_results"
HTML = FIXTURES / "asv_html"
SWEEP = "bench_sampler.NightlyBatchLatency.time_sample"
BANDWIDTH = "bench_sampler.NightlyBatchDerived.track_bandwidth_fraction"
RATIO = "bench_sampler.NightlyBatchDerived.track_ratio_to_mrv2"
STAGES = "bench_stages.NightlyStages.track_stage_us"
QUICK = "bench_sampler.QuickShapeLatency.time_sample"
# the batch sweep's time_ and three track_ methods, the kernel stages, the quick grid
POINTS_PER_FILE = 4 * 144 + 24 + 4


@pytest.fixture(scope="module")
def loaded():
    return load_results(RESULTS)


@pytest.fixture(scope="module")
def df(loaded):
    return loaded[0]


def _result_files(root: Path) -> list[Path]:
    return sorted(p for p in (root / "cpu-fixture").glob("*-existing-*.json"))


# ---------------------------------------------------------------------------------------------
# The fixture, read as a whole
# ---------------------------------------------------------------------------------------------


def test_fixture_loads_without_problems(loaded):
    df, problems = loaded
    assert problems == []
    assert len(df) == 5 * POINTS_PER_FILE


def test_columns_and_dtypes_follow_the_contract(df):
    assert list(df.columns) == list(COLUMNS)  # the fixture has no extra parameter axis
    for column, dtype in COLUMNS.items():
        assert df[column].dtype == pd.api.types.pandas_dtype(dtype), column


def test_one_row_per_benchmark_commit_machine_point(df):
    key = ["benchmark", "commit", "machine", *results.PARAM_COLUMNS]
    assert not df.duplicated(key).any()


def test_rows_follow_itertools_product_order_of_the_file(df):
    path = _result_files(RESULTS)[0]
    raw = json.loads(path.read_text())
    entry = dict(zip(raw["result_columns"], raw["results"][SWEEP]))
    names = json.loads((RESULTS / "benchmarks.json").read_text())[SWEEP]["param_names"]
    rows = df[(df.commit == raw["commit_hash"]) & (df.benchmark == SWEEP)]
    assert len(rows) == len(entry["result"])
    for i in (0, 1, 37, 143):
        combo = list(itertools.product(*entry["params"]))[i]
        expected = {axis_name(n): parse_param(v) for n, v in zip(names, combo)}
        match = rows
        for name, value in expected.items():
            match = match[match[name] == value]
        assert len(match) == 1
        assert match["value"].iloc[0] == pytest.approx(entry["result"][i])
        assert match["samples"].iloc[0] == pytest.approx(entry["samples"][i])


def test_params_parsed_to_python_types(df):
    row = df[df.benchmark == SWEEP].iloc[0]
    assert isinstance(row.subject, str) and not row.subject.startswith("'")
    assert set(df.subject.dropna()) == {"mrv2", "mrv2-pre50939", "torch-eager", "flashinfer"}
    assert set(df.num_reqs.dropna()) == {1, 8, 64}
    assert set(df.placeholder_density.dropna()) == {0.0, 0.5, 0.9}
    assert set(df.placeholder_pattern) == {"trailing"}
    assert set(df[df.benchmark == STAGES].stage) == {
        "stats",
        "cum_log_p",
        "residual_mass",
        "rejection",
        "resample",
        "insert",
    }
    assert df[df.benchmark != STAGES].stage.isna().all()


def test_name_split_into_module_tier_sweep_metric(df):
    row = df[df.benchmark == BANDWIDTH].iloc[0]
    assert (row.module, row.tier, row.sweep, row.metric) == (
        "bench_sampler",
        "nightly",
        "Batch",
        "track_bandwidth_fraction",
    )
    assert set(df[df.benchmark == SWEEP].sweep) == {"Batch"}  # Latency and Derived share it
    assert set(df[df.benchmark == QUICK].tier) == {"quick"}
    assert set(df[df.benchmark == STAGES].sweep) == {"Stages"}


def test_time_rows_carry_spread_and_samples(df):
    timed = df[(df.metric == "time_sample") & (df.status == "ok")]
    assert timed.samples.map(len).eq(timed.n_samples).all()
    # asv rounds stats to 5 significant digits (util.truncate_float_list), hence the slack
    slack = 1 + 1e-4
    assert (timed.ci_lo <= timed.value * slack).all() and (timed.value <= timed.ci_hi * slack).all()
    assert (timed.q25 <= timed.value * slack).all() and (timed.value <= timed.q75 * slack).all()
    # asv's value is the median of the recorded samples
    assert timed.value.to_numpy() == pytest.approx(timed.samples.map(np.median).to_numpy())


def test_track_rows_have_one_value_and_no_spread(df):
    tracked = df[df.metric.str.startswith("track_")]
    assert tracked.samples.isna().all() and tracked.n_samples.isna().all()
    assert tracked.ci_lo.isna().all()
    assert set(tracked.unit) == {"fraction of copy bandwidth", "us", "ratio"}


def test_failed_and_skipped_points(df):
    failed = df[df.status == "failed"]
    assert set(failed.benchmark) == {BANDWIDTH, RATIO}
    planted = failed[failed.benchmark == BANDWIDTH]
    assert set(planted.subject) == {"torch-eager"} and set(planted.num_reqs) == {64}
    # NotImplementedError raised in a track_ body (not setup) is a failure in asv-runner 0.3.2
    assert set(failed[failed.benchmark == RATIO].subject) == {"mrv2"}
    assert failed.value.isna().all()
    skipped = df[df.status == "skipped"]
    assert set(zip(skipped.benchmark, skipped.subject, skipped["mode"])) == {(QUICK, "flashinfer", "block")}
    assert len(skipped) == 5  # one per commit


def test_gpuinfo_joined_by_commit_and_missing_file_gives_missing_columns(df):
    order = commit_order(df)
    per_commit = df.drop_duplicates("commit").set_index("commit")
    drivers = [per_commit.driver.get(c) for c in order.commit]
    assert drivers[:4] == ["570.124.06", "570.124.06", "570.124.06", "575.51.03"]
    assert pd.isna(drivers[4]) and pd.isna(per_commit.gpu[order.commit.iloc[4]])


def test_dates_are_utc_and_commit_order_follows_them(df):
    assert str(df.date.dt.tz) == "UTC"
    order = commit_order(df)
    assert list(order.position) == [0, 1, 2, 3, 4]
    assert order.date.is_monotonic_increasing
    assert order.date.dt.day.tolist() == [1, 2, 3, 4, 5]  # nightly 01 .. 05 of November 2026
    assert results.latest_commit(df, "cpu-fixture") == order.commit.iloc[-1]


def test_machine_environment_of_newest_run_with_gpuinfo(df):
    commit = commit_order(df).commit.iloc[3]
    info = machine_environment(df, commit=commit)
    assert info["machine"] == "cpu-fixture" and info["driver"] == "575.51.03"
    assert machine_environment(df)["gpu"] is None  # newest commit has no gpuinfo file


def test_machine_environment_of_rows_without_a_commit():
    """A sign-off of two subjects (two releases) measures no commit of ours: its rows carry the
    GPU's description all the same, and the report shows it."""
    row = {"machine": "h200", "gpu": "NVIDIA H200", "driver": "580.159.04", "benchmark": "b", "value": 1.0}
    info = machine_environment(results.to_frame([row, dict(row, benchmark="c")]))
    assert info["machine"] == "h200" and info["commit"] is None
    assert info["gpu"] == "NVIDIA H200" and info["driver"] == "580.159.04"


# ---------------------------------------------------------------------------------------------
# Broken files are problems, not crashes
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def broken_dir(tmp_path):
    root = tmp_path / "results"
    shutil.copytree(RESULTS, root)
    first, second, third = _result_files(root)[:3]
    first.write_text(first.read_text()[:5000])  # truncated mid-write
    data = json.loads(second.read_text())
    data["version"] = 3  # a newer asv wrote it
    second.write_text(json.dumps(data))
    third.write_bytes(b"\x00\xff not json")
    return root, {first.name, second.name, third.name}


def test_corrupt_truncated_and_newer_files_are_skipped_and_logged(broken_dir, caplog):
    root, bad = broken_dir
    with caplog.at_level(logging.WARNING, logger="specsample.results"):
        df, problems = load_results(root)
    assert {p.path.name for p in problems} == bad
    assert all(isinstance(p, Problem) and p.reason for p in problems)
    assert len(df) == 2 * POINTS_PER_FILE
    for name in bad:
        assert name in caplog.text
    newer = next(p for p in problems if "version" in p.reason)
    assert "3" in newer.reason


def test_bad_gpuinfo_and_missing_benchmarks_json_do_not_crash(tmp_path):
    root = tmp_path / "results"
    shutil.copytree(RESULTS, root)
    (root / "benchmarks.json").unlink()
    next((root / "cpu-fixture").glob("*.gpuinfo")).write_text("{")
    df, problems = load_results(root)
    assert len(df) == 5 * POINTS_PER_FILE
    assert {p.path.name for p in problems} >= {"benchmarks.json"}
    assert any(p.path.suffix == ".gpuinfo" for p in problems)
    assert "param1" in df.columns  # asv's default names when benchmarks.json is gone


# ---------------------------------------------------------------------------------------------
# Hand-made files: product order, unknown params, mismatched params
# ---------------------------------------------------------------------------------------------

RESULT_COLUMNS = [
    "result",
    "params",
    "version",
    "started_at",
    "duration",
    "stats_ci_99_a",
    "stats_ci_99_b",
    "stats_q_25",
    "stats_q_75",
    "stats_number",
    "stats_repeat",
    "samples",
    "profile",
]


def _write_run(root: Path, benchmarks: dict, results_: dict, commit: str = "a" * 40) -> Path:
    """A minimal asv 0.6.6 results tree; results_ maps name -> list of result_columns values."""
    (root / "m1").mkdir(parents=True, exist_ok=True)
    (root / "benchmarks.json").write_text(json.dumps({**benchmarks, "version": 2}))
    (root / "m1" / "machine.json").write_text(json.dumps({"machine": "m1", "version": 1}))
    path = root / "m1" / f"{commit[:8]}-existing-py.json"
    path.write_text(
        json.dumps(
            {
                "commit_hash": commit,
                "env_name": "existing-py",
                "date": 1_700_000_000_000,
                "params": {"machine": "m1"},
                "python": "3.11",
                "requirements": {},
                "env_vars": {},
                "result_columns": RESULT_COLUMNS,
                "results": results_,
                "durations": {},
                "version": 2,
            }
        )
    )
    return path


def test_unknown_param_becomes_an_extra_column_and_product_order_holds(tmp_path):
    name = "bench_sampler.FullDtype.track_x"
    benchmarks = {
        name: {"param_names": ["variant", "dtype", "num_reqs"], "unit": "GB/s", "params": [], "type": "track"}
    }
    params = [["'mrv2'", "'torch-eager'"], ["'bf16'", "'fp32'"], ["1", "4"]]
    values = [float(i) for i in range(8)]
    _write_run(tmp_path, benchmarks, {name: [values, params, "v1"]})
    df, problems = load_results(tmp_path)
    assert problems == []
    assert list(df.columns) == [*COLUMNS, "dtype"]
    for i, (variant, dtype, n) in enumerate(itertools.product(*params)):
        row = df[(df.subject == parse_param(variant)) & (df.dtype == parse_param(dtype)) & (df.num_reqs == int(n))]
        assert row.value.tolist() == [values[i]]
    assert df.tier.iloc[0] == "full" and df.sweep.iloc[0] == "Dtype"


def test_param_count_mismatch_skips_only_that_benchmark(tmp_path):
    good, bad = "m.QuickA.track_a", "m.QuickB.track_b"
    benchmarks = {good: {"param_names": ["K"], "unit": "x"}, bad: {"param_names": ["K", "phi"], "unit": "x"}}
    _write_run(tmp_path, benchmarks, {good: [[1.0, 2.0], [["1", "2"]]], bad: [[1.0, 2.0], [["1", "2"]]]})
    df, problems = load_results(tmp_path)
    assert set(df.benchmark) == {good}
    assert len(problems) == 1 and bad in problems[0].reason


def test_all_failed_benchmark_stored_as_single_null(tmp_path):
    name = "m.NightlyX.time_y"
    _write_run(tmp_path, {name: {"param_names": ["K"], "unit": "seconds"}}, {name: [None, [["1", "2", "3"]]]})
    df, _ = load_results(tmp_path)
    assert df.status.tolist() == ["failed"] * 3 and df.value.isna().all()


def test_empty_results_dir_gives_empty_frame_with_contract(tmp_path):
    df, problems = load_results(tmp_path)
    assert df.empty and list(df.columns) == list(COLUMNS)
    assert [p.path.name for p in problems] == ["benchmarks.json"]


# ---------------------------------------------------------------------------------------------
# Small helpers
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text, expected",
    [
        ("'mrv2'", "mrv2"),
        ("128", 128),
        ("0.5", 0.5),
        ("None", None),
        ("True", True),
        ("<class 'torch.float16'>", "<class 'torch.float16'>"),
    ],
)
def test_parse_param(text, expected):
    assert parse_param(text) == expected


@pytest.mark.parametrize(
    "name, expected",
    [
        ("bench_sampler.NightlyBatchSweep.time_sample", ("bench_sampler", "nightly", "BatchSweep", "time_sample")),
        (
            "bench_sampler.NightlyDensityDerived.track_ratio_to_mrv2",
            ("bench_sampler", "nightly", "Density", "track_ratio_to_mrv2"),
        ),
        ("bench_sampler.SmokeGridLatency.time_sample", ("bench_sampler", "smoke", "Grid", "time_sample")),
        ("bench_stages.FullStages.track_stage_us", ("bench_stages", "full", "Stages", "track_stage_us")),
        ("pkg.bench.FullGrid.time_x", ("pkg.bench", "full", "Grid", "time_x")),
        ("bench_misc.Adhoc.time_x", ("bench_misc", None, "Adhoc", "time_x")),
        ("bench_misc.QuickLatency.time_x", ("bench_misc", "quick", "Latency", "time_x")),
        ("bench_misc.time_fn", ("bench_misc", None, None, "time_fn")),
    ],
)
def test_split_benchmark_name(name, expected):
    got = split_benchmark_name(name)
    assert (got["module"], got["tier"], got["sweep"], got["metric"]) == expected


def test_tiers_and_axes_match_the_suite():
    from specsample import schema, tiers

    assert [t.lower() for t in loader.TIERS] == list(schema.TIERS)
    assert {s.tier for s in tiers.sweeps()} <= set(schema.TIERS)
    assert set(results.PARAM_COLUMNS) == {a for s in tiers.sweeps() for a in s.axis_names}


def test_api_versions_match_installed_asv():
    asv_results = pytest.importorskip("asv.results")
    asv_benchmarks = pytest.importorskip("asv.benchmarks")
    assert loader.RESULTS_API_VERSION == asv_results.Results.api_version
    assert loader.BENCHMARKS_API_VERSION == asv_benchmarks.Benchmarks.api_version


# ---------------------------------------------------------------------------------------------
# asv publish's regressions.json
# ---------------------------------------------------------------------------------------------


def test_asv_regressions_find_the_planted_mrv2_step(df):
    steps, problems = load_asv_regressions(HTML)
    assert problems == []
    assert set(steps.commit_after) <= set(df.commit)
    kernel = steps[steps.benchmark == STAGES]
    third = commit_order(df).commit.iloc[2]
    assert set(kernel.subject) == {"mrv2"} and set(kernel.commit_after) == {third}
    assert kernel.change.to_numpy() == pytest.approx(0.15, rel=1e-6)
    assert set(kernel.machine) == {"cpu-fixture"}
    assert steps.num_reqs.dtype == "Int64"


def test_asv_regressions_absent_or_broken(tmp_path):
    steps, problems = load_asv_regressions(tmp_path)
    assert steps.empty and problems == []
    (tmp_path / "regressions.json").write_text('{"regressions": [')
    steps, problems = load_asv_regressions(tmp_path)
    assert steps.empty and len(problems) == 1


@pytest.mark.parametrize("module", ["specsample", "specsample.track.results", "specsample.schema", "specsample.cli"])
def test_importing_loads_no_torch_and_no_triton(module):
    """The results frame, the names and the CLI's parser load without torch or Triton, so the
    dashboards and reports build on any machine."""
    import subprocess
    import sys

    code = f"import sys, {module}; print(sorted(m for m in ('torch', 'triton') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_point_ratio_pairs_the_points_both_subjects_ran():
    """Median where a point has several rows; a NaN axis (a sampler row's stage) still pairs;
    a point one subject lacks is left out."""
    rows = pd.DataFrame(
        [
            {"subject": "a", "num_reqs": 1, "stage": None, "value": 2.0},
            {"subject": "a", "num_reqs": 1, "stage": None, "value": 4.0},
            {"subject": "b", "num_reqs": 1, "stage": None, "value": 1.5},
            {"subject": "a", "num_reqs": 8, "stage": None, "value": 9.0},
            {"subject": "b", "num_reqs": 32, "stage": None, "value": 1.0},
        ]
    )
    ratio = results.point_ratio(rows, "a", "b", ["num_reqs", "stage"])
    assert len(ratio) == 1 and ratio.iloc[0] == pytest.approx(2.0)
    assert ratio.index[0][0] == 1
