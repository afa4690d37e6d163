"""Sign-off: is head slower than base? (statistics, report, paired measurement, validation)."""

from .stats import *  # noqa: F401,F403
from .stats import _point_label  # noqa: F401
