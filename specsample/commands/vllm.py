"""``specsample vllm fetch|list`` and ``gpuinfo``: the vLLM release cache and the machine."""

from __future__ import annotations

import argparse
import json
import sys
import time

from .common import UsageError

# ---- vLLM cache ------------------------------------------------------------------------------


def cmd_vllm_fetch(args: argparse.Namespace) -> int:
    from ..subjects import SubjectError
    from ..subjects.vllm import fetch

    if not args.releases and not args.from_wheel:
        raise UsageError("specsample vllm fetch: give releases (X.Y.Z ...) or --from-wheel PATH")
    versions = [r.removeprefix("vllm==") for r in args.releases]
    failed = 0
    for version in versions or [None]:
        start = time.monotonic()
        try:
            (entry,) = fetch([version] if version else [], from_wheel=args.from_wheel)
        except SubjectError as exc:
            print(f"specsample vllm fetch: {exc}", file=sys.stderr)
            failed += 1
            continue
        print(
            f"{entry.label}: {len(entry.files)} files ({', '.join(entry.files)}) -> {entry.root.parent} "
            f"in {time.monotonic() - start:.1f} s"
        )
    return 2 if failed else 0


def cmd_vllm_list(args: argparse.Namespace) -> int:
    from ..subjects import SubjectError
    from ..subjects.cache import cache_root
    from ..subjects.vllm import store

    print(f"cache: {cache_root()}")
    cached = store.cached_releases()
    if not cached:
        print(
            "no vLLM release cached; `specsample vllm fetch X.Y.Z` fetches one, and a command that names one fetches it"
        )
    for version in cached:
        # Exit 1 of --index means "a newer release exists" to the nightly glue, so a bad cache
        # entry must not end in a traceback (exit 1): one line, exit 2.
        try:
            entry = store.release(version)
        except SubjectError as exc:
            raise UsageError(f"specsample vllm list: {exc}") from None
        left_out = f" ({len(entry.stand_ins)} modules it imports left out)" if entry.stand_ins else ""
        print(
            f"vllm=={version}: {len(entry.files)} files from {entry.manifest.get('wheel')}{left_out}; "
            f"paths: {_release_paths(version)}"
        )
    if not args.index:
        return 0
    return _vllm_index(store)


def _release_paths(version: str) -> str:
    """The sampler paths (docs/paths.md) a cached release has, read from its signature."""
    from .. import subjects

    try:
        return ", ".join(subjects.get(f"vllm=={version}").capabilities.paths) or "none"
    except (subjects.SubjectError, subjects.NotSupported) as exc:
        return f"unknown ({exc})"


def _vllm_index(store) -> int:
    """``vllm list --index``: the index's releases beside the tiers'; 1 if the index has a newer
    one than :data:`specsample.tiers.MRV2_RELEASES` (the tiers do not measure it yet)."""
    from ..schema import release_key
    from ..subjects import SubjectError
    from ..tiers import MRV2_RELEASES

    try:
        released = store.index_releases()
    except SubjectError as exc:
        print(f"specsample vllm list: {exc}", file=sys.stderr)
        return 2
    cached = set(store.cached_releases())
    newest = release_key(MRV2_RELEASES[-1])
    newer = [v for v in released if release_key(v) > newest]
    print(f"package index: {len(released)} releases from {released[0] if released else '-'} on")
    for version in released:
        where = ["tiers" if version in MRV2_RELEASES else "not in the tiers", "cached" if version in cached else ""]
        print(f"  vllm=={version}: {', '.join(w for w in where if w)}")
    if newer:
        print(
            f"specsample vllm list: the index has {', '.join('vllm==' + v for v in newer)}, newer than the newest "
            f"release the tiers measure (vllm=={MRV2_RELEASES[-1]}): append it to specsample.tiers.MRV2_RELEASES "
            f"once its sampler loads (specsample vllm fetch {newer[-1]})",
            file=sys.stderr,
        )
        return 1
    return 0


def cmd_gpuinfo(args: argparse.Namespace) -> int:
    from ..machine import gpu_info

    print(json.dumps(gpu_info(), indent=2))
    return 0
