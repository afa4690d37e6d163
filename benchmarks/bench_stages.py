"""Per-kernel breakdown: each kernel of the pipeline timed on its own, for ``mrv2``, ``fast`` and
the ``mrv2-pre50939`` replica, so a change shows which kernel moved and the PR's saving shows
where it comes from. Classes: ``NightlyStages``, ``FullStages``."""

from specsample.tiers import sweeps

from .common import make_classes

globals().update(make_classes(tuple(s for s in sweeps() if s.kind == "stages"), __name__))
