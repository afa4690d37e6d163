"""Developer tools: measurements and checks run while working on the samplers, not by the tracker.

- :mod:`.tune` (``specsample tune``): fast's candidate configurations timed against mrv2, whole
  calls and each kernel, to choose ``fast.default_config`` (GPU).
- :mod:`.noise_floor` (``specsample noise-floor``): how fast a resample row can be -- its
  Gumbel noise alone, its bytes alone, fast's resample kernel (GPU).
- :mod:`.goals` (``specsample goals COMMIT``): a commit's committed results against a set of
  performance goals read from data (``goals.json``); no GPU.
- :mod:`.memcheck` (``python -m specsample.devtools.memcheck SUBJECT``): the inputs that have
  broken samplers before, once per subject, for ``compute-sanitizer`` (``scripts/memcheck.sh``).

Importing this package loads nothing; each module imports what it needs (torch and the kernels
for all but :mod:`.goals`).
"""
