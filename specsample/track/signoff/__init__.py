"""Sign-off: is head slower than base, and did it break anything?

- :mod:`.stats`: pairing two sides' points, significance, verdicts and the exit code (pure
  frame -> frame functions, thresholds as keyword arguments);
- :mod:`.report`: the markdown report of a verdicts frame;
- :mod:`.paired`: base and head measured paired, point by point, in worker processes
  (``specsample signoff BASE HEAD``);
- :mod:`.validate`: the sign-off's own validation, A/A runs and planted slowdowns
  (``specsample signoff-validate``).

No torch at import: the measurement runs in worker processes.
"""

from . import paired, report, stats, validate
from .paired import SignoffError, SignoffResult, measure_paired, points, signoff_commits, signoff_subjects
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
    TESTS,
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
    min_p_value,
    newest_commit_with,
    noise_level,
    relative_iqr,
)

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
    "SignoffError",
    "SignoffResult",
    "compare",
    "compare_variants",
    "counts",
    "default_key",
    "exit_code",
    "format_value",
    "measure_paired",
    "median_ci",
    "min_p_value",
    "newest_commit_with",
    "noise_level",
    "paired",
    "point_label",
    "points",
    "relative_iqr",
    "report",
    "report_markdown",
    "signoff_commits",
    "signoff_subjects",
    "stats",
    "validate",
]
