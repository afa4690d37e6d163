"""Results safety under faults: two runs at once, a run killed mid-way, asv dying before it
saves, broken result files, a failed promote, a missing or corrupt benchmarks.json.

Everything runs on CPU; the two tests that run asv use the smoke tier under the Triton
interpreter (about 10 s each). Earlier results are copies of ``tests/fixtures/asv_results`` or
of the repository's ``results/`` in ``tmp_path``; nothing here writes into the repository.
"""

from __future__ import annotations

import hashlib
import json
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd
import pytest

from specsample.runs import asv as runs_asv
from specsample.runs.asv import LOCK_NAME, RunError, promote, run_lock, run_tier
from specsample.commands.bench import build_site
from specsample.track.results import load_results

REPO = Path(__file__).resolve().parents[1]
FIXTURE = REPO / "tests" / "fixtures" / "asv_results"
# A machine name of its own, so the staging area of a run here is easy to tell from others'.
MACHINE = "ci-fault-injection"

needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="asv needs git")


def _head() -> str:
    return subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
    ).stdout.strip()


def _digests(root: Path, *, skip: tuple[str, ...] = (LOCK_NAME,)) -> dict[str, str]:
    """Relative path -> sha256 of every file under ``root``."""
    return {
        str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(root.rglob("*"))
        if p.is_file() and p.name not in skip
    }


def _result_files(root: Path) -> list[Path]:
    return sorted(p for p in root.glob("*/*.json") if p.name != "machine.json")


def _env_name() -> str:
    """The name asv gives ``-E existing:<this python>``, hence the result file's suffix."""
    from asv.environment import get_env_name

    return get_env_name("existing", sys.executable, {}, {})


# ---------------------------------------------------------------------------------------------
# 1. Two runs at once
# ---------------------------------------------------------------------------------------------


def _try_lock(results_dir: str, queue) -> None:
    """In a child process: take run_lock and report what happened."""
    try:
        with run_lock(Path(results_dir)):
            queue.put(("locked", os.getpid()))
    except RunError as exc:
        queue.put(("refused", str(exc)))


def _lock_from_another_process(results_dir: Path) -> tuple[str, object, float]:
    ctx = multiprocessing.get_context("fork")  # the child shares the imported modules: fast
    queue = ctx.Queue()
    child = ctx.Process(target=_try_lock, args=(str(results_dir), queue))
    start = time.monotonic()
    child.start()
    outcome = queue.get(timeout=30)
    child.join(timeout=30)
    assert child.exitcode == 0
    return outcome + (time.monotonic() - start,)


def test_second_run_is_refused_at_once_while_the_lock_is_held_and_runs_after_release(tmp_path):
    results = tmp_path / "results"
    lock_file = results / LOCK_NAME
    with run_lock(results):
        assert lock_file.read_text().strip() == str(os.getpid())
        state, message, seconds = _lock_from_another_process(results)
        assert state == "refused"
        assert str(lock_file) in message and f"pid {os.getpid()}" in message
        assert seconds < 10  # refused at once, not after waiting for the holder
        # The refused attempt must not wipe the holder's pid out of the lock file.
        assert lock_file.read_text().strip() == str(os.getpid())
        with pytest.raises(RunError, match="another specsample run"):  # same process, second open
            with run_lock(results):
                pass
    state, child_pid, _ = _lock_from_another_process(results)
    assert state == "locked" and child_pid != os.getpid()
    assert lock_file.read_text().strip() == str(child_pid)


# ---------------------------------------------------------------------------------------------
# 2. A run killed mid-way, and asv dying before it saves
# ---------------------------------------------------------------------------------------------

KILLED_RUN = """
import sys
from pathlib import Path
from specsample.runs.asv import run_lock, run_tier
repo, results, machine, commit = sys.argv[1:5]
with run_lock(Path(results)):
    run_tier("smoke", repo=Path(repo), results_dir=Path(results), machine=machine, commit=commit)
"""


def _seed_same_commit_result(results: Path, commit: str) -> Path:
    """An earlier result of this commit on MACHINE (a real H200 file relabelled), so that the
    runs below have something of the same commit to merge into and to lose."""
    source = next(REPO.glob("results/h200/*-*.json"))
    data = json.loads(source.read_text())
    env = _env_name()
    data.update(
        commit_hash=commit,
        env_name=env,
        python=sys.executable,
        params={**data["params"], "machine": MACHINE, "python": sys.executable},
    )
    path = results / MACHINE / f"{commit[:8]}-{env}.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(data))
    return path


def _wait_for(pattern: str, root: Path, proc: subprocess.Popen, timeout: float = 90) -> Path:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = sorted(root.glob(pattern))
        if found:
            return found[0]
        if proc.poll() is not None:
            pytest.fail(f"the run ended (exit {proc.returncode}) before {pattern} appeared")
        time.sleep(0.05)
    pytest.fail(f"{pattern} did not appear within {timeout} s")


@needs_git
@pytest.mark.skipif(not hasattr(os, "killpg"), reason="needs process groups")
def test_run_killed_while_asv_runs_leaves_earlier_results_intact_and_next_run_merges(tmp_path):
    commit = _head()
    results = tmp_path / "results"
    shutil.copytree(REPO / "results", results)
    seeded = _seed_same_commit_result(results, commit)
    seeded_entries = json.loads(seeded.read_text())["results"]
    before = _digests(results)
    frame_before, problems_before = load_results(results)

    # Short private TMPDIR: the run's staging area is found there (and is left behind by the kill).
    scratch = Path(tempfile.mkdtemp(prefix="sfi-"))
    try:
        path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
        env = dict(os.environ, TMPDIR=str(scratch), PYTHONPATH=path, TRITON_INTERPRET="1")
        log = (tmp_path / "killed-run.log").open("w")
        proc = subprocess.Popen(
            [sys.executable, "-c", KILLED_RUN, str(REPO), str(results), MACHINE, commit],
            env=env,
            cwd=tmp_path,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            # asv writes benchmarks.json into staging once discovery is done: it is now running
            # the benchmarks, with the seeded copy of our earlier result beside it.
            _wait_for("specsample-asv-*/results/benchmarks.json", scratch, proc)
            time.sleep(0.2)
            assert proc.poll() is None, "the run finished before it could be killed"
            os.killpg(proc.pid, signal.SIGKILL)  # the run, asv and its benchmark processes
        finally:
            proc.wait(timeout=30)
            log.close()
        assert proc.returncode == -signal.SIGKILL
        left_behind = list(scratch.glob("specsample-asv-*"))
        assert left_behind, "expected the killed run's staging area to be left in TMPDIR"
    finally:
        shutil.rmtree(scratch, ignore_errors=True)

    # Nothing in results/ changed: no file rewritten, added, truncated or removed.
    assert _digests(results) == before
    assert not list(results.rglob("*.tmp"))
    frame_after, problems_after = load_results(results)
    pd.testing.assert_frame_equal(frame_after, frame_before)
    assert problems_after == problems_before
    # The kernel dropped the killed run's lock with its process.
    with run_lock(results):
        pass

    # A normal run afterwards succeeds and merges into the same commit's file.
    with run_lock(results):
        written = run_tier("smoke", repo=REPO, results_dir=results, machine=MACHINE, commit=commit, log=lambda _: None)
    assert seeded in written
    after = _digests(results)
    for name, digest in before.items():
        if name.startswith("h200/"):  # other commits' results: untouched
            assert after[name] == digest, name
    merged = json.loads(seeded.read_text())["results"]
    for name, stored in seeded_entries.items():
        assert merged[name] == stored, f"{name} changed in the merge"
    new = set(merged) - set(seeded_entries)
    assert new and all(".Smoke" in name for name in new)
    frame, _ = load_results(results)
    smoke = frame[(frame["machine"] == MACHINE) & (frame["commit"] == commit) & (frame["tier"] == "smoke")]
    assert len(smoke) >= 1 and (smoke["status"] == "ok").all()
    assert not list(results.rglob("*.tmp"))


FAKE_PYTHON = "#!/bin/sh\necho 'asv: crashed before saving anything' >&2\nexit 1\n"


def test_run_where_asv_dies_before_saving_raises_and_changes_nothing(tmp_path):
    """With an earlier result of the same commit seeded into staging, asv that writes nothing
    must not be reported as a successful run (nor re-stamp that commit's GPU info)."""
    commit = _head()
    results = tmp_path / "results"
    seeded = _seed_same_commit_result(results, commit)
    (results / MACHINE / f"{commit[:8]}.gpuinfo").write_text('{"gpu": "the GPU it was measured on"}\n')
    before = _digests(results)
    fake = tmp_path / "python"
    fake.write_text(FAKE_PYTHON)
    fake.chmod(0o755)
    with pytest.raises(RunError, match=f"asv wrote no results for {commit[:8]}"):
        run_tier(
            "smoke",
            repo=REPO,
            results_dir=results,
            machine=MACHINE,
            commit=commit,
            python=str(fake),
            log=lambda _: None,
        )
    assert _digests(results) == before
    assert seeded.exists()


# ---------------------------------------------------------------------------------------------
# 3. Truncated, garbage, newer-asv and wrong-shape result files
# ---------------------------------------------------------------------------------------------


def _break_results(root: Path) -> tuple[dict[str, str], list[Path]]:
    """Damage a copy of the fixture; return {file name: what was done} and the intact files."""
    files = _result_files(root)
    assert len(files) == 5
    truncated, garbage, newer, kept_a, kept_b = files
    truncated.write_bytes(truncated.read_bytes()[: truncated.stat().st_size // 2])
    garbage.write_bytes(b"\x89PNG\r\n\x1a\n\x00\xff\xfe not json at all {{{")
    data = json.loads(newer.read_text())
    data["version"] = 3  # written by a newer asv
    newer.write_text(json.dumps(data))
    # Valid JSON of the wrong shape, and a zero-byte file (a write cut off before any byte).
    shape = json.loads(kept_a.read_text())
    shape["results"] = list(shape["results"].items())
    wrong_shape = kept_a.with_name("0badf00d" + kept_a.name[8:])
    wrong_shape.write_text(json.dumps(shape))
    empty = kept_a.with_name("00000000" + kept_a.name[8:])
    empty.write_bytes(b"")
    broken = {
        truncated.name: "truncated",
        garbage.name: "garbage",
        newer.name: "version 3",
        wrong_shape.name: "results is a list",
        empty.name: "empty",
    }
    return broken, [kept_a, kept_b]


def test_broken_result_files_are_reported_by_name_and_good_files_still_load_and_build(tmp_path, capsys):
    broken_dir = tmp_path / "broken"
    shutil.copytree(FIXTURE, broken_dir)
    broken, kept = _break_results(broken_dir)
    # The same results with only the intact files, to compare against.
    clean_dir = tmp_path / "clean"
    shutil.copytree(FIXTURE, clean_dir)
    for path in _result_files(clean_dir):
        if path.name not in {p.name for p in kept}:
            path.unlink()

    frame, problems = load_results(broken_dir)
    by_file = {p.path.name: p.reason for p in problems}
    assert set(by_file) == set(broken), by_file
    assert "unreadable JSON" in by_file[next(n for n, what in broken.items() if what == "truncated")]
    assert "unreadable JSON" in by_file[next(n for n, what in broken.items() if what == "garbage")]
    assert "version 3" in by_file[next(n for n, what in broken.items() if what == "version 3")]
    assert "not an object" in by_file[next(n for n, what in broken.items() if what == "results is a list")]
    expected, clean_problems = load_results(clean_dir)
    assert not clean_problems
    pd.testing.assert_frame_equal(frame, expected)
    assert frame["commit"].nunique() == 2

    index = build_site(broken_dir, tmp_path / "site")
    assert index.exists() and "<img" in index.read_text()
    err = capsys.readouterr().err
    for name in broken:
        assert name in err, f"{name} not reported by the dashboard build"


# ---------------------------------------------------------------------------------------------
# 4. promote
# ---------------------------------------------------------------------------------------------


def _staged(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    """A staging dir with one good and one truncated result; results/ already holding an
    earlier, valid version of both."""
    source = _result_files(FIXTURE)[0]
    good_text = source.read_text()
    staging, results = tmp_path / "staging", tmp_path / "results"
    for root in (staging, results):
        (root / "m").mkdir(parents=True)
    good, bad = staging / "m" / "aaaaaaaa-env.json", staging / "m" / "bbbbbbbb-env.json"
    good.write_text(good_text)
    bad.write_text(good_text[: len(good_text) // 3])  # asv cut off mid-write
    (staging / "benchmarks.json").write_text((FIXTURE / "benchmarks.json").read_text())
    earlier = json.dumps({"earlier": True, "version": 2})
    (results / "m" / good.name).write_text(earlier)
    (results / "m" / bad.name).write_text(earlier)
    return staging, results, good, bad


def test_promote_keeps_invalid_staged_json_out_and_names_it_and_moves_the_rest(tmp_path, capsys, monkeypatch):
    staging, results, good, bad = _staged(tmp_path)
    earlier_bad = (results / "m" / bad.name).read_bytes()
    replaced = []
    real_replace = os.replace

    def watching_replace(src, dst):
        src, dst = Path(src), Path(dst)
        # Every destination changes only by a rename of a complete sibling file.
        assert src.parent == dst.parent and src.name == dst.name + ".tmp"
        assert src.read_bytes() == (staging / dst.relative_to(results)).read_bytes()
        replaced.append(dst)
        real_replace(src, dst)

    monkeypatch.setattr(runs_asv.os, "replace", watching_replace)
    moved = promote(staging, results)

    assert sorted(moved) == sorted([results / "benchmarks.json", results / "m" / good.name]) == sorted(replaced)
    assert (results / "m" / good.name).read_bytes() == good.read_bytes()
    assert (results / "m" / bad.name).read_bytes() == earlier_bad
    err = capsys.readouterr().err
    assert f"m/{bad.name} is not valid JSON" in err and good.name not in err
    assert not list(results.rglob("*.tmp"))


def test_promote_without_index_keeps_the_results_benchmarks_json(tmp_path):
    staging, results, good, _ = _staged(tmp_path)
    (results / "benchmarks.json").write_text('{"version": 2}')
    moved = promote(staging, results, include_index=False)
    assert moved == [results / "m" / good.name]
    assert (results / "benchmarks.json").read_text() == '{"version": 2}'


def test_promote_that_fails_mid_copy_leaves_the_earlier_file_and_no_tmp(tmp_path, monkeypatch):
    staging, results, good, _ = _staged(tmp_path)
    earlier = _digests(results)

    def disk_full(src, dst):
        Path(dst).write_bytes(Path(src).read_bytes()[:100])
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(runs_asv.shutil, "copyfile", disk_full)
    with pytest.raises(OSError, match="No space left"):
        promote(staging, results)
    assert _digests(results) == earlier
    assert not list(results.rglob("*.tmp"))


# ---------------------------------------------------------------------------------------------
# 5. benchmarks.json missing or corrupt
# ---------------------------------------------------------------------------------------------

BENCHMARKS_JSON_FAULTS = {
    "missing": None,
    "empty": b"",
    "truncated": lambda text: text[: len(text) // 2].encode(),
    "garbage": b"\x00\xff\xfe<<not json>>",
    "newer_asv_version": lambda text: json.dumps({**json.loads(text), "version": 3}).encode(),
    "a_json_list": b"[1, 2, 3]",
}


@pytest.mark.parametrize("fault", list(BENCHMARKS_JSON_FAULTS))
def test_loader_survives_a_missing_or_corrupt_benchmarks_json(tmp_path, fault):
    results = tmp_path / "results"
    shutil.copytree(FIXTURE, results)
    index = results / "benchmarks.json"
    damage = BENCHMARKS_JSON_FAULTS[fault]
    if damage is None:
        index.unlink()
    else:
        index.write_bytes(damage(index.read_text()) if callable(damage) else damage)

    frame, problems = load_results(results)

    assert [p.path.name for p in problems] == ["benchmarks.json"]
    # Every result row is still there; parameters fall back to asv's names, param1, param2, ...
    assert len(frame) == len(load_results(FIXTURE)[0])
    assert {"param1", "param2"} <= set(frame.columns)
    assert frame["subject"].isna().all() and frame["unit"].isna().all()


def test_benchmark_entry_with_wrong_shape_in_benchmarks_json_skips_only_its_rows(tmp_path):
    results = tmp_path / "results"
    shutil.copytree(FIXTURE, results)
    index = json.loads((results / "benchmarks.json").read_text())
    name = "bench_sampler.QuickShapeLatency.time_sample"
    index[name]["param_names"] = 7
    (results / "benchmarks.json").write_text(json.dumps(index))
    frame, problems = load_results(results)
    assert problems and all(p.reason.startswith(f"{name}: ") for p in problems)
    assert {p.path.name for p in problems} == {p.name for p in _result_files(FIXTURE)}
    assert name not in set(frame["benchmark"]) and len(frame) > 0


def test_dashboard_builds_without_benchmarks_json(tmp_path, capsys):
    results = tmp_path / "results"
    shutil.copytree(FIXTURE, results)
    (results / "benchmarks.json").unlink()
    index = build_site(results, tmp_path / "site")
    assert index.exists()
    assert "benchmarks.json" in capsys.readouterr().err
