"""vLLM code on disk: releases fetched from the package index, commits of a checkout, an install.

A release is fetched once (``specsample vllm fetch X.Y.Z``): ``pip download --no-deps
vllm==X.Y.Z`` (or ``--from-wheel PATH``), then only the MRV2 sampler's module closure
(:mod:`.closure`) is extracted into ``<cache>/vllm/releases/X.Y.Z/files`` with a manifest
(release, wheel name and hash, every file's sha256). Loading checks every hash: a cache entry
that was edited or truncated is an error, never silently used. A commit of a vLLM checkout is
read with ``git show`` (no build of vLLM) into ``<cache>/vllm/commits/<sha>``, the same way.

A GPU box without network gets the cache carried: fetch there on a machine with network into
``SPECSAMPLE_CACHE=$PWD/.vllm-cache`` (git-ignored), carry ``.vllm-cache`` and set the same
variable on the box (README).
"""

from __future__ import annotations

import datetime
import hashlib
import json
import shutil
import subprocess
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from ..base import SubjectError
from ..cache import cache_root
from .closure import ROOT, RULE, closure

MANIFEST = "manifest.json"
FIRST_MRV2_RELEASE = "0.22.0"
# Platform tags tried when the index has no wheel for this machine's own platform: the files
# specsample extracts are Python sources, the same in every platform's wheel.
_FALLBACK_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_24_x86_64", "manylinux_2_17_x86_64")


@dataclass(frozen=True)
class Entry:
    """A verified cache entry: ``root`` holds ``files`` (paths relative to it)."""

    label: str
    root: Path
    manifest: dict

    @property
    def files(self) -> list[str]:
        return sorted(self.manifest["files"])

    @property
    def stand_ins(self) -> dict[str, list[str]]:
        """The modules the closure leaves out, with the names imported from them (loader)."""
        return self.manifest.get("stand_ins", {})

    def provenance(self) -> dict:
        keep = ("kind", "release", "ref", "commit", "location", "wheel", "wheel_sha256", "files", "stand_ins")
        return {k: self.manifest[k] for k in keep if k in self.manifest}


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def releases_dir() -> Path:
    return cache_root() / "vllm" / "releases"


def commits_dir() -> Path:
    return cache_root() / "vllm" / "commits"


# ---- writing an entry ----------------------------------------------------------------------


def _closure_manifest(found) -> dict:
    """A walked closure's part of a manifest."""
    return {
        "closure_rule": RULE,
        "files": {p: _sha256(t.encode("utf-8")) for p, t in sorted(found.files.items())},
        "stand_ins": {m: sorted(names) for m, names in sorted(found.stand_ins.items())},
        "shim_names": sorted(found.shim_names),
        "missing": sorted(found.missing),
    }


def _write_entry(dest: Path, label: str, read, manifest: dict) -> Entry:
    """Extract the closure that ``read`` serves into ``dest`` (atomically) with its manifest."""
    if read(ROOT) is None:
        raise SubjectError(
            f"{label} has no Model Runner V2 rejection sampler ({ROOT}); vLLM ships it from {FIRST_MRV2_RELEASE} on"
        )
    found = closure(read)
    tmp = Path(tempfile.mkdtemp(prefix=dest.name + ".", dir=dest.parent))
    try:
        for path, text in found.files.items():
            out = tmp / "files" / path
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text, encoding="utf-8")
        manifest = dict(
            manifest,
            root=ROOT,
            **_closure_manifest(found),
            extracted_at=datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        )
        (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1, sort_keys=True) + "\n")
        if dest.exists():
            shutil.rmtree(dest)
        tmp.rename(dest)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return load_entry(dest, label)


def extract_wheel(wheel: str | Path, version: str | None = None) -> Entry:
    """Extract a release's closure from a wheel file into the cache; returns the entry."""
    wheel = Path(wheel)
    try:
        data = wheel.read_bytes()
        archive = zipfile.ZipFile(wheel)
        names = set(archive.namelist())
    except (OSError, zipfile.BadZipFile) as exc:
        raise SubjectError(f"{wheel}: not a readable wheel ({type(exc).__name__}: {exc})") from None
    wheel_version = _wheel_version(wheel.name)
    version = version or wheel_version
    if wheel_version and version != wheel_version:
        raise SubjectError(f"{wheel.name} is vllm {wheel_version}, not {version}")
    label = f"vllm=={version}"

    def read(path: str) -> str | None:
        if path not in names:
            return None
        try:
            return archive.read(path).decode("utf-8")
        except (zipfile.BadZipFile, KeyError, UnicodeDecodeError, OSError) as exc:
            raise SubjectError(f"{wheel.name}: corrupt member {path} ({exc})") from None

    dest = releases_dir() / version
    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(dest) + ".lock"):
        return _write_entry(
            dest,
            label,
            read,
            {"kind": "vllm-release", "release": version, "wheel": wheel.name, "wheel_sha256": _sha256(data)},
        )


def _wheel_version(name: str) -> str | None:
    parts = name.split("-")
    return parts[1] if len(parts) > 2 and parts[0] == "vllm" else None


def fetch_release(version: str, *, log=print) -> Entry:
    """``pip download --no-deps vllm==version`` and extract its closure (see the module doc)."""
    with tempfile.TemporaryDirectory(prefix="specsample-wheel-") as tmp:
        cmd = [
            sys.executable,
            "-m",
            "pip",
            "download",
            "--no-deps",
            "--only-binary=:all:",
            "--quiet",
            "--dest",
            tmp,
            f"vllm=={version}",
        ]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0 and "No matching distribution" in proc.stderr:
            platforms = [a for p in _FALLBACK_PLATFORMS for a in ("--platform", p)]
            proc = subprocess.run(
                [*cmd[:4], *platforms, "--python-version", "3.12", "--implementation", "cp", *cmd[4:]],
                capture_output=True,
                text=True,
            )
        if proc.returncode != 0:
            tail = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("WARNING")]
            why = tail[-1] if tail else f"pip exited with {proc.returncode}"
            if "No matching distribution" in proc.stderr or "Could not find a version" in proc.stderr:
                why = f"no such release on the package index ({why})"
            raise SubjectError(f"vllm=={version}: {why}")
        wheels = sorted(Path(tmp).glob("vllm-*.whl"))
        if not wheels:
            raise SubjectError(f"vllm=={version}: pip downloaded no wheel")
        return extract_wheel(wheels[0], version)


# ---- reading an entry ----------------------------------------------------------------------


def load_entry(dest: Path, label: str) -> Entry:
    """The entry at ``dest`` with every file's hash checked; ``SubjectError`` if it is missing,
    incomplete or edited."""
    path = dest / MANIFEST
    try:
        manifest = json.loads(path.read_text())
        files = manifest["files"]
    except FileNotFoundError:
        raise SubjectError(f"{label} is not in the cache ({dest})") from None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SubjectError(f"{label}: corrupt cache entry {path} ({exc}); fetch it again") from None
    for rel, digest in files.items():
        try:
            actual = _sha256((dest / "files" / rel).read_bytes())
        except OSError:
            raise SubjectError(f"{label}: corrupt cache entry: {rel} is missing under {dest}; fetch it again") from None
        if actual != digest:
            raise SubjectError(f"{label}: corrupt cache entry: {rel} does not match its manifest hash; fetch it again")
    rule = manifest.get("closure_rule", 1)
    if rule == 1:
        return _rewalk(dest, label)
    if rule != RULE:
        raise SubjectError(
            f"{label}: cache entry {dest} was extracted under closure rule {rule}, not {RULE}; fetch it again"
        )
    return Entry(label, dest / "files", manifest)


def _rewalk(dest: Path, label: str) -> Entry:
    """An entry extracted under closure rule 1, walked again from its own (verified) files and
    rewritten. Rule 1 followed every import, so its files hold every module rule 2 loads or
    leaves out (vllm==0.34.0 under rule 1 was 1,688 files and 33 MB, most of vLLM; under rule 2,
    7 files). A later rule's entry holds fewer, and is fetched again instead."""
    files = dest / "files"

    def read(path: str) -> str | None:
        file = files / path
        return file.read_text(encoding="utf-8") if file.is_file() else None

    with FileLock(str(dest) + ".lock"):
        manifest = json.loads((dest / MANIFEST).read_text())
        if manifest.get("closure_rule", 1) != 1:  # another process walked it while this one waited
            return load_entry(dest, label)
        keep = {k: v for k, v in manifest.items() if k not in ("files", "stand_ins", "shim_names", "missing")}
        return _write_entry(dest, label, read, dict(keep, rewalked_from_rule=1))


def release(version: str) -> Entry:
    """A fetched release; ``SubjectError`` saying how to fetch it when it is not in the cache."""
    from ...tiers import MRV2_RELEASES

    dest = releases_dir() / version
    if not (dest / MANIFEST).exists():
        if version not in MRV2_RELEASES:  # a typo or a future release: don't send them to fetch it
            raise SubjectError(
                f"vllm=={version} is not in the cache ({dest}) and is not an MRV2 release specsample "
                f"knows ({MRV2_RELEASES[0]} to {MRV2_RELEASES[-1]}); `specsample vllm list --index` "
                f"lists the package index's releases"
            )
        raise SubjectError(
            f"vllm=={version} is not in the cache ({dest}); run `specsample vllm fetch {version}` "
            f"(or point $SPECSAMPLE_CACHE at a cache that has it)"
        )
    return load_entry(dest, f"vllm=={version}")


def index_releases() -> list[str]:
    """The vLLM releases on the package index from :data:`FIRST_MRV2_RELEASE` on, oldest first
    (``pip index versions vllm``); ``SubjectError`` when the index cannot be read."""
    from ...schema import release_key

    proc = subprocess.run(
        # a box without a network answers in seconds, not after pip's default retries
        [sys.executable, "-m", "pip", "index", "versions", "vllm", "--timeout", "15", "--retries", "1"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    found = parse_index_versions(proc.stdout)
    if proc.returncode != 0 or found is None:
        tail = [line for line in proc.stderr.splitlines() if line.strip() and not line.startswith("WARNING")]
        raise SubjectError(
            f"the package index cannot be read (pip index versions vllm: {tail[-1] if tail else proc.returncode})"
        )
    first = release_key(FIRST_MRV2_RELEASE)
    return sorted((v for v in found if release_key(v) >= first), key=release_key)


def parse_index_versions(text: str) -> list[str] | None:
    """The versions of ``pip index versions``' "Available versions: a, b, ..." line (final
    releases only), or ``None`` without one."""
    for line in text.splitlines():
        if line.startswith("Available versions:"):
            versions = [v.strip() for v in line.partition(":")[2].split(",")]
            return [v for v in versions if v and all(p.isdigit() for p in v.partition(".post")[0].split("."))]
    return None


def cached_releases() -> list[str]:
    from ...schema import release_key

    root = releases_dir()
    found = [p.name for p in root.iterdir() if (p / MANIFEST).is_file()] if root.is_dir() else []
    return sorted(found, key=release_key)


# ---- a commit of a vLLM checkout -------------------------------------------------------------


def commit(repo: str | Path, ref: str) -> Entry:
    """``ref`` of the vLLM checkout at ``repo``: its closure read with ``git show`` (cached by sha)."""
    repo = Path(repo)
    label = f"vllm@{ref}"
    if not (repo / ".git").exists() and not (repo / "HEAD").exists():
        raise SubjectError(f"{label}: {repo} is not a git checkout of vLLM")
    proc = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}"],
        capture_output=True,
        text=True,
    )
    if proc.returncode != 0:
        raise SubjectError(f"{label}: no ref {ref!r} in the vLLM checkout {repo}")
    sha = proc.stdout.strip()
    dest = commits_dir() / sha
    if (dest / MANIFEST).exists():
        return load_entry(dest, label)
    tree = subprocess.run(
        ["git", "-C", str(repo), "ls-tree", "-r", "--name-only", sha, "vllm"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    present = set(tree)

    def read(path: str) -> str | None:
        if path not in present:
            return None
        shown = subprocess.run(["git", "-C", str(repo), "show", f"{sha}:{path}"], capture_output=True)
        return shown.stdout.decode("utf-8") if shown.returncode == 0 else None

    dest.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(dest) + ".lock"):
        return _write_entry(
            dest, label, read, {"kind": "vllm-ref", "ref": ref, "commit": sha, "repository": str(repo.resolve())}
        )


# ---- the installed vLLM ---------------------------------------------------------------------


def installed() -> Entry:
    """The vLLM installed in this environment: its closure read from site-packages in place
    (nothing of vLLM is imported; its ``__init__`` does not run)."""
    import importlib.metadata
    import importlib.util

    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        raise SubjectError("vllm: no vLLM is installed in this environment")
    site = Path(next(iter(spec.submodule_search_locations))).parent

    def read(path: str) -> str | None:
        file = site / path
        return file.read_text(encoding="utf-8") if file.is_file() else None

    if read(ROOT) is None:
        raise SubjectError(f"vllm: the installed vLLM ({site / 'vllm'}) has no MRV2 rejection sampler ({ROOT})")
    found = closure(read)
    try:
        version = importlib.metadata.version("vllm")
    except importlib.metadata.PackageNotFoundError:
        version = None
    manifest = {
        "kind": "vllm-installed",
        "release": version,
        "location": str(site),
        **_closure_manifest(found),
    }
    return Entry("vllm", site, manifest)
