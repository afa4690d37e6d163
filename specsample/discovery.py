"""New vLLM releases without a person: ``specsample nightly`` asks the package index for MRV2
releases newer than the tiers know, fetches each into the cache, and records it in
``results/discovered_releases.json``, which :mod:`specsample.tiers` appends to
:data:`~specsample.tiers.MRV2_RELEASES`. Every subject axis built from that tuple (the releases
tier's, the nightly Vllm and Paths sweeps') only grows, as asv needs to keep each point's
history, so the release is measured from that run on and the dashboards show it.

A release counts when it is newer than every release the tiers know, at least
:data:`~specsample.subjects.vllm.store.FIRST_MRV2_RELEASE`, and its wheel has the MRV2 sampler
(the fetch extracts it and fails otherwise). The file is append-only: a release is never taken
out (its history would be hidden). Without a network the index cannot be read: the nightly says
so in one line and goes on with the releases it knows.
"""

from __future__ import annotations

import hashlib
import json
import tempfile
from collections.abc import Callable
from pathlib import Path

from filelock import FileLock

from .schema import release_key


def newer_releases(index: list[str], known: tuple[str, ...]) -> list[str]:
    """The releases of ``index`` newer than every one of ``known``, oldest first."""
    newest = max((release_key(v) for v in known), default=(0,))
    return sorted((v for v in index if release_key(v) > newest), key=release_key)


def record(path: Path, versions: list[str]) -> list[str]:
    """Append ``versions`` to the discovered-releases file (created if missing; order kept,
    nothing removed); returns the ones that were not in it yet."""
    path.parent.mkdir(parents=True, exist_ok=True)
    # The lock lives outside results/, which is committed.
    lock = (
        Path(tempfile.gettempdir())
        / f"specsample-discovered-{hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]}.lock"
    )
    with FileLock(str(lock)):
        try:
            have = list(json.loads(path.read_text())["releases"])
        except FileNotFoundError:
            have = []
        added = [v for v in versions if v not in have]
        if added:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps({"releases": have + added}, indent=1) + "\n")
            tmp.replace(path)
    return added


def discover(
    known: tuple[str, ...],
    path: Path,
    *,
    index: Callable[[], list[str]],
    fetch: Callable[[str], object],
    log: Callable[[str], None] = print,
) -> list[str]:
    """Find, fetch and record the releases newer than ``known`` (module docstring); returns
    those recorded. ``index()`` lists the index's MRV2-era releases (``SubjectError`` without
    one); ``fetch(version)`` caches a release (``SubjectError`` where its wheel has no
    sampler)."""
    from .subjects import SubjectError

    try:
        released = index()
    except SubjectError as exc:
        log(f"specsample nightly: no new releases looked for, the package index cannot be read ({exc})")
        return []
    found = []
    for version in newer_releases(released, known):
        try:
            fetch(version)
        except SubjectError as exc:
            log(f"specsample nightly: vllm=={version} is on the index but not measured: {exc}")
            continue
        found.append(version)
    added = record(path, found) if found else []
    for version in added:
        log(f"specsample nightly: found vllm=={version}; the tiers measure it from this run on ({path})")
    return added
