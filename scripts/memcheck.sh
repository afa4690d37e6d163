#!/usr/bin/env bash
# compute-sanitizer memcheck over every in-tree subject on the memcheck cases
# (python -m specsample.devtools.memcheck), then the GPU kernel tests. Prints one error count per run.
# GPU box, from the repository root, after `source contrib/offline-gpu-box/gpu-env.sh`.
set -u
status=0
# fast and express in each of their batch-size configurations, forced at every batch size
for run in mrv2 mrv2-vllm "fast --config tiny" "fast --config small" "fast --config large" \
  express "express --config small" "express --config large" "express --vocab-size 65536" mrv2-pre50939 torch-eager; do
  log=$(mktemp)
  # shellcheck disable=SC2086  # $run is a subject and its options
  timeout "${MEMCHECK_TIMEOUT:-120}" compute-sanitizer --tool memcheck --error-exitcode 1 \
    python3 -m specsample.devtools.memcheck $run >"$log" 2>&1
  rc=$?
  errors=$(grep -Eo 'ERROR SUMMARY: [0-9]+' "$log" | tail -1)
  echo "$run: rc=$rc ${errors:-no summary} $(grep 'calls on' "$log")"
  [ $rc -eq 0 ] || { status=1; grep -m 20 -E 'Invalid|ERROR|Error' "$log"; }
done
timeout "${MEMCHECK_TESTS_TIMEOUT:-300}" compute-sanitizer --tool memcheck --error-exitcode 1 \
  python3 -m pytest -q -x -p no:cacheprovider tests/test_sampler.py -k "nan or placeholder or truncat" 2>&1 \
  | grep -E 'ERROR SUMMARY|passed|failed' || status=1
exit $status
