"""``specsample bisect GOOD BAD``: the first commit where a point's latency moved.

- :mod:`.search`: the bisection as pure logic, against any measurer;
- :mod:`.runner`: the paired measurer (a commit against GOOD and BAD in one worker process) and
  the commit range of a checkout;
- :mod:`.report`: ``bisect.json`` and ``bisect.md``, each step's figures.
"""

from .search import AMBIGUOUS, FOUND, NOT_REPRODUCIBLE, BisectError, BisectResult, Comparison, Probe, Step, bisect

__all__ = [
    "AMBIGUOUS",
    "FOUND",
    "NOT_REPRODUCIBLE",
    "BisectError",
    "BisectResult",
    "Comparison",
    "Probe",
    "Step",
    "bisect",
]
