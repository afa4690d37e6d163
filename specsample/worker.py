"""Measurements in a child process, so that a subject that faults or hangs costs only its own points.

An illegal memory access poisons the CUDA context of the whole process: every later launch
fails, whoever's it is. So every measurement specsample makes (the asv sweeps, ``compare``,
sign-off) runs here: :func:`run_units` starts ``python -m specsample.worker`` on a list of
:class:`Unit` (one point, the subjects to time there interleaved), and reads its progress
line by line. The worker says which subject it is about to run before each step
(:data:`specsample.measure.OnPhase`), so when it dies, or stops making progress for
``JobOptions.stall_s``, the parent knows whose code was running:

- that subject's point is recorded as ``crashed`` with the reason (the CUDA error, the signal, or
  the stall);
- a fresh worker goes on with the other subjects of that point and the points after it. A crash
  costs the set-up (load, first call, check) of every subject run before it in that worker, so
  the fresh worker runs first, at every point, the subjects that crashed in this job (the most
  recent first: a release that faults on a workload faults on its neighbours), and at the crashed
  point the subjects not yet run there before those already set up once;
- a subject that crashed ``JobOptions.max_crashes`` times in one verification mode and draft
  kind is not run again there in this job (its remaining points there are recorded as crashed,
  saying so; its other modes and draft kinds go on: a release that faults with draft logits may
  run with one-hot drafts); nothing already measured is lost.

Records are plain dicts (JSON): ``status`` ``ok`` (``samples``, ``median``, ``method``, ``l2``,
``calls_per_sample``, ``input_copies``, ``capture_error``, ``bytes``, ``semantics``,
``semantics_detail``; stage units: ``stages``, ``{stage: {"median", "samples"}}``), or
``skipped`` / ``failed`` / ``crashed`` with a ``reason``.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

PROTOCOL = "@@specsample-worker "
CRASH_EXIT = 3


@dataclass(frozen=True)
class Unit:
    """One point (canonical axes, no ``subject``) and the subjects timed there, interleaved."""

    key: str
    point: dict
    subjects: tuple[str, ...]
    kind: str = "sampler"  # "sampler" | "stages"
    # What each subject's record is called, when not its name: sign-off's "base" and "head",
    # which may be one subject (an A/A run times it twice, on separate buffers and graphs).
    labels: tuple[str, ...] | None = None

    @property
    def names(self) -> tuple[str, ...]:
        return self.labels or self.subjects


@dataclass(frozen=True)
class JobOptions:
    l2: str = "cold"
    calls_per_sample: int = 10
    num_samples: int = 20
    device: str = "cuda"
    check: bool = True  # classify each subject's output once per point (specsample.semantics)
    host: bool = False  # host wall-clock timer (CPU smoke runs under the interpreter)
    stall_s: float = 600.0  # no progress for this long: the running subject is hung
    max_crashes: int = 2
    gpus: tuple[str, ...] | None = None  # several: one worker per GPU over a deterministic shard
    # GPU state per sample (specsample.gpustate): read NVML around each replay, leave throttled
    # samples out; lock the SM clock where the box allows it.
    gpu_state: bool = True
    lock_clocks: bool = False
    # Samples by noise target (specsample.noise): None takes num_samples; a relative half-width
    # of the median's CI samples until it is reached (num_samples at least) or time_cap_s.
    noise_target: float | None = None
    time_cap_s: float = 5.0


@dataclass
class Outcome:
    """What :func:`run_units` measured: ``records[unit key][subject]``, each subject's
    provenance, and the crashes (unit key, subject, reason) in the order they happened."""

    records: dict[str, dict[str, dict]] = field(default_factory=dict)
    provenance: dict[str, dict] = field(default_factory=dict)
    crashes: list[tuple[str, str, str]] = field(default_factory=list)
    gpu: dict = field(default_factory=dict)  # the GPU state monitor of the last worker (gpustate)
    workers: int = 0
    seconds: float = 0.0
    done: int = 0  # units finished by a worker (for progress lines)
    started: float = field(default_factory=time.monotonic)  # for the elapsed time in progress lines


# ---------------------------------------------------------------------------------------------
# Parent side
# ---------------------------------------------------------------------------------------------


def run_units(
    units: Sequence[Unit],
    options: JobOptions = JobOptions(),
    *,
    log: Callable[[str], None] | None = None,
    python: str = sys.executable,
) -> Outcome:
    """Measure ``units`` in worker processes (see the module docstring).

    With ``options.gpus`` (several GPU indices), one worker at a time runs per GPU, pinned with
    ``CUDA_VISIBLE_DEVICES``, over a deterministic shard of the units (:func:`shard_of`: a
    point always lands on the same GPU index, so its history is measured on one physical GPU).
    A GPU whose workers die before measuring anything (a lost GPU, a driver fault) hands its
    unfinished units once to the next GPU; after that they are reported as failed.
    """
    log = log or _default_log
    outcome = Outcome(records={u.key: {} for u in units})
    start = outcome.started
    gpus = tuple(options.gpus or ())
    if len(gpus) <= 1:
        _run_shard(list(units), options, outcome, {}, python, log, len(units), gpus[0] if gpus else None)
    else:
        _run_sharded(units, options, outcome, python, log, gpus)
    outcome.seconds = time.monotonic() - start
    return outcome


def shard_of(unit: Unit, gpus: Sequence[str]) -> str:
    """The GPU a unit runs on: a hash of its point and subjects, so the same point always lands
    on the same GPU index whatever else the run holds."""
    digest = hashlib.sha256(json.dumps([unit.point, list(unit.subjects)], sort_keys=True, default=str).encode())
    return gpus[int.from_bytes(digest.digest()[:8], "big") % len(gpus)]


def _run_sharded(units, options, outcome, python, log, gpus) -> None:
    shards: dict[str, list[Unit]] = {g: [] for g in gpus}
    for u in units:
        shards[shard_of(u, gpus)].append(u)
    crash_count: dict[str, int] = {}
    lock = threading.Lock()
    lost: dict[str, list[Unit]] = {}

    def run(gpu: str, shard: list[Unit]) -> None:
        left = _run_shard(shard, options, outcome, crash_count, python, log, len(units), gpu, lock)
        if left:
            lost[gpu] = left

    threads = [threading.Thread(target=run, args=(g, shard)) for g, shard in shards.items() if shard]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for gpu, left in lost.items():  # one retry on the next GPU, then failed
        other = gpus[(gpus.index(gpu) + 1) % len(gpus)]
        log(f"[gpu {gpu}] lost; {len(left)} unfinished points retried on gpu {other}")
        again = _run_shard(left, options, outcome, crash_count, python, log, len(units), other, lock)
        for u in again:
            for name in u.names:
                outcome.records[u.key].setdefault(
                    name, {"status": "failed", "reason": f"gpu {gpu} and gpu {other} lost"}
                )


def _run_shard(pending, options, outcome, crash_count, python, log, total, gpu=None, lock=None) -> list[Unit]:
    """Workers over ``pending`` until every unit is recorded; returns the units left when
    workers keep dying before measuring anything (the GPU itself is lost), else []."""
    lock = lock or contextlib.nullcontext()
    prefix = f"[gpu {gpu}] " if gpu is not None and options.gpus and len(options.gpus) > 1 else ""
    say = (lambda line: log(prefix + line)) if prefix else log
    barren = 0
    while pending:
        with lock:
            pending = [_without_banned(u, outcome, crash_count, options) for u in pending]
        pending = [u for u in pending if u.subjects]
        if not pending:
            break
        with lock:
            outcome.workers += 1
        done_keys, crash, started = _run_worker(pending, options, outcome, python, say, total, gpu, lock)
        pending = [u for u in pending if u.key not in done_keys]
        if crash is None:
            if not pending:
                break
            crash = (pending[0].key, None, "the worker exited before finishing")
        barren = 0 if done_keys or crash[1] is not None else barren + 1
        if barren >= 2 and gpu is not None and options.gpus and len(options.gpus) > 1:
            return pending  # two workers in a row died before any unit or phase: the GPU is gone
        key, name, reason = crash
        unit = next(u for u in pending if u.key == key)
        with lock:
            if name is not None and name not in unit.names:
                # The crash was in code run for every subject (mrv2's reference output): none of
                # them could be judged at this point.
                for n in unit.names:
                    outcome.records[key].setdefault(n, {"status": "failed", "reason": f"{name} crashed: {reason}"})
                say(f"specsample worker: {name} crashed at {_label(unit.point)}: {reason}")
                pending = [u for u in pending if u.key != key]
                continue
            name = name or unit.names[0]
            subject = unit.subjects[unit.names.index(name)]
            outcome.records[key][name] = {"status": "crashed", "reason": reason}
            outcome.crashes.append((key, subject, reason))
            where = _crash_scope(subject, unit.point)
            crash_count[where] = crash_count.get(where, 0) + 1
        say(f"specsample worker: {name} ({subject}) crashed at {_label(unit.point)}: {reason}")
        pending = [_replace_subjects(u, [n for n in u.names if n != name]) if u.key == key else u for u in pending]
        with lock:
            latest = {s: i for i, (_, s, _) in enumerate(outcome.crashes)}
        pending = [_crashed_first(u, latest, started if u.key == key else ()) for u in pending]
    return []


def _default_log(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _replace_subjects(unit: Unit, keep: list[str]) -> Unit:
    """``unit`` with only the subjects whose records are called ``keep``."""
    pairs = [(s, n) for s, n in zip(unit.subjects, unit.names) if n in keep]
    labels = tuple(n for _, n in pairs) if unit.labels else None
    return Unit(unit.key, unit.point, tuple(s for s, _ in pairs), unit.kind, labels)


def _crashed_first(unit: Unit, latest: dict[str, int], started: Sequence[str] = ()) -> Unit:
    """``unit`` with the subjects that crashed in this job first, the most recent crash first
    (``latest``: subject -> index of its last crash), then those not in ``started`` (the records
    that began a step at this point in the worker that just died), then the rest; otherwise in
    its own order."""

    def rank(pair: tuple[int, tuple[str, str]]) -> tuple[int, int, int]:
        i, (subject, name) = pair
        if subject in latest:
            return (0, -latest[subject], i)
        return (2 if name in started else 1, 0, i)

    pairs = [pair for _, pair in sorted(enumerate(zip(unit.subjects, unit.names)), key=rank)]
    labels = tuple(n for _, n in pairs) if unit.labels else None
    return Unit(unit.key, unit.point, tuple(s for s, _ in pairs), unit.kind, labels)


def _crash_scope(subject: str, point: dict) -> tuple:
    """What a crash counts against: the subject in one verification mode and draft kind."""
    return (subject, point.get("mode"), point.get("draft"))


def _without_banned(unit: Unit, outcome: Outcome, crash_count: dict[str, int], options: JobOptions) -> Unit:
    keep = []
    for subject, name in zip(unit.subjects, unit.names):
        if name in outcome.records[unit.key]:
            continue  # already recorded (crashed here earlier)
        count = crash_count.get(_crash_scope(subject, unit.point), 0)
        if count >= options.max_crashes:
            last = next(reason for _, subj, reason in reversed(outcome.crashes) if subj == subject)
            where = (
                unit.point.get("mode") + " mode" + (f", {unit.point['draft']} drafts" if "draft" in unit.point else "")
            )
            outcome.records[unit.key][name] = {
                "status": "crashed",
                "reason": f"not run: crashed {count} times in {where} earlier in this run (last: {last})",
            }
            continue
        keep.append(name)
    return _replace_subjects(unit, keep)


def _run_worker(units, options, outcome, python, log, total, gpu=None, lock=None):
    """One worker over ``units`` (pinned to ``gpu`` when given); returns (keys finished, crash
    or None, the records that began a step at the crashed point, in order)."""
    lock = lock or contextlib.nullcontext()
    with tempfile.TemporaryDirectory(prefix="specsample-worker-") as tmp:
        job = Path(tmp) / "job.json"
        job.write_text(json.dumps({"options": asdict(options), "units": [asdict(u) for u in units]}))
        env = dict(os.environ)
        root = str(Path(__file__).resolve().parents[1])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        if options.device == "cpu":
            env["TRITON_INTERPRET"] = "1"
        if gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(gpu)
        proc = subprocess.Popen(
            [python, "-m", "specsample.worker", str(job)],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=env,
            start_new_session=True,
        )
        events: queue.Queue = queue.Queue()
        stderr_tail: list[str] = []
        readers = [
            threading.Thread(target=_read_events, args=(proc.stdout, events), daemon=True),
            threading.Thread(target=_read_stderr, args=(proc.stderr, stderr_tail), daemon=True),
        ]
        for t in readers:
            t.start()
        done: set[str] = set()
        current_key, current_subject = None, None
        started: dict[str, list[str]] = {}  # unit key -> the records that began a step there
        crash = None
        while True:
            try:
                event = events.get(timeout=options.stall_s)
            except queue.Empty:
                _kill(proc)
                crash = (current_key or units[0].key, current_subject, f"hung: no progress for {options.stall_s:.0f} s")
                break
            if event is None:  # stdout closed: the worker ended
                break
            kind = event.get("event")
            if kind == "phase":
                current_key, current_subject = event["key"], event["subject"]
                names = started.setdefault(current_key, [])
                if current_subject not in names:
                    names.append(current_subject)
            elif kind == "gpu":
                with lock:
                    outcome.gpu = event["gpu"]
                if event["gpu"].get("why"):
                    log(f"specsample worker: {event['gpu']['why']}")
            elif kind == "provenance":
                with lock:
                    outcome.provenance[event["subject"]] = event["provenance"]
            elif kind == "done":
                if gpu is not None:
                    for record in event["records"].values():
                        record["gpu"] = str(gpu)  # the GPU index the point was measured on
                with lock:
                    outcome.records[event["key"]].update(event["records"])
                    outcome.done += 1
                    finished = outcome.done
                done.add(event["key"])
                unit = next(u for u in units if u.key == event["key"])
                elapsed = time.monotonic() - outcome.started
                log(
                    f"[{finished}/{total}] {_label(unit.point)}  {_summary(event['records'])}  "
                    f"({_elapsed(elapsed, finished, total)})"
                )
                current_key, current_subject = None, None
            elif kind == "crash":
                crash = (event["key"], event.get("subject"), event["reason"])
        code = proc.wait()
        for t in readers:
            t.join(timeout=5)
        if crash is None and code != 0 and len(done) < len(units):
            why = _exit_reason(code)
            tail = next((line for line in reversed(stderr_tail) if line.strip()), "")
            crash = (
                current_key or next(u.key for u in units if u.key not in done),
                current_subject,
                f"{why}: {tail}" if tail else why,
            )
        return done, crash, started.get(crash[0], []) if crash else []


def _read_events(stream, events: queue.Queue) -> None:
    for line in stream:
        if line.startswith(PROTOCOL):
            try:
                events.put(json.loads(line[len(PROTOCOL) :]))
            except ValueError:
                continue
        else:
            sys.stderr.write(line)
    events.put(None)


def _read_stderr(stream, tail: list[str], keep: int = 40) -> None:
    for line in stream:
        sys.stderr.write(line)
        tail.append(line.rstrip())
        del tail[:-keep]


def _kill(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        proc.kill()


def _exit_reason(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


def _elapsed(seconds: float, finished: int, total: int) -> str:
    """The time a job has run, and what is left at its pace so far (crashed points are slower)."""
    if finished >= total:
        return f"{seconds:.0f} s"
    return f"{seconds:.0f} s, about {seconds / finished * (total - finished):.0f} s left"


def _label(point: dict) -> str:
    from .schema import PATH_DEFAULTS, SYMBOLS

    return " ".join(
        f"{SYMBOLS.get(k, '')}={v}"
        if k in SYMBOLS and k != "placeholder_pattern"
        else (f"{k}={v}" if k in PATH_DEFAULTS else str(v))
        for k, v in point.items()
        if k not in PATH_DEFAULTS or v != PATH_DEFAULTS[k]
    )


def _summary(records: dict[str, dict]) -> str:
    parts = []
    for subject, r in records.items():
        if r["status"] == "ok" and "median" in r:
            sem = f", {r['semantics']}" if r.get("semantics") else ""
            if r.get("deferral_rate") is not None:
                sem += f", deferral {r['deferral_rate']:.2f}"
            parts.append(f"{subject} {r['median'] * 1e6:.1f} us{sem}")
        elif r["status"] == "ok":
            parts.append(f"{subject} ok")
        else:
            parts.append(f"{subject} {r['status']}")
    return "; ".join(parts)


# ---------------------------------------------------------------------------------------------
# Child side
# ---------------------------------------------------------------------------------------------


def _emit(event: dict) -> None:
    sys.stdout.write(PROTOCOL + json.dumps(event, default=str) + "\n")
    sys.stdout.flush()


def _timing_record(t) -> dict:
    state = t.extra.get("gpu_state")
    return {
        "samples": list(t.samples),
        "capped": t.extra.get("capped"),
        "n_throttled": state.get("n_throttled") if state else None,
        "gpu_state": state,
        "median": t.median,
        "method": t.method,
        "l2": t.l2,
        "calls_per_sample": t.calls_per_sample,
        "input_copies": t.input_copies,
        "capture_error": t.extra.get("capture_error"),
    }


def _measure_unit(unit: Unit, options: JobOptions, on_phase, monitor=None) -> dict[str, dict]:
    from . import measure
    from .noise import NoiseTarget
    from .timing import TimingConfig
    from .workloads import workload_of

    w = workload_of(unit.point)
    config = TimingConfig(l2=options.l2, calls_per_sample=options.calls_per_sample, num_samples=options.num_samples)
    if unit.kind == "stages":
        return _measure_stages(unit, w, config, options, on_phase)
    results = measure.measure_point(
        unit.subjects,
        w,
        config,
        device=options.device,
        check=options.check,
        host=options.host,
        on_phase=on_phase,
        labels=unit.labels,
        monitor=monitor,
        # The CPU interpreter's host timer checks the flow only: no noise target there.
        until=NoiseTarget(options.noise_target, options.time_cap_s)
        if options.noise_target and not options.host
        else None,
    )
    records = {}
    for subject, r in results.items():
        if r.status == "ok":
            record = {"status": "ok", **_timing_record(r.timing), "bytes": r.timing.extra["bytes_required"]}
            record.update(semantics=r.semantics, semantics_detail=r.semantics_detail, **r.extra)
        else:
            record = {"status": r.status, "reason": r.reason}
            state = r.extra.get("gpu_state")
            if state:  # every sample throttled: how many were left out, and the GPU's state
                record.update(n_throttled=state.get("n_throttled"), gpu_state=state)
        records[subject] = record
    return records


def _measure_stages(unit, w, config, options, on_phase) -> dict[str, dict]:
    from . import measure, subjects

    records, ready = {}, []
    for name in unit.subjects:
        try:
            subject = subjects.get(name)
            reason = subject.unsupported(w) or (
                None if subject.pipeline else f"{name} is one call (no per-kernel pipeline)"
            )
        except subjects.NotSupported as exc:
            records[name] = {"status": "skipped", "reason": str(exc)}
            continue
        except (subjects.SubjectError, ValueError) as exc:
            records[name] = {"status": "failed", "reason": str(exc)}
            continue
        if reason:
            records[name] = {"status": "skipped", "reason": reason}
        else:
            ready.append(name)
    if ready:
        timings = measure.measure_stages(ready, w, config, device=options.device, on_phase=on_phase)
        for name in ready:
            stages = {
                stage: {"median": t.median, "samples": list(t.samples)}
                for (subject, stage), t in timings.items()
                if subject == name
            }
            records[name] = {"status": "ok", "stages": stages}
    return records


def _provenance_of(name: str) -> dict:
    from . import subjects

    try:
        return dict(subjects.get(name).provenance)
    except Exception as exc:  # noqa: BLE001 - provenance of a subject that fails to load
        return {"error": str(exc)}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    job = json.loads(Path(argv[0]).read_text())
    options = JobOptions(**job["options"])
    units = [
        Unit(u["key"], u["point"], tuple(u["subjects"]), u["kind"], tuple(u["labels"]) if u["labels"] else None)
        for u in job["units"]
    ]

    monitor = _open_monitor(options)
    try:
        return _run_units(units, options, monitor)
    finally:
        if monitor is not None:
            monitor.close()


def _open_monitor(options: JobOptions):
    """The GPU state monitor of this worker (None off the GPU), announced to the parent."""
    if options.device != "cuda" or options.host or not options.gpu_state:
        return None
    from . import gpustate

    monitor = gpustate.open_monitor(gpustate.cuda_pci_bus_id())
    if options.lock_clocks and monitor.available:
        monitor.lock_clocks()
    described = monitor.describe()
    if options.lock_clocks and not described.get("clocks_locked"):
        described["why"] = "--lock-clocks: " + str(monitor.locked.get("why"))
    _emit({"event": "gpu", "gpu": described})
    return monitor


def _run_units(units: list[Unit], options: JobOptions, monitor) -> int:
    from . import measure
    from .timing import describe

    seen: set[str] = set()
    for unit in units:
        state = {"subject": None}

        def on_phase(subject: str, phase: str, unit=unit, state=state) -> None:
            if subject != state["subject"] or phase != "sample":
                _emit({"event": "phase", "key": unit.key, "subject": subject, "phase": phase})
            state["subject"] = subject

        for name in unit.subjects:
            if name not in seen:
                seen.add(name)
                _emit({"event": "provenance", "subject": name, "provenance": _provenance_of(name)})
        try:
            records = _measure_unit(unit, options, on_phase, monitor)
        except Exception as exc:  # noqa: BLE001 - a lost CUDA context, or inputs that cannot be built
            if state["subject"] is None and not measure.context_lost(options.device):
                # Nothing of a subject's ran yet (e.g. the inputs do not fit): every subject failed.
                records = {name: {"status": "failed", "reason": describe(exc)} for name in unit.names}
            else:
                _emit({"event": "crash", "key": unit.key, "subject": state["subject"], "reason": describe(exc)})
                return CRASH_EXIT
        if monitor is not None and monitor.available:
            _emit({"event": "gpu", "gpu": monitor.describe()})
        _emit({"event": "done", "key": unit.key, "records": records})
    return 0


if __name__ == "__main__":
    sys.exit(main())
