# Source on the GPU box from the repository root: makes the checkout and the carried wheels
# (.whl/, from ../shared/tools/device-wheels.sh plus flashinfer) importable, using the box's
# own torch and Triton. Never installs torch.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || return 1
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
export PATH="/tmp/site/bin:$PATH"
specsample() { python3 -m specsample.cli "$@"; }
