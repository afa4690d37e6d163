"""Sign-off: is head slower than base, and did it break anything?

- :mod:`.stats`: pairing two sides' points, their verdicts and the exit code (pure frame ->
  frame functions, thresholds as keyword arguments);
- :mod:`.verdict`: one point's significance, equivalence, four-way verdict and spread;
- :mod:`.report`: the markdown report of a verdicts frame;
- :mod:`.exactness_rows`: the exactness check's rows as a frame.

Pure: frame in, frame out. Measuring paired and the sign-off's validation run things, so they
live in :mod:`specsample.runs` (:mod:`~specsample.runs.paired`, :mod:`~specsample.runs.validate`).
"""

from . import report, stats, verdict
from .report import format_value, point_label, report_markdown
from .stats import (
    ALPHA,
    ASV_MIN_EFFECT,
    COMPARED_VERDICTS,
    FAILED_VERDICTS,
    HIGHER_IS_BETTER,
    ONE_SIDED_VERDICTS,
    PAIRED_MIN_ABS_SECONDS,
    PAIRED_MIN_EFFECT,
    TIME_UNITS,
    VERDICT_COLUMNS,
    VERDICTS,
    VIOLATES,
    compare,
    compare_variants,
    counts,
    default_key,
    exit_code,
    median_ci,
    newest_commit_with,
)
from .verdict import TESTS, min_p_value, noise_level, relative_iqr

__all__ = [
    "ALPHA",
    "ASV_MIN_EFFECT",
    "COMPARED_VERDICTS",
    "FAILED_VERDICTS",
    "HIGHER_IS_BETTER",
    "ONE_SIDED_VERDICTS",
    "PAIRED_MIN_ABS_SECONDS",
    "PAIRED_MIN_EFFECT",
    "TESTS",
    "TIME_UNITS",
    "VERDICT_COLUMNS",
    "VERDICTS",
    "VIOLATES",
    "compare",
    "compare_variants",
    "counts",
    "default_key",
    "exit_code",
    "format_value",
    "median_ci",
    "min_p_value",
    "newest_commit_with",
    "noise_level",
    "point_label",
    "relative_iqr",
    "report",
    "report_markdown",
    "stats",
    "verdict",
]
