"""A throw-away git repository holding a copy of the working tree's specsample/ (the code under
test), for tests that check commits out into worktrees (sign-off, its validation)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from specsample.runs.asv import git

REPO = Path(__file__).resolve().parents[1]
GIT = ("-c", "user.name=test", "-c", "user.email=test@example.invalid", "-c", "commit.gpgsign=false")


def make_repo(path: Path) -> Path:
    """``path`` as a git repository with one commit: the working tree's ``specsample/``."""
    shutil.copytree(REPO / "specsample", path / "specsample", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["git", "init", "-q", str(path)], check=True)
    git(path, "add", "-A")
    git(path, *GIT, "commit", "-q", "-m", "base")
    return path
