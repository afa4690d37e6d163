"""The bisection itself, as pure logic: which commit to measure next, and what a measurement says.

Given the commits from GOOD to BAD (oldest first, GOOD first, BAD last) and a measurer (a
callable that measures one commit against both ends, paired, in one process: :class:`Probe`),
:func:`bisect` finds the first commit whose latency at the point moved as BAD's did:

1. **Reproduce.** BAD is measured against GOOD (and itself). Its verdict against GOOD gives the
   direction (``slower`` or ``faster``); ``same`` means the change does not reproduce, and an
   ``inconclusive`` verdict is measured again with more effort first. A change that does not
   reproduce ends the bisection (:data:`NOT_REPRODUCIBLE`).
2. **Bisect.** The commit in the middle of the range still open is measured against GOOD and
   against BAD. It is *bad* when it moved from GOOD as BAD did and is the same as BAD, and *good*
   when it is the same as GOOD and differs from BAD the other way. A step that says neither
   (inconclusive, or between the two levels) is measured again with more effort (up to
   ``max_effort``); after that, a one-sided answer decides (moved from GOOD: bad; differs from
   BAD: good), else the nearer level (log-ratio) does, and the step says so.
3. **Skip.** A commit that does not load or crashes is skipped (as ``git bisect skip`` does)
   and the commit nearest the middle of the open range is tried instead. When only skipped
   commits stand between the last good and the first bad commit, the culprit is one of them or
   the first bad commit: the result lists them (:data:`AMBIGUOUS`).

Nothing here measures, reads git or prints; :mod:`.runner` and the CLI do.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

FOUND = "found"
NOT_REPRODUCIBLE = "not-reproducible"
AMBIGUOUS = "ambiguous"  # skipped commits between the last good and the first bad commit
DIRECTIONS = ("slower", "faster")
OPPOSITE = {"slower": "faster", "faster": "slower"}


class BisectError(ValueError):
    """A bisection that cannot start: too few commits, or a point neither end can run."""


@dataclass(frozen=True)
class Comparison:
    """One paired comparison of a commit against an end (:func:`specsample.track.signoff.verdict.
    four_way`): its verdict and ``ratio`` = commit / end (medians)."""

    verdict: str  # "slower" | "faster" | "same" | "inconclusive"
    ratio: float
    p_value: float = math.nan
    equivalence_p: float = math.nan


@dataclass(frozen=True)
class Probe:
    """One measurement of ``commit`` against GOOD and BAD, or why it could not be made."""

    commit: str
    vs_good: Comparison | None = None
    vs_bad: Comparison | None = None
    skipped: str | None = None  # the commit does not load, or crashed
    seconds: float = 0.0  # device time of this measurement
    effort: int = 0
    figures: dict = field(default_factory=dict)  # medians, samples, noise: for the report


# The measurer: (commit, effort) -> Probe. Effort 0 is the first try; each retry asks for more
# samples (a tighter noise target, a longer time cap).
Measurer = Callable[[str, int], Probe]


@dataclass
class Step:
    """One commit decided (or skipped): its probes (one per effort) and the decision."""

    commit: str
    index: int
    probes: list[Probe]
    decision: str  # "good" | "bad" | "skip"
    why: str
    range_before: tuple[int, int]  # (last good index, first bad index) before this step


@dataclass
class BisectResult:
    status: str  # FOUND | NOT_REPRODUCIBLE | AMBIGUOUS
    commits: list[str]
    direction: str | None
    reproduction: list[Probe]
    steps: list[Step]
    culprit: str | None = None
    last_good: str | None = None
    candidates: list[str] = field(default_factory=list)  # AMBIGUOUS: the culprit is one of these
    why: str = ""

    @property
    def skipped(self) -> list[tuple[str, str]]:
        return [(s.commit, s.probes[-1].skipped or s.why) for s in self.steps if s.decision == "skip"]

    @property
    def seconds(self) -> float:
        return sum(p.seconds for p in self.reproduction) + sum(p.seconds for s in self.steps for p in s.probes)

    @property
    def measurements(self) -> int:
        return len(self.reproduction) + sum(len(s.probes) for s in self.steps)


def bisect(commits: Sequence[str], measure: Measurer, *, max_effort: int = 2) -> BisectResult:
    """Find the first commit of ``commits`` (GOOD first, BAD last) whose point moved as BAD's did.

    ``max_effort``: how many times an inconclusive measurement is repeated with more effort
    before it decides on what it has. Raises :class:`BisectError` when there are fewer than two
    commits, or when GOOD or BAD cannot be measured at all.
    """
    commits = list(commits)
    if len(commits) < 2:
        raise BisectError("bisect: need GOOD and BAD, two different commits")
    if max_effort < 0:
        raise BisectError(f"bisect: max_effort must be >= 0, got {max_effort}")
    reproduction: list[Probe] = []
    for effort in range(max_effort + 1):
        probe = measure(commits[-1], effort)
        reproduction.append(probe)
        if probe.skipped:
            raise BisectError(f"bisect: the point cannot be measured at GOOD and BAD: {probe.skipped}")
        if probe.vs_good is None:
            raise BisectError("bisect: the measurer returned no comparison of BAD against GOOD")
        if probe.vs_good.verdict != "inconclusive":
            break
    verdict = reproduction[-1].vs_good.verdict
    if verdict not in DIRECTIONS:
        why = (
            f"BAD is the same as GOOD at this point (ratio {reproduction[-1].vs_good.ratio:.4f})"
            if verdict == "same"
            else f"BAD against GOOD stayed inconclusive after {len(reproduction)} measurements"
        )
        return BisectResult(NOT_REPRODUCIBLE, commits, None, reproduction, [], why=why)
    direction = verdict
    lo, hi = 0, len(commits) - 1
    skipped: set[int] = set()
    steps: list[Step] = []
    while True:
        index = _next(lo, hi, skipped)
        if index is None:
            break
        probes: list[Probe] = []
        decision, why = "skip", ""
        for effort in range(max_effort + 1):
            probe = measure(commits[index], effort)
            probes.append(probe)
            if probe.skipped:
                decision, why = "skip", probe.skipped
                break
            decision, why = classify(probe, direction, final=effort == max_effort)
            if decision != "more":
                break
        steps.append(Step(commits[index], index, probes, decision, why, (lo, hi)))
        if decision == "skip":
            skipped.add(index)
        elif decision == "good":
            lo = index
        else:
            hi = index
    between = [commits[i] for i in range(lo + 1, hi)]
    if between:
        return BisectResult(
            AMBIGUOUS,
            commits,
            direction,
            reproduction,
            steps,
            last_good=commits[lo],
            candidates=[*between, commits[hi]],
            why=f"{len(between)} skipped commit(s) between the last good and the first bad commit",
        )
    return BisectResult(FOUND, commits, direction, reproduction, steps, culprit=commits[hi], last_good=commits[lo])


def _next(lo: int, hi: int, skipped: set[int]) -> int | None:
    """The untried commit strictly between ``lo`` and ``hi`` nearest their middle, or None."""
    middle = (lo + hi) / 2
    open_ = [i for i in range(lo + 1, hi) if i not in skipped]
    return min(open_, key=lambda i: (abs(i - middle), i)) if open_ else None


def classify(probe: Probe, direction: str, *, final: bool) -> tuple[str, str]:
    """``("good" | "bad" | "more", why)`` for one probe of a commit, BAD being ``direction``
    (``slower`` or ``faster``) than GOOD. ``final``: no more effort is left, decide anyway."""
    g, b = probe.vs_good, probe.vs_bad
    if g is None or b is None:
        raise BisectError(f"bisect: the measurer returned no comparison for {probe.commit}")
    opposite = OPPOSITE[direction]
    figures = f"against GOOD {g.verdict} ({_pct(g.ratio)}), against BAD {b.verdict} ({_pct(b.ratio)})"
    if g.verdict == direction and b.verdict == "same":
        return "bad", figures
    if g.verdict == "same" and b.verdict == opposite:
        return "good", figures
    if not final:
        return "more", figures
    if g.verdict == direction and b.verdict != opposite:
        return "bad", figures + "; decided on the move from GOOD"
    if b.verdict == opposite and g.verdict != direction:
        return "good", figures + "; decided on the difference from BAD"
    near_good = abs(math.log(g.ratio)) if g.ratio > 0 else math.inf
    near_bad = abs(math.log(b.ratio)) if b.ratio > 0 else math.inf
    if near_good <= near_bad:
        return "good", figures + "; still undecided after every retry: nearer GOOD's level"
    return "bad", figures + "; still undecided after every retry: nearer BAD's level"


def _pct(ratio: float) -> str:
    return f"{100 * (ratio - 1):+.2f}%" if ratio == ratio else "n/a"
