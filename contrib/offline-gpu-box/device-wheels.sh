#!/usr/bin/env bash
# Wheels a GPU box without network needs (asv and what it needs, nvidia-ml-py, and FlashInfer 0.7.4
# for the peer subjects), for Python 3.12 on x86-64 Linux, into .whl/ at the repository root
# (git-ignored). Carry .whl to the box with the checkout; `source contrib/offline-gpu-box/gpu-env.sh`
# there installs them.
# Usage: contrib/offline-gpu-box/device-wheels.sh [EXTRA==VERSION ...]
# FLASHINFER=X.Y.Z contrib/offline-gpu-box/device-wheels.sh: that FlashInfer release instead; from
# 0.7 on its wheel alone is over the carry, so it is stripped to its sampling module by
# flashinfer-wheel.sh (0.7.4: 101 MB -> 32 MB). FLASHINFER=none: no FlashInfer.
set -euo pipefail
cd "$(git rev-parse --show-toplevel)"
mkdir -p .whl
pkgs=(asv==0.6.6 asv-runner==0.3.2 json5 virtualenv distlib platformdirs importlib-metadata==8.7.0 pympler
      nvidia-ml-py apache-tvm-ffi==0.1.15.post2 "$@")
flashinfer=${FLASHINFER:-0.7.4}
rm -f .whl/flashinfer_python-*.whl
case "$flashinfer" in
  none) ;;
  0.6.*) pkgs+=("flashinfer-python==$flashinfer") ;;
  *) bash contrib/offline-gpu-box/flashinfer-wheel.sh "$flashinfer" .whl ;;
esac
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d .whl "${pkgs[@]}"
ls .whl
