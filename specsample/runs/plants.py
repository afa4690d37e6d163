"""What the sign-off's validation plants, and how it runs (:mod:`.validate`).

A plant is a head side that is head's code followed by a delay kernel (the wrapper subject
``S@SHA+extra=n``, :mod:`specsample.subjects.planted`) for the subjects of
:data:`PLANTED_SUBJECTS`; it slows their block-verification points with draft logits (the
points :func:`touched`) and leaves every other point as a control. :data:`TARGETS` are the
slowdowns aimed at; from :data:`REQUIRED_FROM` up they must be caught. :func:`run_order` orders
the A/A runs and the plants, and :class:`Options` holds what every step of the validation reads.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pandas as pd

from ..track.signoff import stats
from . import paired

TARGETS = (0.03, 0.05, 0.10)
REQUIRED_FROM = 0.05  # planted slowdowns at or above this must be caught; smaller ones are reported
# The subjects a plant wraps in the delay (specsample.subjects.planted): it slows their
# block-verification points with draft logits; every other point of the tier is a control.
PLANTED_SUBJECTS = ("mrv2", "mrv2-pre50939")


def planted_name(subject: str, sha: str, iters: int) -> str:
    """The head side of a plant: ``S@SHA+extra=iters`` for :data:`PLANTED_SUBJECTS`, else ``S@SHA``."""
    return f"{subject}@{sha}+extra={iters}" if subject in PLANTED_SUBJECTS and iters > 0 else f"{subject}@{sha}"


def touched(verdicts: pd.DataFrame) -> pd.Series:
    """Points the knob slows down: block verification with draft logits of :data:`PLANTED_SUBJECTS`."""
    return (verdicts["mode"] == "block") & (verdicts["draft"] == "logits") & verdicts["subject"].isin(PLANTED_SUBJECTS)


def run_order(aa_runs: int, targets: tuple[float, ...]) -> list[tuple[str, float | None, int]]:
    """``(name, target, A/A number)``: A/A 1, the required plants (5%, 10%), then the other A/A
    runs alternating with the remaining plants, so that a budget cut keeps both kinds."""
    required = sorted(t for t in targets if t >= REQUIRED_FROM)
    rest = sorted(t for t in targets if t < REQUIRED_FROM)
    plants = [(f"planted {100 * t:g}%", t, 0) for t in required + rest]
    aa = [(f"A/A {i}", None, i) for i in range(1, aa_runs + 1)]
    order = aa[:1] + plants[:2]
    for pair in zip(aa[1:], plants[2:]):
        order += pair
    order += aa[1 + len(plants[2:]) :] + plants[2 + len(aa[1:]) :]
    return order


class ValidationError(RuntimeError):
    """The validation cannot run (a repository that is not one, a head that cannot be loaded);
    the CLI exits 2 with it."""


@dataclasses.dataclass
class Options:
    """What to validate and how (``specsample signoff-validate``'s options; :func:`options`
    fills in the defaults of a GPU run or a ``--smoke`` run)."""

    out: Path
    repo: Path
    tier: str = "quick"
    sweeps: tuple[str, ...] = ()
    subjects: tuple[str, ...] = ()
    samples: int = paired.DEFAULT_SAMPLES
    aa_runs: int = 5
    targets: tuple[float, ...] = TARGETS
    budget: float = 450.0  # seconds for the whole validation; runs that would not fit are left out
    machine: str = "h200"
    alpha: float = stats.ALPHA
    min_effect: float = stats.PAIRED_MIN_EFFECT
    min_abs_seconds: float = stats.PAIRED_MIN_ABS_SECONDS
    separate_min_effect: float = stats.ASV_MIN_EFFECT  # the separate-process rows (no absolute floor)
    smoke: bool = False
    device: str = "cuda"
    l2: str = "cold"
    host: bool = False  # host wall-clock timer (--smoke)
    # Calibration: scan doubling from first_iters up to scan_max, pick at most max_iters, re-pick
    # up to `refine` times.
    first_iters: int = 2
    scan_max: int = 4096
    max_iters: int = 8192
    refine: int = 2


def options(out: Path, repo: Path, *, smoke: bool = False, cuda: bool | None = None, **given) -> Options:
    """:class:`Options` with the defaults of a GPU run, or of a ``--smoke`` run: smoke tier,
    2 samples, warm L2, host timer, a one-step calibration scan; the compiled kernels where
    there is a GPU (the interpreter is for machines without CUDA). ``given`` values that are
    ``None`` keep the default."""
    given = {k: v for k, v in given.items() if v is not None}
    if cuda is None:
        import torch

        cuda = torch.cuda.is_available()
    if smoke:
        defaults = dict(
            tier="smoke",
            samples=2,
            device="cuda" if cuda else "cpu",
            l2="warm",
            host=True,
            first_iters=1,
            scan_max=1,
            max_iters=64,
            refine=0,
        )
    else:
        defaults = {}
    merged = {**defaults, **given}
    if "targets" in merged:
        merged["targets"] = tuple(sorted(merged["targets"]))
    return Options(out=Path(out), repo=Path(repo).resolve(), smoke=smoke, **merged)


def log_to_stdout(line: str) -> None:
    print(line, flush=True)
