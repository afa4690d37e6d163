"""Paired measurement of two checkouts in one process: what ``specsample signoff BASE HEAD`` runs.

Why. On the H200 the clocks are not locked: the same kernel timed in two processes minutes
apart differs by up to ~6%, so base and head measured in separate asv runs cannot resolve a 5%
slowdown. Here both are timed in one process, one CUDA context, point by point, on the *same*
input tensors, with their samples alternated base/head/head/base/... (ABBA: the order flips each
round, so drift that is linear over a round cancels).

How. Each checkout's ``specsample`` package (a git worktree, :func:`load_checkout`) is imported
into this process next to the running one: the ``specsample*`` entries of ``sys.modules`` are
swapped out while it imports and restored afterwards, so the running CLI's ``specsample`` is
untouched, and the loaded modules are kept (their functions keep their own globals, so head's
``variants`` launches head's kernels). The grid, the workloads, the cold-L2 input copies and the
timing are the *running* package's (:func:`specsample.grid.sweeps`,
:func:`specsample.measure.input_copies`, :class:`specsample.timing.Sampler`); only the code under
test comes from the checkouts, through ``Variant.prepare(w, inputs=...)``.

The result is a tidy frame with exactly the columns of :data:`specsample.results.COLUMNS`, one
row per (side, point), named like the asv benchmark of the sweep
(``bench_sampler.QuickDensityLatency.time_sample``), so :func:`specsample.signoff.compare` and
:func:`specsample.signoff.report_markdown` read it unchanged. ``env`` names the side
(:data:`ENVS`): in an A/A run both sides have the same commit.
"""

from __future__ import annotations

import contextlib
import dataclasses
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import math
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType

import numpy as np
import pandas as pd
from scipy import stats

from . import grid, signoff
from .results import COLUMNS, machine_environment, to_frame

PACKAGE = "specsample"
SIDES = ("base", "head")
# The env column names the side; the commit cannot (A/A runs compare a commit with itself).
ENVS = {"base": "paired-base", "head": "paired-head"}
DEFAULT_SAMPLES = 30
# Calls per sample on the GPU: enough to amortise the event pair, as the asv suite times.
CALLS_PER_SAMPLE = 10
BENCH_MODULE = "bench_sampler"
METRIC = "time_sample"

# A sampler factory: (variant, workload, input copies) -> an object with .sample() -> seconds.
MakeSampler = Callable[[object, object, list], object]


class CheckoutError(RuntimeError):
    """A checkout whose ``specsample`` cannot be loaded or lacks the API sign-off needs."""


# ---------------------------------------------------------------------------------------------
# Loading a checkout next to the running package
# ---------------------------------------------------------------------------------------------


def _package_modules() -> dict[str, ModuleType]:
    return {k: v for k, v in sys.modules.items() if k == PACKAGE or k.startswith(PACKAGE + ".")}


class _CheckoutFinder(importlib.abc.MetaPathFinder):
    """Finds ``specsample`` and its submodules in one checkout, ahead of every other finder.

    First on ``sys.meta_path`` while a checkout is active: an editable install's finder would
    otherwise map ``specsample.*`` to the running package. A submodule the checkout lacks is an
    ImportError here, never a silent fall-through to the running package's module.
    """

    def __init__(self, root: Path) -> None:
        self.root = root

    def find_spec(self, fullname, path=None, target=None):
        if fullname == PACKAGE:
            init = self.root / PACKAGE / "__init__.py"
            return importlib.util.spec_from_file_location(
                PACKAGE, init, submodule_search_locations=[str(init.parent)]
            )
        if not fullname.startswith(PACKAGE + "."):
            return None
        parent = sys.modules.get(fullname.rpartition(".")[0])
        spec = importlib.machinery.PathFinder.find_spec(fullname, list(getattr(parent, "__path__", [])))
        if spec is None:
            raise ModuleNotFoundError(f"No module named {fullname!r} in {self.root}", name=fullname)
        return spec


@dataclass
class Checkout:
    """One checkout's ``specsample``, loaded into this process (:func:`load_checkout`)."""

    label: str  # "base" or "head"
    root: Path
    commit: str | None = None
    date: str | None = None  # commit date, ISO 8601
    modules: dict[str, ModuleType] = field(default_factory=dict)

    @property
    def variants(self) -> ModuleType:
        return self.modules[f"{PACKAGE}.variants"]

    @property
    def workloads(self) -> ModuleType:
        return self.modules[f"{PACKAGE}.workloads"]

    def module(self, name: str) -> ModuleType:
        """A loaded submodule by its name under the package, e.g. ``"kernels.planted"``."""
        return self.modules[f"{PACKAGE}.{name}"]

    @contextlib.contextmanager
    def active(self) -> Iterator[None]:
        """``sys.modules`` holds this checkout's ``specsample`` inside, the running one after.

        For imports done at call time (``from ..sampler import x`` in a function): inside, they
        resolve to this checkout; modules first imported inside are kept with the checkout.
        """
        saved = _package_modules()
        for name in saved:
            del sys.modules[name]
        sys.modules.update(self.modules)
        finder = _CheckoutFinder(self.root)
        sys.meta_path.insert(0, finder)
        try:
            yield
        finally:
            sys.meta_path.remove(finder)
            self.modules.update(_package_modules())
            for name in _package_modules():
                del sys.modules[name]
            sys.modules.update(saved)


def load_checkout(root: str | Path, label: str, commit: str | None = None, date: str | None = None) -> Checkout:
    """Import ``root/specsample`` into this process without disturbing the running package.

    Raises
    ------
    CheckoutError
        If the checkout has no ``specsample`` package, it fails to import, or it lacks
        ``specsample.variants`` with ``get(name)`` and ``Variant.prepare(w, inputs=...)`` (a
        commit from before the variants registry cannot be signed off this way).
    """
    root = Path(root).resolve()
    where = f"{label} checkout {root}" + (f" ({commit[:8]})" if commit else "")
    if not (root / PACKAGE / "__init__.py").is_file():
        raise CheckoutError(f"{where}: no {PACKAGE}/ package")
    checkout = Checkout(label, root, commit, date)
    with checkout.active():
        try:
            importlib.import_module(PACKAGE)
            variants = importlib.import_module(f"{PACKAGE}.variants")
            importlib.import_module(f"{PACKAGE}.workloads")
        except ModuleNotFoundError as exc:
            raise CheckoutError(
                f"{where}: {exc}; sign-off needs specsample.variants (the variants registry, "
                f"Variant.prepare(w, inputs=...)) and specsample.workloads"
            ) from exc
        except Exception as exc:
            raise CheckoutError(f"{where}: importing specsample failed: {type(exc).__name__}: {exc}") from exc
    prepare = getattr(getattr(variants, "Variant", None), "prepare", None)
    if not callable(getattr(variants, "get", None)) or prepare is None or "inputs" not in inspect.signature(prepare).parameters:
        raise CheckoutError(
            f"{where}: specsample.variants lacks get(name) / Variant.prepare(w, inputs=...), "
            f"which sign-off uses to hand both sides the same inputs"
        )
    return checkout


# ---------------------------------------------------------------------------------------------
# Samplers and interleaving
# ---------------------------------------------------------------------------------------------


def gpu_sampler(l2: str = "cold", num_samples: int = DEFAULT_SAMPLES) -> MakeSampler:
    """The running package's :func:`specsample.measure.sampler_for`: CUDA graph, GPU timeline."""
    from .measure import sampler_for
    from .timing import TimingConfig

    config = TimingConfig(l2=l2, calls_per_sample=CALLS_PER_SAMPLE, num_samples=num_samples)
    return lambda v, w, copies: sampler_for(v, w, copies, config)


class HostSampler:
    """Host wall-clock seconds per eager call: a CPU stand-in for :class:`specsample.timing.Sampler`.

    For smoke runs under the Triton interpreter, where CUDA events do not exist. The numbers
    say nothing about GPU latency.
    """

    method = "host"

    def __init__(self, calls: list[Callable[[], object]], calls_per_sample: int = 1, warmup: int = 1) -> None:
        self.calls = list(calls)
        self.calls_per_sample = calls_per_sample
        for _ in range(warmup):
            for call in self.calls:
                call()

    def sample(self) -> float:
        start = time.perf_counter()
        for i in range(self.calls_per_sample):
            self.calls[i % len(self.calls)]()
        return (time.perf_counter() - start) / self.calls_per_sample


def host_sampler(v, w, copies: list, warmup: int = 1) -> HostSampler:
    """:data:`MakeSampler` for :class:`HostSampler`."""
    return HostSampler([v.prepare(w, inputs=inputs).call for inputs in copies], warmup=warmup)


def interleave(samplers: Mapping[object, object], counts: Mapping[object, int]) -> tuple[dict, dict]:
    """Take ``counts[k]`` samples of each sampler, alternating, the order reversed each round.

    Two samplers give A B B A A B ...: a drift linear over two rounds adds the same to both.
    A sampler that raises stops (its error is returned) and the others go on.

    Returns ``(samples, errors)``: lists of seconds, and ``"Type: message"`` per failed sampler.
    """
    order = list(samplers)
    samples: dict = {k: [] for k in order}
    errors: dict = {}
    for i in range(max(counts.values(), default=0)):
        for k in order if i % 2 == 0 else order[::-1]:
            if k in errors or len(samples[k]) >= counts[k]:
                continue
            try:
                samples[k].append(float(samplers[k].sample()))
            except Exception as exc:  # noqa: BLE001 - one side failing is a verdict, not a crash
                errors[k] = _describe(exc)
    return samples, errors


def _sample_count(sampler: object, samples: int) -> int:
    """``samples``, or fewer for the eager fallback (host syncs, slow), as measure_variants does."""
    if getattr(sampler, "method", None) == "events":
        return min(samples, sampler.config.num_samples)
    return samples


class _Active:
    """A sampler whose samples run with its checkout active (imports at call time)."""

    def __init__(self, sampler: object, checkout: Checkout) -> None:
        self.sampler, self.checkout = sampler, checkout
        self.method = getattr(sampler, "method", None)
        self.config = getattr(sampler, "config", None)

    def sample(self) -> float:
        with self.checkout.active():
            return self.sampler.sample()


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}".splitlines()[0][:300]


# ---------------------------------------------------------------------------------------------
# The paired measurement
# ---------------------------------------------------------------------------------------------


def points(tier: str, sweeps: Collection[str] | None = None, variants: Collection[str] | None = None) -> list[tuple]:
    """``(sweep, point)`` pairs of the tier's sampler sweeps, optionally only some sweeps and
    variants (sweep names as in :mod:`specsample.grid`, e.g. ``"Density"``, any case)."""
    sampler_sweeps = [s for s in grid.sweeps(tier) if s.kind == "sampler"]
    if sweeps:
        known = {s.name.lower() for s in sampler_sweeps}
        unknown = sorted(n for n in sweeps if n.lower() not in known)
        if unknown:
            raise ValueError(f"sweep: expected some of {sorted(s.name for s in sampler_sweeps)} "
                             f"in tier {tier!r}, got {unknown}")
        wanted = {n.lower() for n in sweeps}
        sampler_sweeps = [s for s in sampler_sweeps if s.name.lower() in wanted]
    out = [(s, p) for s in sampler_sweeps for p in s.points()
           if not variants or p.get("variant") in variants]
    if variants and not out:
        raise ValueError(f"variant: none of {sorted(variants)} is measured by the selected sweeps of {tier!r}")
    return out


def benchmark_name(sweep: grid.Sweep) -> str:
    """The asv benchmark that measures ``sweep``'s latency, e.g. ``bench_sampler.QuickDensityLatency.time_sample``."""
    return f"{BENCH_MODULE}.{sweep.class_name}Latency.{METRIC}"


def measure_paired(
    base: Checkout,
    head: Checkout,
    *,
    tier: str = "quick",
    sweeps: Collection[str] | None = None,
    variants: Collection[str] | None = None,
    samples: int = DEFAULT_SAMPLES,
    machine: str = "unknown",
    device: str = "cuda",
    l2: str = "cold",
    make_sampler: MakeSampler | None = None,
    environment: Mapping[str, object] | None = None,
    log: Callable[[str], None] = print,
) -> pd.DataFrame:
    """Time base and head at every point of the tier, paired and interleaved; a tidy frame.

    Parameters
    ----------
    base, head : Checkout
        From :func:`load_checkout`.
    tier, sweeps, variants
        Which points (:func:`points`).
    samples : int
        Samples per side and point (each sample times :data:`CALLS_PER_SAMPLE` graph-captured
        calls on the GPU).
    machine : str
        The ``machine`` column.
    device, l2
        Where the inputs live and the L2 mode of :func:`specsample.measure.input_copies`.
    make_sampler : callable, optional
        ``(variant, workload, copies) -> sampler``; default :func:`gpu_sampler` (``l2``,
        ``samples``). :func:`host_sampler` for CPU smoke runs.
    environment : mapping, optional
        gpu, driver, cuda, torch, triton for the frame; default
        :func:`specsample.machine.gpu_info` without the bandwidth measurement.
    log : callable
        Progress lines, one per point.

    Returns
    -------
    DataFrame
        :data:`specsample.results.COLUMNS`, one row per side and point: ``status`` "ok" with
        the samples, "skipped" (the side's variant does not support the point), or "failed"
        (an exception; the report lists it and sign-off exits 2). A point whose variant a side
        does not have has no row for that side (verdict "new" or "missing").
    """
    if samples < 1:
        raise ValueError(f"samples: expected >= 1, got {samples}")
    chosen = points(tier, sweeps, variants)
    make_sampler = make_sampler or gpu_sampler(l2, samples)
    env = dict(environment) if environment is not None else _environment()
    sides = {"base": base, "head": head}
    rows: list[dict] = []
    start = time.monotonic()
    for i, (sweep, point) in enumerate(chosen, 1):
        w = grid.workload_of(point)
        ready, outcome = {}, {}
        for label, side in sides.items():
            state, payload = _side_point(side, point["variant"], w)
            if state == "ok":
                ready[label] = payload
            elif state != "absent":
                outcome[label] = (state, payload)
        if ready:
            outcome.update(_measure_point(sides, ready, w, samples, l2, device, make_sampler))
        for label in SIDES:
            if label in outcome:
                rows.append(_row(sides[label], sweep, point, *outcome[label], machine=machine, env=env))
        log(f"[{i}/{len(chosen)}] {point_label(point)}  {_progress(outcome)}")
    log(f"specsample paired: {len(chosen)} points in {time.monotonic() - start:.0f} s")
    return to_frame(rows)


def _measure_point(sides: dict, ready: dict, w, samples: int, l2: str, device: str,
                   make_sampler: MakeSampler) -> dict[str, tuple[str, object]]:
    """One point: input copies once, a sampler per side on those same copies, interleaved
    samples. ``(status, samples or reason)`` per side of ``ready``."""
    from .measure import input_copies

    try:
        copies = input_copies(w, l2, device)
    except Exception as exc:  # noqa: BLE001 - a point that cannot be built fails, the rest go on
        return {label: ("failed", f"input copies: {_describe(exc)}") for label in ready}
    outcome, samplers = {}, {}
    for label, (v, w_side) in ready.items():
        try:
            with sides[label].active():
                samplers[label] = _Active(make_sampler(v, w_side, copies), sides[label])
        except Exception as exc:  # noqa: BLE001
            outcome[label] = ("failed", _describe(exc))
    taken, errors = interleave(samplers, {k: _sample_count(s, samples) for k, s in samplers.items()})
    for label in samplers:
        outcome[label] = ("failed", errors[label]) if label in errors else ("ok", taken[label])
    return outcome


def _side_point(side: Checkout, name: str, w) -> tuple[str, object]:
    """("ok", (variant, workload)), ("skipped", reason) or ("absent", reason) for one side."""
    try:
        v = side.variants.get(name)
    except (KeyError, ValueError):
        return "absent", f"{side.label} has no variant {name!r}"
    try:
        w_side = side_workload(w, side.workloads.Workload)
    except (TypeError, ValueError) as exc:
        return "skipped", f"{side.label} cannot build the workload: {exc}"
    unsupported = getattr(v, "unsupported", None)
    reason = unsupported(w_side) if unsupported is not None else None
    if reason:
        return "skipped", reason
    return "ok", (v, w_side)


def side_workload(w, cls: type):
    """``w`` rebuilt with a checkout's own ``Workload`` class, from the same field values.

    A field the checkout does not know is refused (``TypeError``) unless it holds the running
    package's default, i.e. the checkout would build the same workload without it.
    """
    if isinstance(w, cls):
        return w
    known = {f.name for f in dataclasses.fields(cls)}
    values, unknown = {}, []
    for f in dataclasses.fields(w):
        value = getattr(w, f.name)
        if f.name in known:
            values[f.name] = value
        elif f.default is dataclasses.MISSING or value != f.default:
            unknown.append(f.name)
    if unknown:
        raise TypeError(f"its Workload has no field(s) {unknown}")
    return cls(**values)


def _environment() -> dict:
    from .machine import gpu_info

    return gpu_info(measure_bandwidth=False)


def _row(side: Checkout, sweep: grid.Sweep, point: dict, status: str, payload: object, *,
         machine: str, env: Mapping[str, object]) -> dict:
    samples = [float(s) for s in payload] if status == "ok" else None
    if status == "ok" and not samples:
        status, samples = "failed", None
    row = {
        "commit": side.commit,
        "date": side.date,
        "machine": machine,
        "env": ENVS[side.label],
        **{k: env.get(k) for k in ("gpu", "driver", "cuda", "torch", "triton")},
        "benchmark": benchmark_name(sweep),
        "module": BENCH_MODULE,
        "tier": sweep.tier,
        "sweep": sweep.name,
        "metric": METRIC,
        "unit": "seconds",
        **{k: point.get(k) for k in ("variant", "mode", "draft", "num_reqs", "K", "vocab_size", "phi", "pattern")},
        "stage": point.get("stage"),
        "status": status,
        "samples": samples,
    }
    if samples:
        arr = np.asarray(samples)
        q25, q75 = np.percentile(arr, [25, 75])
        row.update(value=float(np.median(arr)), q25=float(q25), q75=float(q75), n_samples=len(arr))
        row["ci_lo"], row["ci_hi"] = median_ci(arr)
    return row


def median_ci(samples: np.ndarray, confidence: float = 0.99) -> tuple[float, float]:
    """Distribution-free confidence interval of the median: order statistics x_(j), x_(n+1-j)
    with j from the binomial(n, 1/2) quantile (the whole range when n is too small for it).
    Sign-off reads it only when the Mann-Whitney test cannot reach alpha with so few samples."""
    x = np.sort(np.asarray(samples, dtype="float64"))
    n = len(x)
    if n == 0:
        return math.nan, math.nan
    j = max(int(stats.binom.ppf((1 - confidence) / 2, n, 0.5)), 1)
    return float(x[j - 1]), float(x[n - j])


def point_label(point: dict) -> str:
    return (f"{point.get('variant')} {point.get('mode')} {point.get('draft')} R={point.get('num_reqs')} "
            f"K={point.get('K')} V={point.get('vocab_size')} phi={point.get('phi')}")


def _progress(outcome: dict) -> str:
    parts = []
    for label in SIDES:
        state, payload = outcome.get(label, ("absent", None))
        if state == "ok":
            parts.append(f"{label} {np.median(payload) * 1e6:.1f} us")
        else:
            parts.append(f"{label} {state}" + (f" ({payload})" if state == "failed" else ""))
    if all(outcome.get(s, ("",))[0] == "ok" for s in SIDES):
        ratio = np.median(outcome["head"][1]) / np.median(outcome["base"][1])
        parts.append(f"x{ratio:.3f}")
    return "  ".join(parts)


# ---------------------------------------------------------------------------------------------
# Sign-off of two commits
# ---------------------------------------------------------------------------------------------


@dataclass
class SignoffResult:
    """One paired sign-off: the measurement, the verdicts and the report."""

    base: str
    head: str
    frame: pd.DataFrame
    verdicts: pd.DataFrame
    report: str
    exit_code: int
    seconds: float


def split_sides(frame: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The base and head rows of a :func:`measure_paired` frame."""
    return frame[frame["env"] == ENVS["base"]], frame[frame["env"] == ENVS["head"]]


def signoff_commits(
    repo: str | Path,
    base: str,
    head: str,
    *,
    tier: str = "quick",
    sweeps: Collection[str] | None = None,
    variants: Collection[str] | None = None,
    samples: int = DEFAULT_SAMPLES,
    machine: str = "unknown",
    alpha: float = 0.002,
    min_effect: float = signoff.PAIRED_MIN_EFFECT,
    min_abs_seconds: float = signoff.PAIRED_MIN_ABS_SECONDS,
    device: str = "cuda",
    l2: str = "cold",
    make_sampler: MakeSampler | None = None,
    environment: Mapping[str, object] | None = None,
    log: Callable[[str], None] = print,
) -> SignoffResult:
    """Check out ``base`` and ``head`` in worktrees (also when they are one commit: A/A), load
    both, measure them paired (:func:`measure_paired`) and judge (:func:`specsample.signoff.compare`).

    ``specsample signoff BASE HEAD`` is this plus printing; ``scripts/validate_signoff.py``
    calls it directly. Raises :class:`CheckoutError` for a checkout that cannot be loaded.
    """
    from .asv_runs import git, worktree

    repo = Path(repo)
    start = time.monotonic()
    base_sha, head_sha = (_commit(repo, rev) for rev in (base, head))
    log(f"specsample signoff: base {base_sha[:8]} vs head {head_sha[:8]}, {tier} tier, "
        f"{samples} samples a side, paired in one process")
    with worktree(repo, base_sha) as base_tree, worktree(repo, head_sha) as head_tree:
        sides = [load_checkout(tree, label, sha, _commit_date(repo, sha))
                 for label, sha, tree in (("base", base_sha, base_tree), ("head", head_sha, head_tree))]
        frame = measure_paired(*sides, tier=tier, sweeps=sweeps, variants=variants, samples=samples,
                               machine=machine, device=device, l2=l2, make_sampler=make_sampler,
                               environment=environment, log=log)  # fmt: skip
    verdicts = signoff.compare(*split_sides(frame), alpha=alpha, min_effect=min_effect, min_abs_seconds=min_abs_seconds)
    seconds = time.monotonic() - start
    title = f"specsample sign-off: {head_sha[:8]} vs {base_sha[:8]}"
    report = signoff.report_markdown(verdicts, machine_environment(frame), title=title)
    report += (f"\nMeasured paired in one process: base and head on the same inputs, {samples} "
               f"samples a side alternated ABBA, {tier} tier, {seconds:.0f} s.\n")
    return SignoffResult(base_sha, head_sha, frame, verdicts, report, signoff.exit_code(verdicts), seconds)


def _commit(repo: Path, rev: str) -> str:
    from .asv_runs import git

    try:
        return git(repo, "rev-parse", "--verify", "--quiet", f"{rev}^{{commit}}")
    except subprocess.CalledProcessError:
        raise ValueError(f"{rev!r} is not a commit of {repo}") from None


def _commit_date(repo: Path, sha: str) -> str:
    from .asv_runs import git

    return git(repo, "show", "-s", "--format=%cI", sha)
