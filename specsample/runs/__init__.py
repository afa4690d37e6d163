"""Running things: the modules that start processes, worktrees and GPU measurements.

- :mod:`.asv`: asv runs of a tier (locking, worktrees, backfill, publishing results);
- :mod:`.paired`: base and head measured paired, point by point, in worker processes
  (``specsample signoff BASE HEAD``), the revs and subjects it names resolved first by
  :mod:`.resolve`;
- :mod:`.validate`: the sign-off's own validation, A/A runs and planted slowdowns
  (``specsample signoff-validate``): :mod:`.plants` (what is planted, the options),
  :mod:`.calibration` (the delay for each planted slowdown), :mod:`.detection` (the runs judged,
  the detection matrix and the outputs).

The analysis of what they measure lives in :mod:`specsample.track` (frame in, frame out), which
never imports this package.
"""
