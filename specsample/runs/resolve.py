"""What a sign-off names, resolved before anything is measured: revs of the repository, subject
names, and which of our subjects a commit has.

Each raises :class:`SignoffError` for what it cannot resolve, with a message that names what was
given and lists what is known (the repository's refs and newest commits, the subjects that
resolve here), so an unknown name is exit 2 before any measurement, on any machine.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
from collections.abc import Collection, Iterator
from pathlib import Path

from .. import tiers
from ..schema import OUR_SUBJECTS, parse_subject


class SignoffError(ValueError):
    """A sign-off that cannot start (an unknown rev, subject or selection); the CLI exits 2 with it."""


@contextlib.contextmanager
def repository_env(repo: Path) -> Iterator[None]:
    """``$SPECSAMPLE_REPO`` = ``repo`` inside (the workers resolve ``NAME@COMMIT`` there), as
    before afterwards."""
    saved = os.environ.get("SPECSAMPLE_REPO")
    os.environ["SPECSAMPLE_REPO"] = str(repo)
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("SPECSAMPLE_REPO", None)
        else:
            os.environ["SPECSAMPLE_REPO"] = saved


def resolve_rev(repo: Path, rev: str) -> str:
    """The full hash of ``rev`` in ``repo``; ``SignoffError`` naming it and listing the
    repository's refs and newest commits otherwise."""
    from ..subjects.base import SubjectError
    from ..subjects.commits import resolve_commit

    try:
        return resolve_commit(repo, rev)
    except SubjectError:
        raise SignoffError(f"{rev!r} is not a commit of {repo}; {known_revs(repo)}") from None


def known_revs(repo: Path, newest: int = 5, max_refs: int = 20) -> str:
    """The branches, tags and newest commits of ``repo``, for an error message."""

    def git(*args: str) -> list[str]:
        proc = subprocess.run(["git", "-C", str(repo), *args], capture_output=True, text=True)
        return proc.stdout.splitlines() if proc.returncode == 0 else []

    refs = git("for-each-ref", "--format=%(refname:short)", "refs/heads", "refs/tags")
    log = git("log", f"-{newest}", "--format=%h %s")
    if not refs and not log:
        return "it is not a git repository with commits"
    more = f" (and {len(refs) - max_refs} more)" if len(refs) > max_refs else ""
    return f"known refs: {', '.join(refs[:max_refs]) or 'none'}{more}; newest commits: " + "; ".join(log)


def subjects_absent(sha: str, names: Collection[str], label: str = "commit") -> dict[str, str]:
    """Which of our subjects ``names`` commit ``sha`` does not have, with the reason. Loads the
    commit's package in this process (once per process, :mod:`specsample.subjects.commits`);
    ``SignoffError`` when it cannot be loaded at all (that is not a missing subject)."""
    from .. import subjects
    from ..subjects import commits

    try:
        commits.checkout(sha)
    except subjects.SubjectError as exc:
        raise SignoffError(f"{label} {sha[:8]} cannot be measured: {exc}") from None
    absent = {}
    for name in names:
        try:
            subjects.get(f"{name}@{sha}")
        except subjects.SubjectError as exc:
            # "NAME@SHA: the commit has no subject 'NAME' (its registry's own error)": the first
            # part says it; the registry's message (a list of forms) would only bury it.
            text = str(exc)
            absent[name] = "its registry has no such subject" if "has no subject" in text else text
    return absent


def check_subject(name: str) -> None:
    """Resolve subject ``name`` here (loading it once); ``SignoffError`` naming it and listing
    the known subjects when it cannot be."""
    from .. import subjects

    try:
        parse_subject(name)
        subjects.get(name)
    except (subjects.SubjectError, ValueError) as exc:
        raise SignoffError(f"{exc}; {known_subjects()}") from None


def known_subjects() -> str:
    """What subject names resolve here, for an error message."""
    from ..subjects.vllm import store

    try:
        cached = store.cached_releases()
    except Exception:  # noqa: BLE001 - an unreadable cache lists nothing
        cached = []
    cached_text = ", ".join(f"vllm=={v}" for v in cached) or "none"
    return (
        f"known subjects: {', '.join(OUR_SUBJECTS)} (ours); NAME@COMMIT (one of ours at a commit); vLLM "
        f"releases in the cache: {cached_text} (`specsample vllm fetch X.Y.Z` fetches one of "
        f"{', '.join(tiers.MRV2_RELEASES)}); vllm@REF (a commit of --vllm-repo); vllm (the installed one)"
    )


def commit_date(repo: Path, sha: str) -> str:
    """The committer date of ``sha`` (ISO 8601), the ``date`` column of its rows."""
    return subprocess.run(
        ["git", "-C", str(repo), "show", "-s", "--format=%cI", sha], capture_output=True, text=True, check=True
    ).stdout.strip()
