#!/usr/bin/env bash
# The checkout's history, small enough to carry to a GPU box that gets only a copy of the working
# tree: the last DEPTH commits' .git (a shallow clone) as .carry/git.tar. asv reads commit dates
# from it, and sign-off and backfill make worktrees from it; `source gpu-env.sh` on the box
# unpacks it. About 5 MB at the default depth, where the whole history as a bundle is 20 MB.
# Usage (from anywhere in the checkout): contrib/offline-gpu-box/carry-git.sh [DEPTH]   (default 5)
set -euo pipefail
depth=${1:-5}
cd "$(git rev-parse --show-toplevel)"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# Committed state only: the clone sees what is committed, so commit before carrying.
git clone -q --depth "$depth" "file://$PWD" "$tmp/shallow"
mkdir -p .carry
tar -C "$tmp/shallow" -cf .carry/git.tar .git
echo "carry-git: .carry/git.tar ($(du -h .carry/git.tar | cut -f1), HEAD $(git -C "$tmp/shallow" rev-parse --short HEAD), depth $depth)"
