"""Workload -> inputs -> timed call: the measurement behind the asv suite, the CLI and sign-off.

One point at a time (:func:`measure_point`): the workload is built once per input copy (cold L2
rotates copies, :mod:`specsample.timing`); each subject is resolved (:mod:`specsample.subjects`),
checked once on the first copy (:mod:`specsample.semantics`, against ``mrv2``'s output on the
same inputs), prepared on every copy outside the timed region, and timed on the GPU timeline.
Subjects compared at one point are timed in one process with their samples interleaved
(:func:`specsample.timing.interleave`), so their ratio is not skewed by clock drift.

A point's outcome per subject is a :class:`PointResult`: ``ok`` with its timing and semantics,
``skipped`` with the reason it does not apply, or ``failed`` with the error. A fault that kills
the process is not caught here: :mod:`specsample.worker` runs this module in a child process and
records such a subject as crashed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch

from . import semantics, subjects
from .schema import BASELINE_SUBJECT, STAGES
from .timing import (
    HostSampler,
    Sampler,
    Timing,
    TimingConfig,
    copies_for_cold_l2,
    describe,
    interleave,
    interleave_watched,
)
from .workloads import Workload, bytes_required, make_inputs

# The eager reference syncs with the host per request and step: a few samples of one call
# each are enough to see it is orders of magnitude slower, and keep the sweep short.
EAGER_CONFIG = TimingConfig(calls_per_sample=1, num_samples=5, use_graph=False)

# on_phase(subject, phase): called before each step that runs a subject's code ("check",
# "prepare", "sample"), so a parent process can name the subject whose kernel killed this one.
OnPhase = Callable[[str, str], None]


def _no_phase(subject: str, phase: str) -> None:
    pass


@dataclass
class PointResult:
    """One subject at one point."""

    status: str  # "ok" | "skipped" | "failed"
    timing: Timing | None = None
    reason: str = ""
    semantics: str | None = None  # specsample.schema.SEMANTICS, when checked
    semantics_detail: str = ""
    extra: dict = field(default_factory=dict)


def _input_bytes(inputs: dict) -> int:
    return sum(x.numel() * x.element_size() for x in inputs.values() if isinstance(x, torch.Tensor))


def input_copies(w: Workload, l2: str, device: str = "cuda") -> list[dict]:
    """Independent copies of ``w``'s inputs; enough of them to defeat the L2 when ``l2="cold"``
    (one copy off the GPU, where there is no L2 to defeat)."""
    first = make_inputs(w, device=device)
    copies = [first]
    extra = copies_for_cold_l2(_input_bytes(first), l2) - 1 if torch.device(device).type == "cuda" else 0
    for _ in range(extra):
        copies.append({k: (x.clone() if isinstance(x, torch.Tensor) else x) for k, x in first.items()})
    return copies


def _rotating(config: TimingConfig, copies: int) -> TimingConfig:
    """``config`` with enough calls per sample to rotate through every input copy."""
    return TimingConfig(config.l2, max(config.calls_per_sample, copies), config.num_samples, config.use_graph)


def sampler_for(
    subject: subjects.Subject, w: Workload, copies: list[dict], config: TimingConfig, host: bool = False
) -> Sampler | HostSampler:
    """Prepare ``subject`` on every input copy (outside any timing) and wrap it for sampling.

    A call with host syncs cannot be graph-captured: it is timed eagerly on one input set with
    :data:`EAGER_CONFIG`. ``host=True`` times host wall-clock seconds instead (CPU smoke runs
    under the Triton interpreter, where there is no GPU timeline)."""
    prepared = [subject.prepare(w, device=_device(copies), inputs=inputs) for inputs in copies]
    if host:
        return HostSampler([p.call for p in prepared], config)
    if prepared[0].graph_capturable:
        return Sampler([p.call for p in prepared], _rotating(config, len(copies)))
    return Sampler([prepared[0].call], EAGER_CONFIG)


def _device(copies: list[dict]) -> torch.device:
    return copies[0]["target_logits"].device


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


class _Announced:
    """A sampler that reports each sample's subject first (:data:`OnPhase`)."""

    def __init__(self, name: str, sampler, on_phase: OnPhase) -> None:
        self.name, self.sampler, self.on_phase = name, sampler, on_phase
        self.config = sampler.config

    def sample(self) -> float:
        self.on_phase(self.name, "sample")
        return self.sampler.sample()


def measure_point(
    names: Sequence[str],
    w: Workload,
    config: TimingConfig = TimingConfig(),
    *,
    device: str = "cuda",
    check: bool = True,
    host: bool = False,
    on_phase: OnPhase = _no_phase,
    labels: Sequence[str] | None = None,
    monitor=None,
    until=None,
) -> dict[str, PointResult]:
    """Time each subject on ``w``, interleaved; every outcome is a :class:`PointResult`, keyed by
    ``labels`` (default: the names; sign-off's "base" and "head", which may be one subject).

    ``check`` runs each subject once on the first input copy first and classifies its output
    (:func:`specsample.semantics.classify`, against ``mrv2``'s). Exceptions of one subject
    (a failed launch, an assertion in its code) fail that subject only; a CUDA error that
    poisons the context re-raises, since nothing after it in this process can be trusted.

    ``monitor`` and ``until`` (:func:`specsample.timing.interleave_watched`): the GPU state read
    around each sample (throttled samples left out, the state in ``timing.extra["gpu_state"]``),
    and sampling by noise target (``timing.extra["capped"]`` when it stopped on the time cap).
    """
    labels = list(labels or names)
    results: dict[str, PointResult] = {}
    copies = input_copies(w, config.l2, device)
    dev = _device(copies)
    ready: dict[str, subjects.Subject] = {}
    for label, name in zip(labels, names):
        try:
            subject = subjects.get(name)
        except subjects.NotSupported as exc:  # e.g. vllm@REF with no checkout configured
            results[label] = PointResult("skipped", reason=str(exc))
            continue
        except (subjects.SubjectError, ValueError) as exc:
            results[label] = PointResult("failed", reason=str(exc))
            continue
        reason = subject.unsupported(w)
        if reason:
            results[label] = PointResult("skipped", reason=reason)
        else:
            ready[label] = subject
    reference = _reference_output(w, copies[0], on_phase) if check and ready and _baseline_runs(w) else None
    samplers = {}
    for name, subject in ready.items():
        try:
            verdict, extra = None, {}
            if check:
                on_phase(name, "check")
                out = subject.run(w, dev, copies[0])
                _sync(dev)
                verdict = semantics.classify(copies[0], out, reference)
                paths = semantics.check_paths(w, copies[0], out, lambda inputs, s=subject: s.run(w, dev, inputs))
                if paths.violation and not verdict.semantics.startswith("violates"):
                    verdict = semantics.Verdict("violates path semantics", paths.violation)
                extra = {k: v for k, v in paths.rates.items() if v is not None}
            on_phase(name, "prepare")
            samplers[name] = _Announced(name, sampler_for(subject, w, copies, config, host), on_phase)
            _sync(dev)
        except subjects.NotSupported as exc:
            results[name] = PointResult("skipped", reason=str(exc))
            continue
        except Exception as exc:  # noqa: BLE001 - one subject failing is its result
            _raise_if_poisoned(dev, exc)
            results[name] = PointResult("failed", reason=describe(exc))
            continue
        results[name] = PointResult(
            "ok",
            semantics=verdict.semantics if verdict else None,
            semantics_detail=verdict.detail if verdict else "",
            extra=extra,
        )
    counts = {name: s.sampler.config.num_samples for name, s in samplers.items()}
    # The eager reference's few samples are not held to a noise target.
    watched = until if all(s.sampler.config is not EAGER_CONFIG for s in samplers.values()) else None
    taken = interleave_watched(samplers, counts, monitor=monitor, until=watched)
    errors = taken.errors
    required = bytes_required(w)
    for name, sampler in samplers.items():
        if name in errors:
            _raise_if_poisoned(dev, RuntimeError(errors[name]))
            results[name] = PointResult("failed", reason=errors[name])
            continue
        if not taken.samples[name]:
            state = taken.states[name]
            why = "; ".join(sorted({w for w in state.throttled if w}))
            # what was left out, and the GPU's state then, still go into the results
            results[name] = PointResult(
                "failed",
                reason=f"every sample was taken while the GPU was throttled ({why})",
                extra={"gpu_state": state.summary()},
            )
            continue
        t = sampler.sampler.timing(taken.samples[name])
        t.extra["bytes_required"] = required
        if monitor is not None:
            t.extra["gpu_state"] = (
                taken.states[name].summary() if monitor.available else {"state": "unknown", "n_throttled": 0}
            )
        if watched is not None:
            t.extra["capped"] = taken.capped
        results[name].timing = t
    return {label: results[label] for label in labels}


def _baseline_runs(w: Workload) -> bool:
    """Whether ``mrv2`` runs ``w`` (not where ``w`` turns on a path it does not have)."""
    return subjects.get(BASELINE_SUBJECT).unsupported(w) is None


def _reference_output(w: Workload, inputs: dict, on_phase: OnPhase):
    """``mrv2``'s output on ``inputs``: what "same draws" is judged against."""
    on_phase(BASELINE_SUBJECT, "check")
    return subjects.get(BASELINE_SUBJECT).run(w, inputs["target_logits"].device, inputs)


def context_lost(device: str | torch.device) -> bool:
    """True when the CUDA context no longer works (a sticky error: illegal address, launch
    failure): every later call in this process would fail or lie."""
    if torch.device(device).type != "cuda":
        return False
    try:
        torch.cuda.synchronize()
        torch.empty(1, device=device).fill_(0).item()
    except Exception:  # noqa: BLE001
        return True
    return False


def _raise_if_poisoned(device: torch.device, exc: BaseException) -> None:
    """Re-raise ``exc`` when the CUDA context is lost (:func:`context_lost`)."""
    if context_lost(device):
        raise RuntimeError(f"CUDA context lost: {describe(exc)}")


# ---- per-kernel timing -------------------------------------------------------------------------


def stage_calls(pipes: Sequence) -> dict[str, list]:
    """Each kernel of these pipelines (one per input copy) as calls that can be timed alone.

    Runs every stage but the last once, so each stage finds the intermediates it reads and
    ``num_sampled`` holds tau. Every stage is then idempotent except the last (``insert``, or
    fast's resample, which inserts too: it turns tau into tau + 1): its calls restore
    ``num_sampled`` to tau first, so its timing includes one ``R``-element copy. Returns
    ``{stage name: [one call per pipeline]}`` in pipeline order.
    """
    for p in pipes:
        for _, stage in p.stages()[:-1]:
            stage()
    calls: dict[str, list] = {}
    for p in pipes:
        tau = p.num_sampled.clone()
        stages = p.stages()
        for i, (name, fn) in enumerate(stages):
            calls.setdefault(name, []).append(_restoring(p, tau, fn) if i == len(stages) - 1 else fn)
    return calls


def stage_pipelines(name: str, copies: list[dict]) -> list:
    """One ``name`` pipeline per input copy; ``NotSupported`` for a subject that is one call."""
    subject = subjects.get(name)
    if subject.pipeline is None:
        raise subjects.NotSupported(f"{name} is one call (no per-kernel pipeline to time)")
    return [subject.pipeline(**inputs) for inputs in copies]


def measure_stages(
    names: Sequence[str],
    w: Workload,
    config: TimingConfig = TimingConfig(),
    *,
    device: str = "cuda",
    on_phase: OnPhase = _no_phase,
) -> dict[tuple[str, str], Timing]:
    """Time each kernel of each subject's pipeline on its own (:func:`stage_calls`), the
    subjects of each stage interleaved."""
    copies = input_copies(w, config.l2, device)
    pipelines = {}
    for name in names:
        on_phase(name, "prepare")
        pipelines[name] = stage_calls(stage_pipelines(name, copies))
    _sync(_device(copies))
    cfg = _rotating(config, len(copies))
    out: dict[tuple[str, str], Timing] = {}
    for stage in STAGES:
        ops = {name: calls[stage] for name, calls in pipelines.items() if stage in calls}
        if not ops:
            continue
        samplers = {name: _Announced(name, Sampler(calls, cfg), on_phase) for name, calls in ops.items()}
        taken, errors = interleave(samplers, {name: cfg.num_samples for name in samplers})
        if errors:
            name, error = next(iter(errors.items()))
            raise RuntimeError(f"{name} {stage}: {error}")
        for name, s in samplers.items():
            out[(name, stage)] = s.sampler.timing(taken[name])
    return out


def _restoring(pipeline, tau: torch.Tensor, last_stage):
    def call():
        pipeline.num_sampled.copy_(tau)
        last_stage()

    return call
