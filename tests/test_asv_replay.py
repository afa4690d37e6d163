"""asv ``time_sample`` replays the sweep's one shared measurement (benchmarks/common.py).

No GPU here: the sweep measurement is faked (``measure_sweep`` patched, or the run's scratch
pickle written by hand) and everything after it is asv's real machinery -- asv_runner's
benchmark-process entry point ``asv_runner.run._run`` in process, and a real ``asv run`` in a
subprocess -- so the tests show what asv records: exactly the stored per-call samples.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import pickle
import random
import re
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from asv_runner.run import _run
from asv_runner.statistics import compute_stats

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from benchmarks import common  # noqa: E402
from specsample import worker  # noqa: E402
from specsample.tiers import sweeps  # noqa: E402

SWEEP = next(s for s in sweeps("nightly") if s.name == "Placeholders")  # a small sweep with Latency
LATENCY = f"bench_sampler.{SWEEP.class_name}Latency.time_sample"
DERIVED = f"bench_sampler.{SWEEP.class_name}Derived.track_latency_us"
QUICK = {"number": 1, "repeat": 1, "warmup_time": 0, "rounds": 1}  # what asv run --quick passes


def fake_measurement(sweep, seed: int = 0) -> dict:
    """A stored sweep measurement as measure_sweep builds it: distinct, unsorted samples per
    point; the pre-#50939 replica on greedy mode left out (as an unsupported point would be);
    the greedy points timed eagerly with 5 samples (as an uncapturable variant would be)."""
    rng = random.Random(seed)
    points = {}
    for p in sweep.points():
        if p["mode"] == "greedy" and p["subject"] == "mrv2-pre50939":
            continue
        n = 5 if p["mode"] == "greedy" else 20
        samples = [1e-5 * (1 + rng.random()) for _ in range(n)]
        points[tuple(p[k] for k in sweep.axis_names)] = {
            "status": "ok",
            "samples": samples,
            "median": statistics.median(samples),
            "bytes": 1_000_000,
            "method": "events" if n == 5 else "cuda-graph",
            "l2": "cold",
            "calls_per_sample": 1 if n == 5 else 10,
            "input_copies": 1 if n == 5 else 4,
            "capture_error": None,
            "semantics": "same draws",
        }
    return {"copy_bandwidth": 4e12, "points": points}


@pytest.fixture
def run_scratch(tmp_path, monkeypatch):
    """A fresh per-run scratch directory (as a new asv run gets), under tmp_path."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv("SPECSAMPLE_RUN_ID", "test-run")
    return tmp_path / "specsample-run-test-run"


@pytest.fixture
def fake_sweeps(monkeypatch, run_scratch):
    """Patch measure_sweep with a fake; returns the stored measurement and the call log."""
    calls: list[str] = []
    stored = fake_measurement(SWEEP)

    def measure(sweep):
        calls.append(sweep.class_name)
        return stored

    monkeypatch.setattr(common, "measure_sweep", measure)
    return stored, calls


def asv_process(tmp_path: Path, name: str, idx: int, extra: dict | None = None):
    """What one asv benchmark process does for one parameter combination; its result."""
    out = tmp_path / f"result-{name}-{idx}.json"
    _run((str(REPO / "benchmarks"), f"{name}-{idx}", json.dumps(extra or {}), "None", str(out)))
    return json.loads(out.read_text())


def test_asv_records_exactly_the_stored_samples(tmp_path, fake_sweeps):
    stored, calls = fake_sweeps
    for idx, p in enumerate(SWEEP.points()):
        key = tuple(p[k] for k in SWEEP.axis_names)
        result = asv_process(tmp_path, LATENCY, idx)
        if key not in stored["points"]:
            assert isinstance(result, float) and math.isnan(result)  # asv's skip
            continue
        samples = stored["points"][key]["samples"]
        assert result == {"samples": samples, "number": 1}  # bit for bit, in measured order
        value, stats = compute_stats(result["samples"], result["number"])  # what asv stores
        assert value == pytest.approx(statistics.median(samples), rel=1e-12)
        assert stats["repeat"] == len(samples) and stats["ci_99_a"] <= value <= stats["ci_99_b"]
    assert calls == [SWEEP.class_name]  # one measurement for the whole sweep


def test_latency_and_derived_of_a_sweep_share_one_measurement(tmp_path, fake_sweeps):
    stored, calls = fake_sweeps
    for idx, p in enumerate(SWEEP.points()):
        key = tuple(p[k] for k in SWEEP.axis_names)
        derived = asv_process(tmp_path, DERIVED, idx)
        latency = asv_process(tmp_path, LATENCY, idx)
        if key in stored["points"]:
            assert derived == pytest.approx(stored["points"][key]["median"] * 1e6)
            assert latency["samples"] == stored["points"][key]["samples"]
        else:
            assert math.isnan(derived) and math.isnan(latency)
    assert calls == [SWEEP.class_name]
    assert pickle.loads((common._run_scratch() / f"{SWEEP.class_name}.pkl").read_bytes()) == stored


@pytest.mark.parametrize("override, taken", [(QUICK, 1), ({"number": 0}, 20)], ids=["quick", "auto-number"])
def test_asv_overrides_that_take_no_more_samples_replay_a_prefix(tmp_path, fake_sweeps, override, taken):
    """``--quick`` takes the first sample. ``number=0`` would calibrate, but asv_runner resolves
    it to 1 when the benchmark has a setup hook (``if isolate and number == 0: number = 1``)."""
    stored, _ = fake_sweeps
    idx = next(i for i, p in enumerate(SWEEP.points()) if p["mode"] == "block")
    key = tuple(SWEEP.points()[idx][k] for k in SWEEP.axis_names)
    assert asv_process(tmp_path, LATENCY, idx, override)["samples"] == stored["points"][key]["samples"][:taken]


@pytest.mark.parametrize(
    "override", [{"repeat": 21}, {"warmup_time": 0.2}, {"number": 2}], ids=["more-samples", "warm-up", "batched"]
)
def test_asv_asking_for_more_calls_than_samples_fails_loudly(tmp_path, fake_sweeps, override):
    idx = next(i for i, p in enumerate(SWEEP.points()) if p["mode"] == "block")  # 20 samples
    with pytest.raises(RuntimeError, match="refusing to repeat samples"):
        asv_process(tmp_path, LATENCY, idx, override)


def test_a_second_replay_of_a_point_in_one_run_fails(tmp_path, fake_sweeps):
    """asv rounds > 1 runs a point again in a new process of the same run: refused."""
    idx = next(i for i, p in enumerate(SWEEP.points()) if p["mode"] == "block")
    asv_process(tmp_path, LATENCY, idx)
    with pytest.raises(RuntimeError, match="already replayed in this asv run"):
        asv_process(tmp_path, LATENCY, idx)


def test_without_a_gpu_or_a_stored_measurement_every_point_skips(tmp_path, run_scratch):
    """Unpatched: measure_sweep needs CUDA, raises NotImplementedError, nothing is stored."""
    if common.torch.cuda.is_available():
        pytest.skip("this checks the CPU path")
    assert math.isnan(asv_process(tmp_path, LATENCY, 0))
    assert math.isnan(asv_process(tmp_path, DERIVED, 0))
    assert not (run_scratch / f"{SWEEP.class_name}.pkl").exists()


def test_measure_sweep_keeps_samples_and_method_per_point(monkeypatch, run_scratch):
    """measure_sweep hands the worker one unit per workload (the point less its subject, every
    subject of the point in it), keeps each ok record under its asv parameter tuple, leaves
    skipped points out (asv skips them), keeps failed and crashed ones (asv fails them), and
    writes the sweep's outcomes for ``specsample bench``."""
    seen = []

    def fake_run_units(units, options, log=None):
        seen.extend(units)
        outcome = worker.Outcome(records={u.key: {} for u in units}, provenance={"mrv2": {"kind": "ours"}})
        for u in units:
            for i, name in enumerate(u.subjects):
                if u.point["mode"] == "greedy" and name == "mrv2-pre50939":
                    record = {"status": "skipped", "reason": "not supported"}
                elif u.point["mode"] == "standard" and name == "fast":
                    record = {"status": "crashed", "reason": "CUDA error: an illegal memory access"}
                else:
                    record = {
                        "status": "ok",
                        "samples": [3e-6 * (i + 1), 1e-6 * (i + 1), 2e-6 * (i + 1)],
                        "median": 2e-6 * (i + 1),
                        "bytes": 123,
                        "method": "cuda-graph",
                        "l2": options.l2,
                        "calls_per_sample": options.calls_per_sample,
                        "input_copies": 4,
                        "capture_error": None,
                        "semantics": "same draws",
                    }
                outcome.records[u.key][name] = record
        return outcome

    monkeypatch.setattr(common, "_needs_cuda", lambda: None)
    monkeypatch.setattr(common.worker, "run_units", fake_run_units)
    monkeypatch.setattr(common.timing, "copy_bandwidth", lambda: 4e12)
    run_scratch.mkdir(parents=True, exist_ok=True)
    out = common.measure_sweep(SWEEP)
    assert out["copy_bandwidth"] == 4e12
    subjects = dict(SWEEP.axes)["subject"]
    points = {tuple((k, v) for k, v in p.items() if k != "subject") for p in SWEEP.points()}
    assert len(seen) == len(points) and all(u.subjects == subjects for u in seen)  # one unit per workload
    assert {tuple(u.point.items()) for u in seen} == points
    skipped = [p for p in SWEEP.points() if p["mode"] == "greedy" and p["subject"] == "mrv2-pre50939"]
    assert skipped and len(out["points"]) == len(SWEEP.points()) - len(skipped)
    key = ("mrv2-pre50939", "block", "logits", 128, 4, 151936, 1.0, "trailing")
    assert out["points"][key]["samples"] == [6e-6, 2e-6, 4e-6] and out["points"][key]["median"] == 4e-6
    crashed = ("fast", "standard", "logits", 128, 4, 151936, 1.0, "trailing")
    assert out["points"][crashed]["status"] == "crashed"
    outcomes = json.loads((run_scratch / f"{SWEEP.class_name}.outcomes.json").read_text())
    assert outcomes["subjects"] == {"mrv2": {"kind": "ours"}}
    assert len(outcomes["points"]) == len(SWEEP.points())
    assert {r["status"] for r in outcomes["points"]} == {"ok", "skipped", "crashed"}
    assert outcomes["sweeps"] == [{"tier": SWEEP.tier, "sweep": SWEEP.name, "copy_bandwidth_gbps": 4000.0}]


def test_a_crashed_point_fails_in_asv(tmp_path, monkeypatch, run_scratch):
    """A crashed subject's point raises in its benchmark process, which asv records as failed
    (null): the time_ class names the crash; the track_ class finds no median."""
    stored = fake_measurement(SWEEP)
    crashed = next(i for i, p in enumerate(SWEEP.points()) if p["mode"] == "block")
    key = tuple(SWEEP.points()[crashed][k] for k in SWEEP.axis_names)
    stored["points"][key] = {"status": "crashed", "reason": "CUDA error: an illegal memory access"}
    monkeypatch.setattr(common, "measure_sweep", lambda sweep: stored)
    with pytest.raises(RuntimeError, match="crashed: CUDA error: an illegal memory access"):
        asv_process(tmp_path, LATENCY, crashed)
    with pytest.raises(KeyError, match="median"):
        asv_process(tmp_path, DERIVED, crashed)


def test_real_asv_run_records_the_stored_samples(tmp_path):
    """``asv run`` end to end (forkserver, one process per point, results file), with the
    sweep's measurement written into the run's scratch directory beforehand."""
    from asv.results import Results

    from specsample.runs.asv import ensure_machine, write_config

    run_id = f"test-replay-{os.getpid()}"
    scratch = tmp_path / f"specsample-run-{run_id}"
    scratch.mkdir()
    stored = fake_measurement(SWEEP, seed=1)
    (scratch / f"{SWEEP.class_name}.pkl").write_bytes(pickle.dumps(stored))
    conf = write_config(
        REPO,
        tmp_path / "asv.conf.json",
        benchmark_dir=REPO / "benchmarks",
        results_dir=tmp_path / "results",
        html_dir=tmp_path / "html",
    )
    ensure_machine("ci", conf)
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    env = dict(os.environ, ASV_PYTHONPATH=path, PYTHONPATH=path, SPECSAMPLE_RUN_ID=run_id, TMPDIR=str(tmp_path))
    commit = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "asv",
            "run",
            "--config",
            str(conf),
            "--machine",
            "ci",
            "-E",
            f"existing:{sys.executable}",
            "--set-commit-hash",
            commit,
            "--record-samples",
            "--show-stderr",
            "--bench",
            f"^{re.escape(LATENCY)}",
        ],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    (result_file,) = (tmp_path / "results" / "ci").glob(f"{commit[:8]}-*.json")
    results = Results.load(str(result_file))
    params = results.get_result_params(LATENCY)  # asv keeps them as reprs: ["'mrv2'", ...]
    assert params == [[repr(v) for v in axis] for axis in SWEEP.params]
    values = results.get_result_value(LATENCY, params)
    samples = results.get_result_samples(LATENCY, params)
    stats = results.get_result_stats(LATENCY, params)
    for i, p in enumerate(SWEEP.points()):
        key = tuple(p[k] for k in SWEEP.axis_names)
        if key not in stored["points"]:
            assert values[i] is None or math.isnan(values[i])  # skipped
            continue
        want = stored["points"][key]["samples"]
        assert samples[i] == want, p
        assert values[i] == pytest.approx(statistics.median(want), rel=1e-12)
        assert stats[i]["repeat"] == len(want) and stats[i]["number"] == 1


def test_a_runs_outcomes_merge_over_the_commits_earlier_ones(tmp_path):
    """Per point and per sweep (its copy bandwidth), the newer run's record replaces the
    earlier one's; what only the earlier run measured is kept."""
    from specsample.runs.asv import _merge_outcomes

    def record(sweep, status):
        point = {"num_reqs": 1}
        return {"tier": "nightly", "sweep": sweep, "point": point, "subject": "mrv2", "status": status}

    previous = tmp_path / "abc.outcomes"
    previous.write_text(
        json.dumps(
            {
                "subjects": {"mrv2": {"kind": "ours"}},
                "points": [record("Batch", "crashed"), record("Vocab", "ok")],
                "sweeps": [
                    {"tier": "nightly", "sweep": "Batch", "copy_bandwidth_gbps": 4100.0},
                    {"tier": "nightly", "sweep": "Vocab", "copy_bandwidth_gbps": 4150.0},
                ],
            }
        )
    )
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "NightlyBatch.outcomes.json").write_text(
        json.dumps(
            {
                "subjects": {"mrv2": {"kind": "ours"}},
                "points": [record("Batch", "ok")],
                "sweeps": [{"tier": "nightly", "sweep": "Batch", "copy_bandwidth_gbps": 4200.0}],
            }
        )
    )
    merged = json.loads(_merge_outcomes(scratch, previous, tmp_path / "merged.outcomes").read_text())
    assert {(r["sweep"], r["status"]) for r in merged["points"]} == {("Batch", "ok"), ("Vocab", "ok")}
    assert {r["sweep"]: r["copy_bandwidth_gbps"] for r in merged["sweeps"]} == {"Batch": 4200.0, "Vocab": 4150.0}


def test_a_retired_subject_stays_on_the_axis_and_is_not_measured():
    """The nightly Vllm sweep's axis is append-only: when a release ships, the one that was the
    newest keeps its value (asv's history of its points) but is no longer measured."""
    from specsample import tiers

    vllm = next(s for s in sweeps("nightly") if s.name == "Vllm")
    axis = dict(vllm.axes)["subject"]
    assert tiers.NEWEST_RELEASE in vllm.subjects and tiers.REPLICATED_RELEASE in vllm.subjects
    assert "vllm==0.33.0" in axis and (tiers.NEWEST_RELEASE == "vllm==0.33.0") != ("vllm==0.33.0" in vllm.retired)
    assert set(vllm.retired) == {s for s in axis if s.startswith("vllm==")} - {
        tiers.NEWEST_RELEASE,
        tiers.REPLICATED_RELEASE,
    }
    units = common._units(vllm, ("subject",))
    measured = {s for u in units for s in u.subjects}
    assert measured == set(vllm.subjects) and not measured & set(vllm.retired)


def _claim_every_point(scratch: Path) -> None:
    """What a stopped run's asv leaves besides the measurement: every point claimed as replayed."""
    claims = scratch / f"{SWEEP.class_name}.replayed"
    claims.mkdir(parents=True, exist_ok=True)
    for p in SWEEP.points():
        params = tuple(p[k] for k in SWEEP.axis_names)
        (claims / hashlib.sha256(repr(params).encode()).hexdigest()[:24]).touch()


def test_a_stopped_run_resumes_from_the_sweeps_it_measured(tmp_path, monkeypatch):
    """A run cut off before asv saved leaves its finished sweep's measurement (and the replay
    claims of its asv) in the run's scratch directory. ``run_tier(resume=True)`` replays that
    measurement -- no GPU here, so a sweep measured anew would skip every point -- and promotes
    exactly its samples, and the results are promoted, the scratch directory removed."""
    from asv.results import Results

    from specsample.runs.asv import git, run_scratch, run_tier

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    commit = git(REPO, "rev-parse", "HEAD")
    scratch = run_scratch(commit, "ci", REPO)
    assert scratch.parent == tmp_path and commit[:8] in scratch.name
    stored = fake_measurement(SWEEP, seed=3)
    scratch.mkdir()
    (scratch / f"{SWEEP.class_name}.pkl").write_bytes(pickle.dumps(stored))
    _claim_every_point(scratch)
    (scratch / "progress.log").write_text("a line of the stopped run\n")
    lines: list[str] = []
    results = tmp_path / "results"
    written = run_tier(
        "nightly",
        repo=REPO,
        results_dir=results,
        machine="ci",
        commit=commit,
        bench=f"^{re.escape(LATENCY)}",
        resume=True,
        log=lines.append,
    )
    assert any("resuming: 1 sweep(s)" in line and SWEEP.class_name in line for line in lines), lines
    assert not any("stopped run" in line for line in lines if line.startswith("  "))  # its progress log dropped
    (result_file,) = [p for p in written if p.suffix == ".json" and p.name.startswith(commit[:8])]
    saved = Results.load(str(result_file))
    params = saved.get_result_params(LATENCY)
    samples = saved.get_result_samples(LATENCY, params)
    for i, p in enumerate(SWEEP.points()):
        key = tuple(p[k] for k in SWEEP.axis_names)
        if key in stored["points"]:
            assert samples[i] == stored["points"][key]["samples"], p
    assert not scratch.exists()


def test_a_run_without_resume_starts_from_an_empty_scratch(tmp_path, monkeypatch):
    """Without ``resume`` a stopped run's measurement is dropped before asv starts (it is
    measured again); with it, only what that run's asv used (claims, progress, locks) goes."""
    from specsample.runs import asv as runs

    scratch = tmp_path / "specsample-run-x"
    scratch.mkdir()
    (scratch / f"{SWEEP.class_name}.pkl").write_bytes(b"measured")
    (scratch / f"{SWEEP.class_name}.outcomes.json").write_text("{}")
    (scratch / f"{SWEEP.class_name}.pkl.lock").touch()
    _claim_every_point(scratch)
    lines: list[str] = []
    runs._prepare_scratch(scratch, True, lines.append)
    assert sorted(p.name for p in scratch.iterdir()) == sorted(
        [f"{SWEEP.class_name}.pkl", f"{SWEEP.class_name}.outcomes.json"]
    )
    runs._prepare_scratch(scratch, False, lines.append)
    assert scratch.is_dir() and not list(scratch.iterdir())
    runs._prepare_scratch(tmp_path / "none", True, lines.append)
    assert "no stopped run" in lines[-1]


def test_the_scratch_directory_follows_the_code_not_the_results(tmp_path):
    """A changed or new file of the package gives another scratch directory (a resumed run must
    run the same code); new results do not (a run adds them)."""
    from gitrepo import make_repo

    from specsample.runs.asv import run_scratch

    repo = make_repo(tmp_path / "repo")
    commit = "0" * 40
    clean = run_scratch(commit, "h100", repo)
    assert run_scratch(commit, "h200", repo) != clean
    (repo / "results" / "h100").mkdir(parents=True)
    (repo / "results" / "h100" / "x.json").write_text("{}")
    assert run_scratch(commit, "h100", repo) == clean
    module = repo / "specsample" / "schema.py"
    module.write_text(module.read_text() + "\n# changed\n")
    changed = run_scratch(commit, "h100", repo)
    assert changed != clean
    (repo / "specsample" / "new_module.py").write_text("X = 1\n")
    assert run_scratch(commit, "h100", repo) not in (clean, changed)


def test_a_second_run_of_the_same_commit_machine_and_code_is_refused(tmp_path, monkeypatch):
    """Two runs that would share one scratch directory (other results directories): the second
    is refused while the first holds it, and writes nothing."""
    from specsample.runs.asv import RunError, _exclusive, git, run_scratch, run_tier

    monkeypatch.setenv("TMPDIR", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", None)
    commit = git(REPO, "rev-parse", "HEAD")
    scratch = run_scratch(commit, "ci", REPO)
    with _exclusive(scratch.with_name(scratch.name + ".lock")):
        with pytest.raises(RunError, match="another specsample run"):
            run_tier(
                "smoke",
                repo=REPO,
                results_dir=tmp_path / "results",
                machine="ci",
                commit=commit,
                interpret=True,
                log=lambda _: None,
            )
    assert not (tmp_path / "results").exists() or not list((tmp_path / "results").rglob("*.json"))
