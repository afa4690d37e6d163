#!/usr/bin/env bash
# The GPU box's checks of a kernel change, each timed: every test that runs kernels on the GPU
# (pytest -m gpu, in parallel worker processes that share Triton's disk cache, so each kernel
# specialization compiles once), the large_memory ones (inputs past 2**31 elements, tens of GiB
# each) one at a time after them, then compute-sanitizer memcheck (scripts/memcheck.sh).
# The jit_build test (FlashInfer's first call: it builds FlashInfer's sampling module, about
# 100 s on a fresh box) runs in a process of its own from the start, beside the others: it was
# the run's critical path when it waited for pytest-xdist's workers to come up.
# From the repository root, after `source contrib/offline-gpu-box/gpu-env.sh`.
# Usage: scripts/gpu-check.sh [WORKERS]   (default 8; pytest-xdist must be installed)
#        MEMCHECK=0 scripts/gpu-check.sh   the tests only
set -u
workers=${1:-8}
status=0
start=$SECONDS
python3 -m pytest -m "gpu and jit_build" -q -p no:cacheprovider -rf --durations=3 tests &
jit=$!
python3 -m pytest -m "gpu and not large_memory and not jit_build" -q -p no:cacheprovider -n "$workers" -rf \
  --durations=10 tests || status=1
python3 -m pytest -m "gpu and large_memory" -q -p no:cacheprovider -rf tests || status=1
wait $jit || status=1
echo "gpu-check: GPU tests $((SECONDS - start)) s with $workers workers"
if [ "${MEMCHECK:-1}" != 0 ]; then
  start=$SECONDS
  bash scripts/memcheck.sh || status=1
  echo "gpu-check: memcheck $((SECONDS - start)) s"
fi
exit $status
