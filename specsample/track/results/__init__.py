"""asv result files to one tidy DataFrame: the seam between the benchmark suite and everything else.

This package is the only place that reads asv's JSON. Sign-off (:mod:`specsample.track.signoff`)
and dashboards (:mod:`specsample.dashboard`) read the frame that :func:`load_results` returns,
never the files.

- :mod:`.frame`: the column contract (:data:`COLUMNS`), :func:`to_frame`, and queries on a
  frame (:func:`commit_order`, :func:`machine_environment`, ...);
- :mod:`.loader`: asv's result files to rows and the frame (:func:`load_results`);
- :mod:`.outcomes`: each run's outcomes (status, semantics, reason) and provenance;
- :mod:`.regressions`: the steps ``asv publish`` detected;
- :mod:`.files`: reading JSON files defensively (:class:`Problem`).
"""

from .files import Problem
from .frame import (
    COLUMNS,
    ENV_COLUMNS,
    PARAM_COLUMNS,
    commit_order,
    latest_commit,
    machine_environment,
    point_ratio,
    to_frame,
    with_path_defaults,
)
from .loader import load_results, parse_param, split_benchmark_name
from .outcomes import OUTCOMES_SUFFIX, apply_outcomes, load_provenance
from .regressions import load_asv_regressions

__all__ = [
    "COLUMNS",
    "ENV_COLUMNS",
    "OUTCOMES_SUFFIX",
    "PARAM_COLUMNS",
    "Problem",
    "apply_outcomes",
    "commit_order",
    "latest_commit",
    "load_asv_regressions",
    "load_provenance",
    "load_results",
    "machine_environment",
    "parse_param",
    "point_ratio",
    "split_benchmark_name",
    "to_frame",
    "with_path_defaults",
]
