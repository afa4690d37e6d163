"""Step a of the sign-off's validation (:mod:`.validate`): calibrate the planted delay.

On the validated head's code at the base point (:data:`CALIBRATION_POINT`), in this process,
``mrv2@HEAD`` against ``mrv2@HEAD+extra=n`` (:mod:`specsample.subjects.planted`) for doubling
``n``, interleaved, until the slowdown passes 1.5x the largest target; fit it (least squares,
for the record), pick the iteration counts for each target by interpolating the measured curve
(:func:`choose_iters`), then measure those counts against 0 again and report what they give
(re-picking while a count misses its target by more than 30%, up to ``Options.refine`` times).
"""

from __future__ import annotations

import dataclasses
import gc
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
from scipy import stats as scipy_stats

from ..track.signoff import report
from . import paired
from .plants import Options, ValidationError, log_to_stdout, planted_name
from .resolve import repository_env

# The calibration point: the base point of the issue, where the residual-mass kernel runs.
CALIBRATION_POINT = dict(
    subject="mrv2",
    mode="block",
    draft="logits",
    num_reqs=128,
    num_speculative_steps=4,
    vocab_size=151936,
    placeholder_density=0.0,
    placeholder_pattern="trailing",
)
SMOKE_POINT = dict(CALIBRATION_POINT, num_reqs=2, num_speculative_steps=2, vocab_size=300)


@dataclasses.dataclass
class Calibration:
    point: dict
    base_seconds: float  # median latency without the delay in the first scan step
    scan: list[tuple[int, float]]  # (iterations, measured slowdown), including (0, 0)
    fit: tuple[float, float]  # slowdown ~ intercept + slope * iterations (least squares)
    chosen: dict[float, int]  # target -> iterations
    measured: dict[float, float]  # target -> slowdown measured for the chosen iterations
    seconds: float


def choose_iters(scan: list[tuple[int, float]], targets: tuple[float, ...], max_iters: int) -> dict[float, int]:
    """Iterations expected to give each target slowdown: linear interpolation on the measured
    curve (made non-decreasing), extrapolated from its last rising segment past the largest
    measurement; distinct, increasing with the target, between 1 and ``max_iters``."""
    pts = sorted(dict(scan).items())
    xs = [float(n) for n, _ in pts]
    ys, top = [], -float("inf")
    for _, s in pts:
        top = max(top, s)
        ys.append(top)
    chosen, previous = {}, 0
    for t in sorted(targets):
        if ys[-1] <= 0 or len(xs) < 2:  # no measurable effect (e.g. CPU noise): spread the scan range
            n = xs[-1] * t / max(targets)
        elif t <= ys[-1]:
            i = next(i for i, y in enumerate(ys) if y >= t)
            n = (
                xs[i]
                if i == 0 or ys[i] == ys[i - 1]
                else xs[i - 1] + (t - ys[i - 1]) * (xs[i] - xs[i - 1]) / (ys[i] - ys[i - 1])
            )
        else:
            j = max((i for i in range(1, len(xs)) if ys[i] > ys[i - 1]), default=len(xs) - 1)
            slope = (ys[j] - ys[j - 1]) / (xs[j] - xs[j - 1]) if ys[j] > ys[j - 1] else ys[-1] / xs[-1]
            n = xs[-1] + (t - ys[-1]) / slope
        chosen[t] = previous = min(max(round(n), previous + 1, 1), max_iters)
    return chosen


def linear_fit(scan: list[tuple[int, float]]) -> tuple[float, float]:
    """``(intercept, slope)`` of slowdown against iterations (least squares; 0, 0 for fewer than
    two distinct iteration counts)."""
    if len({n for n, _ in scan}) < 2:
        return 0.0, 0.0
    fit = scipy_stats.linregress([n for n, _ in scan], [s for _, s in scan])
    return float(fit.intercept), float(fit.slope)


def calibrate(repo: Path, sha: str, opts: Options, log: Callable[[str], None] = log_to_stdout) -> Calibration:
    """Step a, on commit ``sha``'s code, in this process."""
    from .. import subjects
    from ..measure import input_copies
    from ..subjects.planted import PLANTED_MODES
    from ..timing import HostSampler, Sampler, TimingConfig, interleave
    from ..workloads import workload_of

    start = time.monotonic()
    point = SMOKE_POINT if opts.smoke else CALIBRATION_POINT
    assert (point["mode"], point["draft"]) in PLANTED_MODES
    w = workload_of(point)
    with repository_env(repo):
        try:
            subjects.get(f"mrv2@{sha}")
        except subjects.SubjectError as exc:
            raise ValidationError(f"{sha[:8]}: mrv2 cannot be loaded: {exc}") from None
    copies = input_copies(w, opts.l2, opts.device)

    def sampler(iters: int):
        with repository_env(repo):
            subject = subjects.get(planted_name("mrv2", sha, iters))
            calls = [subject.prepare(w, opts.device, inputs).call for inputs in copies]
        if opts.host:
            return HostSampler(calls, TimingConfig("warm", 1, opts.samples))
        return Sampler(calls, TimingConfig(opts.l2, max(paired.CALLS_PER_SAMPLE, len(calls)), opts.samples))

    def slowdowns(samplers: dict) -> tuple[dict, float]:
        taken, errors = interleave(samplers, dict.fromkeys(samplers, opts.samples))
        if errors:
            raise RuntimeError(f"calibration failed: {errors}")
        base = float(np.median(taken[0]))
        return {n: float(np.median(s)) / base - 1.0 for n, s in taken.items() if n}, base

    log(f"calibration at {report.point_label(point)}: mrv2 vs mrv2+extra=n, n doubling")
    zero = sampler(0)
    scan, base_seconds, iters = [(0, 0.0)], None, opts.first_iters
    while True:
        step_start = time.monotonic()
        measured, base = slowdowns({0: zero, iters: sampler(iters)})
        base_seconds = base_seconds or base
        scan.append((iters, measured[iters]))
        log(
            f"  extra={iters:<5} {100 * measured[iters]:+6.2f}%  (base {base * 1e6:.1f} us, "
            f"{time.monotonic() - step_start:.1f} s)"
        )
        if measured[iters] >= 1.5 * max(opts.targets) or iters * 2 > opts.scan_max:
            break
        iters *= 2
    gc.collect()
    chosen = choose_iters(scan, opts.targets, opts.max_iters)
    for round_ in range(1 + opts.refine):
        measured, _ = slowdowns({0: zero, **{n: sampler(n) for n in sorted(set(chosen.values()))}})
        gc.collect()
        got = {t: measured[n] for t, n in chosen.items()}
        log(
            "  chosen: "
            + ", ".join(f"{100 * t:g}% -> {n} iterations ({100 * got[t]:+.2f}%)" for t, n in chosen.items())
        )
        if round_ == opts.refine or all(abs(got[t] / t - 1) <= 0.3 for t in chosen):
            break
        scan += [(n, s) for n, s in measured.items() if n not in dict(scan)]
        chosen = choose_iters(scan, opts.targets, opts.max_iters)
    fit = linear_fit(scan)
    log(
        f"  fit: slowdown ~ {100 * fit[0]:+.2f}% + {100 * fit[1]:.3f}% per iteration "
        f"({fit[1] * base_seconds * 1e6:.2f} us per iteration); {time.monotonic() - start:.0f} s"
    )
    del zero
    copies.clear()  # the input tensors (GPU memory) are not needed after this
    gc.collect()
    _release_gpu_memory(opts.device)
    return Calibration(point, base_seconds, scan, fit, chosen, got, time.monotonic() - start)


def _release_gpu_memory(device: str) -> None:
    if device == "cuda":
        import torch

        torch.cuda.empty_cache()
