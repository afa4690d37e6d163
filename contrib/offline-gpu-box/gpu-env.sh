# Source on the GPU box from the repository root: makes the checkout and the carried wheels
# (.whl/, from contrib/offline-gpu-box/device-wheels.sh) importable, using the box's
# own torch and Triton, and defines `specsample` (the CLI of the checkout: `specsample tune`,
# `specsample noise-floor`, ...). Never installs torch.
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
  --target /tmp/site .whl/*.whl || return 1
export PYTHONPATH="$PWD:/tmp/site${PYTHONPATH:+:$PYTHONPATH}"
export PATH="/tmp/site/bin:$PATH"
specsample() { python3 -m specsample.cli "$@"; }
# The device gets a copy of the working tree without its history: rebuild it from what is carried
# so asv can read commit dates and sign-off and backfill can make worktrees. Either a shallow
# clone's .git as a tarball (.carry/git.tar, the last N commits: about 5 MB at N = 5, where the
# whole history's bundle is 20 MB and with FlashInfer's wheel overruns a 64 MiB carry), made by
# contrib/offline-gpu-box/carry-git.sh, or the whole history (.carry/repo.bundle, made with `git bundle create .carry/repo.bundle --all`).
# Always from what is carried: a .git left on the box may hold an older HEAD, and asv would then
# file the results under the wrong commit.
if [ -f .carry/git.tar ]; then
  rm -rf .git && tar xf .carry/git.tar && git reset -q && git config user.email gpu@specsample.local \
    && git config user.name "specsample gpu"
elif [ -f .carry/repo.bundle ]; then
  rm -rf .git && git clone -q --bare .carry/repo.bundle .git && git config --bool core.bare false \
    && git config user.email gpu@specsample.local && git config user.name "specsample gpu" \
    && git reset -q && git worktree prune
fi
