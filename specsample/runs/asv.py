"""Running the asv suite on a GPU box: one tier at one commit, nightly, and backfill.

asv 0.6.6 in an existing environment needs care (``docs/measurement.md``):
results are saved only with ``--set-commit-hash``, ``PYTHONPATH`` is stripped unless
``ASV_PYTHONPATH`` is set, and a commit range is refused. So every run here:

1. writes a throw-away asv config with absolute paths: the benchmarks and package come from
   the checkout being measured (HEAD, or a past commit's worktree), git metadata from the main
   repository, and results go to a *staging* directory;
2. runs ``asv run -E existing:<python> --set-commit-hash SHA --record-samples`` on one tier;
3. checks every staged result file parses and holds at least one measured value (a run whose
   points all failed or were skipped is an error, and nothing of it is promoted), then moves it
   into ``results/`` with ``os.replace`` (atomic), so an interrupted or failed run never
   truncates or loses an earlier result;
4. keeps the run's per-point outcomes (status, semantics, crash reasons) and each subject's
   provenance beside the results as ``<sha8>.outcomes``, and the GPU's description as
   ``<sha8>.gpuinfo``;
5. measures each sweep once into a scratch directory named by the commit, the machine and the
   checkout's code (:func:`run_scratch`), removed once the run's results are promoted. asv saves
   only at its end, so a run stopped before then (a job's time limit, a crash) leaves the sweeps
   it finished there, and ``resume=True`` (``specsample bench --resume``) replays them and
   measures only the rest: on the same box, the same commit and the same code.

A lock file stops two runs at once.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from ..machine import write_gpu_info
from ..tiers import bench_regex
from ..track.results import OUTCOMES_SUFFIX

LOCK_NAME = ".specsample.lock"


class RunError(RuntimeError):
    """An asv run that could not be done or whose output is unusable."""


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True, check=True).stdout.strip()


@contextlib.contextmanager
def run_lock(results_dir: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``results_dir`` or fail at once if another run holds it."""
    results_dir.mkdir(parents=True, exist_ok=True)
    with _exclusive(results_dir / LOCK_NAME):
        yield


@contextlib.contextmanager
def _exclusive(lock: Path) -> Iterator[None]:
    """Hold an exclusive lock on the file ``lock`` (its holder's pid written in it) or fail at
    once with :class:`RunError` if another process holds it."""
    # "a+", not "w": a run that is refused must not truncate the holder's pid out of the file.
    with open(lock, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            fh.seek(0)
            holder = fh.read().strip() or "?"
            raise RunError(f"another specsample run (pid {holder}) holds {lock}") from None
        fh.truncate(0)
        fh.write(f"{os.getpid()}\n")
        fh.flush()
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def ensure_machine(machine: str, config: Path | None = None) -> None:
    """Register the asv machine non-interactively (no terminal on a GPU box).

    ``asv machine`` loads an asv config even though it does not use it; without ``config`` it
    looks for ``asv.conf.json`` in the working directory only, so pass one when running from
    anywhere else.
    """
    cmd = [sys.executable, "-m", "asv", "machine", "--yes", "--machine", machine]
    if config is not None:
        cmd += ["--config", str(config)]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        raise RunError(
            f"asv machine --machine {machine} failed (exit {proc.returncode}): {(proc.stdout + proc.stderr).strip()}"
        )


def write_config(repo: Path, dest: Path, *, benchmark_dir: Path, results_dir: Path, html_dir: Path) -> Path:
    """The repository's ``asv.conf.json`` with absolute paths, written to ``dest``.

    One source of settings (existing environment, forkserver, regression threshold) for every
    run, publish and backfill; only where the suite, the results and the site live changes.
    """
    from asv.util import load_json  # asv's reader accepts the comments in asv.conf.json

    conf = load_json(str(repo / "asv.conf.json"), js_comments=True)
    conf.update(repo=str(repo), benchmark_dir=str(benchmark_dir), results_dir=str(results_dir), html_dir=str(html_dir))
    dest.write_text(json.dumps(conf, indent=2))
    return dest


def publish(repo: Path, results_dir: Path, html_dir: Path) -> None:
    """``asv publish`` of ``results_dir`` into ``html_dir`` (the asv site, regressions.json)."""
    with tempfile.TemporaryDirectory() as tmp:
        conf = write_config(
            repo,
            Path(tmp) / "asv.conf.json",
            benchmark_dir=repo / "benchmarks",
            results_dir=results_dir,
            html_dir=html_dir,
        )
        subprocess.run([sys.executable, "-m", "asv", "publish", "--config", str(conf)], check=True)


def _valid_json(path: Path) -> bool:
    try:
        json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    return True


def promote(staging: Path, results_dir: Path, *, include_index: bool = True) -> list[Path]:
    """Move every staged file that parses into ``results_dir`` atomically; report the rest.

    ``include_index=False`` keeps ``results_dir/benchmarks.json`` (the suite's index) as it is:
    a backfilled old commit must not replace the current suite's description.
    """
    moved = []
    for src in sorted(staging.rglob("*.json")):
        rel = src.relative_to(staging)
        if rel.name == "benchmarks.json" and not include_index:
            continue
        if not _valid_json(src):
            print(f"specsample: staged result {rel} is not valid JSON; kept out of {results_dir}", file=sys.stderr)
            continue
        dst = results_dir / rel
        _atomic_copy(src, dst)
        moved.append(dst)
    return moved


def _atomic_copy(src: Path, dst: Path) -> None:
    """Copy ``src`` over ``dst`` so that ``dst`` is always either the old or the whole new file.

    The copy goes to ``<dst>.tmp`` beside it, is flushed to disk, then renamed over ``dst``; a
    copy that fails part-way (disk full, interrupt) removes its ``.tmp`` and leaves ``dst`` alone.
    """
    dst.parent.mkdir(parents=True, exist_ok=True)
    tmp = dst.with_name(dst.name + ".tmp")
    try:
        shutil.copyfile(src, tmp)
        with open(tmp, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, dst)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def _signature(path: Path) -> tuple[int, bytes]:
    return path.stat().st_mtime_ns, path.read_bytes()


def _measured_values(path: Path) -> int:
    """How many values in one asv result file were measured (not null, not NaN)."""
    data = json.loads(path.read_text())
    columns = data.get("result_columns", [])
    count = 0
    for stored in data.get("results", {}).values():
        values = dict(zip(columns, stored)).get("result")
        for v in values if isinstance(values, list) else [values]:
            if isinstance(v, (int, float)) and v == v:
                count += 1
    return count


def _merge_outcomes(scratch: Path, previous: Path | None, dest: Path) -> Path | None:
    """The run's outcome files (one per measured sweep, in the run's scratch directory) merged
    over ``previous`` (the commit's earlier outcomes), keyed by (tier, sweep, point, subject);
    each sweep's copy bandwidth by (tier, sweep)."""
    found = sorted(scratch.glob("*.outcomes.json"))
    if not found:
        return None
    merged = {"version": 1, "subjects": {}, "points": {}, "sweeps": {}}
    sources = ([previous] if previous and previous.exists() else []) + found
    for path in sources:
        data = json.loads(path.read_text())
        merged["subjects"].update(data.get("subjects", {}))
        points = data.get("points", {})
        for record in points.values() if isinstance(points, dict) else points:
            key = json.dumps([record["tier"], record["sweep"], record["point"], record["subject"]], sort_keys=True)
            merged["points"][key] = record
        for record in data.get("sweeps", []):
            merged["sweeps"][json.dumps([record["tier"], record["sweep"]])] = record
    merged["points"] = list(merged["points"].values())
    merged["sweeps"] = list(merged["sweeps"].values())
    dest.write_text(json.dumps(merged, indent=0, sort_keys=True, default=str) + "\n")
    return dest


class _Tail:
    """Prints what a growing file gets, from a thread, until stopped: the measurement's
    progress, which asv would show only once the benchmark that measures is done."""

    def __init__(self, path: Path, log: Callable[[str], None]) -> None:
        import threading

        self.path, self.log, self.stop = path, log, threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        offset = 0
        while True:
            stopping = self.stop.is_set()
            with contextlib.suppress(OSError):
                with open(self.path) as fh:
                    fh.seek(offset)
                    for line in fh:
                        self.log("  " + line.rstrip())
                    offset = fh.tell()
            if stopping:
                return
            self.stop.wait(1.0)

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=10)


# What a run's scratch directory holds that a resumed run drops: which points asv replayed
# (those results were never saved), the progress log, and lock and half-written files.
_SCRATCH_EPHEMERAL = ("*.replayed", "progress.log", "*.lock", "*.tmp")


def _code_state(checkout: Path) -> str:
    """The checkout's code beyond its commit: ``git diff HEAD`` of the package and the
    benchmarks, and the names and bytes of their untracked files ("" when clean). Results and
    other files do not count: a run adds results, and a resumed run must still match."""
    paths = ("specsample", "benchmarks")
    try:
        diff = git(checkout, "diff", "HEAD", "--", *paths)
        untracked = git(checkout, "ls-files", "--others", "--exclude-standard", "--", *paths).splitlines()
    except (subprocess.CalledProcessError, OSError):
        return "no-git"
    h = hashlib.sha256(diff.encode())
    for name in sorted(untracked):
        h.update(name.encode())
        with contextlib.suppress(OSError):
            h.update((checkout / name).read_bytes())
    return h.hexdigest() if diff or untracked else ""


def run_scratch(commit: str, machine: str, checkout: Path) -> Path:
    """Where a run at ``commit`` on ``machine`` keeps each sweep's one measurement and its
    outcomes (``benchmarks/common.py``), in this box's temp directory: the same path for the same
    commit, machine and code (:func:`_code_state`), so that ``resume`` finds a stopped run's."""
    key = hashlib.sha256(f"{commit}\n{machine}\n{_code_state(checkout)}".encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / f"specsample-run-{commit[:8]}-{machine}-{key}"


def _measured_sweeps(scratch: Path) -> list[str]:
    """The sweeps whose measurement a run left in ``scratch`` (their class names)."""
    return sorted(p.stem for p in scratch.glob("*.pkl"))


def _prepare_scratch(scratch: Path, resume: bool, log: Callable[[str], None]) -> None:
    """A fresh scratch directory, or with ``resume`` the stopped run's measured sweeps kept
    (and what only that run's asv used dropped)."""
    if not resume:
        shutil.rmtree(scratch, ignore_errors=True)
    elif scratch.is_dir():
        for pattern in _SCRATCH_EPHEMERAL:
            for path in scratch.glob(pattern):
                if path.is_dir():
                    shutil.rmtree(path)
                else:
                    path.unlink()
        kept = _measured_sweeps(scratch)
        log(
            f"specsample: resuming: {len(kept)} sweep(s) measured by a run that stopped are replayed, "
            f"not measured again: {', '.join(kept) or 'none'}"
        )
    else:
        log("specsample: --resume: no stopped run of this commit, machine and code on this box; measuring every sweep")
    scratch.mkdir(parents=True, exist_ok=True)


def run_tier(
    tier: str,
    *,
    repo: Path,
    results_dir: Path,
    machine: str,
    checkout: Path | None = None,
    commit: str | None = None,
    bench: str | None = None,
    python: str = sys.executable,
    extra_args: tuple[str, ...] = (),
    interpret: bool = False,
    resume: bool = False,
    log: Callable[[str], None] = print,
) -> list[Path]:
    """Benchmark one tier of ``checkout`` (default: ``repo``) under ``commit``; return new files.

    ``resume``: replay the sweeps that a stopped run of the same commit, machine and code
    measured on this box (:func:`run_scratch`) instead of measuring them again.

    Existing results for the same commit and machine are loaded by asv and merged, so running a
    second slice of a tier adds to the first. Raises :class:`RunError`, leaving ``results_dir``
    as it was, when asv saved no result for ``commit`` (it crashed or was killed first) or saved
    only failed and skipped points. ``interpret`` runs the kernels under Triton's interpreter
    (the smoke tier on a machine without a GPU).
    """
    checkout = checkout or repo
    commit = commit or git(checkout, "rev-parse", "HEAD")
    # The measurements the classes of a sweep share, kept until the results are promoted. A run
    # at the same commit on the same machine with the same code, into other results, would share
    # them: refused while this one holds them, before anything is measured or written.
    scratch = run_scratch(commit, machine, checkout)
    with (
        _exclusive(scratch.with_name(scratch.name + ".lock")),
        tempfile.TemporaryDirectory(prefix="specsample-asv-") as tmp,
    ):
        staging = Path(tmp) / "results"
        # Seed staging with what we have for this commit, so asv merges instead of replacing.
        seeded = {}
        for old in (results_dir / machine).glob(f"{commit[:8]}-*.json"):
            (staging / machine).mkdir(parents=True, exist_ok=True)
            shutil.copyfile(old, staging / machine / old.name)
            seeded[old.name] = _signature(staging / machine / old.name)
        conf = write_config(
            repo,
            Path(tmp) / "asv.conf.json",
            benchmark_dir=checkout / "benchmarks",
            results_dir=staging,
            html_dir=Path(tmp) / "html",
        )
        ensure_machine(machine, conf)  # with the run's config: works from any directory
        # The measured checkout first, then whatever else the caller had on PYTHONPATH (e.g.
        # asv's own wheels on a GPU box without network): asv strips PYTHONPATH itself.
        path = os.pathsep.join(p for p in (str(checkout), os.environ.get("PYTHONPATH", "")) if p)
        run_id = scratch.name.removeprefix("specsample-run-")
        env = dict(os.environ, ASV_PYTHONPATH=path, PYTHONPATH=path, SPECSAMPLE_RUN_ID=run_id)
        if interpret:
            env["TRITON_INTERPRET"] = "1"
        cmd = [
            python,
            "-m",
            "asv",
            "run",
            "--config",
            str(conf),
            "--machine",
            machine,
            "-E",
            f"existing:{python}",
            "--set-commit-hash",
            commit,
            "--record-samples",
            "--bench",
            bench or bench_regex(tier),
            *extra_args,
        ]
        # The GPU's description (seconds of copy-bandwidth timing) is measured before asv, so that
        # a run stopped just after asv has saved does not lose it; it is copied in with the results.
        info = write_gpu_info(Path(tmp) / "gpuinfo", machine, commit, measure_bandwidth=not interpret)
        log(f"specsample: {tier} tier at {commit[:8]} on {machine}: {' '.join(cmd[3:])}")
        start = time.monotonic()
        _prepare_scratch(scratch, resume, log)
        tail = _Tail(scratch / "progress.log", log)
        try:
            proc = subprocess.run(cmd, env=env, cwd=str(checkout))
        except BaseException:
            _resume_hint(scratch, log)
            raise
        finally:
            tail.close()
        log(f"specsample: asv finished in {time.monotonic() - start:.0f} s (exit {proc.returncode})")
        # The seeded copies alone do not count: asv that died before saving leaves them as
        # they were, and promoting them would report a run that measured nothing as a success.
        written = [
            p
            for p in (staging / machine).glob(f"{commit[:8]}-*.json")
            if p.name not in seeded or _signature(p) != seeded[p.name]
        ]
        if not written:
            _resume_hint(scratch, log)
            raise RunError(f"asv wrote no results for {commit[:8]} on {machine} (exit {proc.returncode})")
        if not any(_measured_values(p) for p in written):
            raise RunError(
                f"every point of the {tier} tier at {commit[:8]} failed or was skipped; nothing "
                f"promoted to {results_dir} (see asv's output above)"
            )
        moved = promote(staging, results_dir, include_index=checkout == repo)
        # Written beside the staging area and renamed in, like the result files.
        _atomic_copy(info, results_dir / machine / info.name)
        moved.append(results_dir / machine / info.name)
        outcomes = _merge_outcomes(
            scratch,
            results_dir / machine / f"{commit[:8]}{OUTCOMES_SUFFIX}",
            Path(tmp) / f"{commit[:8]}{OUTCOMES_SUFFIX}",
        )
        if outcomes is not None:
            _atomic_copy(outcomes, results_dir / machine / outcomes.name)
            moved.append(results_dir / machine / outcomes.name)
        shutil.rmtree(scratch, ignore_errors=True)
    return moved


def _resume_hint(scratch: Path, log: Callable[[str], None]) -> None:
    """After a run that saved nothing: which measured sweeps it left for ``--resume``."""
    kept = _measured_sweeps(scratch)
    if kept:
        log(
            f"specsample: the run stopped before asv saved; {len(kept)} measured sweep(s) are kept in "
            f"{scratch} ({', '.join(kept)}): `--resume` (bench or nightly) at this commit on this box "
            "replays them and measures only the rest"
        )


def measured_commits(results_dir: Path, machine: str) -> set[str]:
    """8-character hashes that already have a result file on ``machine``."""
    return {p.name.split("-", 1)[0] for p in (results_dir / machine).glob("*-*.json")}


@contextlib.contextmanager
def worktree(repo: Path, commit: str) -> Iterator[Path]:
    """A detached worktree of ``commit``, removed afterwards."""
    with tempfile.TemporaryDirectory(prefix="specsample-wt-") as tmp:
        wt = Path(tmp) / commit[:8]
        git(repo, "worktree", "add", "--detach", str(wt), commit)
        try:
            yield wt
        finally:
            git(repo, "worktree", "remove", "--force", str(wt))


def backfill(
    revs: list[str],
    *,
    repo: Path,
    results_dir: Path,
    machine: str,
    tier: str = "quick",
    log: Callable[[str], None] = print,
) -> list[str]:
    """Benchmark past commits, each from its own worktree; skip commits already measured."""
    commits = [git(repo, "rev-parse", rev) for rev in revs]
    done = measured_commits(results_dir, machine)
    measured = []
    for i, commit in enumerate(commits, 1):
        if commit[:8] in done:
            log(f"[{i}/{len(commits)}] {commit[:8]} already measured on {machine}: skipped")
            continue
        with worktree(repo, commit) as wt:
            if not (wt / "benchmarks").is_dir():
                log(f"[{i}/{len(commits)}] {commit[:8]} has no benchmarks/: skipped")
                continue
            log(f"[{i}/{len(commits)}] {commit[:8]}: benchmarking the {tier} tier")
            run_tier(tier, repo=repo, results_dir=results_dir, machine=machine, checkout=wt, commit=commit, log=log)
            measured.append(commit)
    return measured
