"""What every command shares: the usage error, the repository root, the GPU and subject checks."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ..schema import parse_subject

# A CPU-interpreter run's results: git-ignored, beside (never inside) the committed results/.
INTERPRETER_RESULTS = "specsample-results"


class UsageError(Exception):
    """Bad input: printed as one line, exit 2."""


def _repo_root() -> Path:
    here = Path.cwd()
    for p in (here, *here.parents):
        if (p / "asv.conf.json").exists():
            return p
    return here


def _require_gpu(command: str) -> None:
    from ..machine import cuda_unavailable

    reason = cuda_unavailable()
    if reason:
        raise UsageError(
            f"{command} times kernels on a GPU and this machine has {reason}; nothing was "
            f"measured or written (only the smoke tier runs on a CPU: bench, signoff or backfill --tier smoke)"
        )


def _machine(args: argparse.Namespace) -> str:
    """``--machine``, else the name of the GPU found (never a default that could be wrong)."""
    if getattr(args, "machine", None):
        return args.machine
    from ..machine import machine_name

    return machine_name()


def _subject_names(names: list[str]) -> list[str]:
    """Parse every subject name first, so a typo fails before anything runs."""
    for name in names:
        try:
            parse_subject(name)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    return names


def _set_gpus(args: argparse.Namespace) -> None:
    """``--gpus all|0,1,...``: measurements shard their points over these GPUs (one worker per
    GPU, deterministic shards), through $SPECSAMPLE_GPUS, which the asv benchmark processes see."""
    spec = getattr(args, "gpus", None)
    if not spec:
        return
    import torch

    count = torch.cuda.device_count()
    if spec == "all":
        gpus = [str(i) for i in range(count)]
    else:
        gpus = [g.strip() for g in spec.split(",") if g.strip()]
        bad = [g for g in gpus if not g.isdigit() or int(g) >= count]
        if bad or not gpus:
            raise UsageError(f"--gpus: expected 'all' or indices below {count} (GPUs here), got {spec!r}")
    os.environ["SPECSAMPLE_GPUS"] = ",".join(gpus)


def _set_vllm_repo(args: argparse.Namespace) -> None:
    repo = getattr(args, "vllm_repo", None)
    if repo:
        if not Path(repo).is_dir():
            raise UsageError(f"--vllm-repo: {repo} is not a directory")
        os.environ["SPECSAMPLE_VLLM_REPO"] = str(Path(repo).resolve())


def _fetch_releases(names: list[str], *, fetch: bool = True, strict: bool = True, why: str = "") -> None:
    """Fetch each vLLM release among ``names`` that the cache lacks (``pip download`` of its wheel,
    then its sampler's files extracted: seconds a release), so that a release named on the
    command line works on a fresh machine. ``fetch=False`` (``--no-fetch``: a box without network,
    whose cache was carried to it) fetches nothing, and a missing release is then the loader's
    error, which says how to fetch it. A release that cannot be fetched is bad input when
    ``strict`` (exit 2, with pip's reason); otherwise a warning, and its points fail (a tier that
    measures many releases goes on without it). ``why``: what measures them, for the message."""
    from ..subjects.vllm import store

    if not fetch:
        return
    parsed = [parse_subject(n) for n in names]
    cached = set(store.cached_releases())
    for version in dict.fromkeys(p.version for p in parsed if p.kind == "vllm-release" and p.version not in cached):
        print(f"specsample: fetching vllm=={version}{why} (--no-fetch: never)", flush=True)
        try:
            store.fetch_release(version, log=lambda line: None)
        except Exception as exc:  # noqa: BLE001 - pip's failure, a bad wheel: the release cannot be had
            if strict:
                raise UsageError(f"vllm=={version} is not in the cache and could not be fetched: {exc}") from None
            print(f"specsample: vllm=={version} not fetched ({exc}); its points will fail", file=sys.stderr)


def _resolve_subjects(names: list[str]) -> None:
    """Load every named subject once here, so an unknown release, a missing ref or a corrupt
    cache entry is one clear error before any measurement starts."""
    from .. import subjects

    for name in names:
        try:
            subjects.get(name)
        except (subjects.SubjectError, subjects.NotSupported, ValueError) as exc:
            raise UsageError(str(exc)) from None


def _tier_needs(tier: str, command: str) -> bool:
    """True when the tier runs under Triton's interpreter here (smoke without a GPU); refuses
    every other tier without a GPU."""
    from ..machine import cuda_unavailable

    if tier == "smoke" and cuda_unavailable():
        return True
    _require_gpu(command)
    return False


def _rev(rev: str) -> str:
    import subprocess

    from ..runs.asv import git

    try:
        return git(_repo_root(), "rev-parse", "--verify", f"{rev}^{{commit}}")
    except subprocess.CalledProcessError:
        raise UsageError(f"{rev!r} is not a commit of {_repo_root()}") from None
