#!/usr/bin/env bash
# A flashinfer-python wheel stripped to what `import flashinfer` and the JIT build of its sampling
# module (chain_speculative_sampling, the `flashinfer` subjects) need, so that a release whose
# wheel is over the GPU box's 64 MiB carry fits: 0.7.2 is 65.2 MB, stripped 24 MB. Keeps every
# .py file and non-source file of the package, the metadata (version and entry points unchanged,
# RECORD rewritten with the kept files' hashes),
# flashinfer/data/include, the sampling sources of flashinfer/data/csrc (sampling.cu, renorm.cu,
# flashinfer_sampling_binding.cu and the two csrc headers they include) and the vendored CCCL
# headers (cub, libcudacxx, thrust: put on nvcc's -I path ahead of the toolkit's). Drops the rest
# of csrc, cutlass, spdlog and the kernel sources outside data/. Needs apache-tvm-ffi beside it
# (0.7.2: >=0.1.11,<0.2); its optional dependencies (cutlass-dsl, cudnn-frontend, cuda-tile,
# nccl4py) are imported lazily or not at all on this path.
# Usage: contrib/offline-gpu-box/flashinfer-wheel.sh VERSION OUTDIR   (the stripped wheel is written to OUTDIR)
set -euo pipefail
ver=${1:?usage: flashinfer-wheel.sh VERSION OUTDIR}
out=${2:?usage: flashinfer-wheel.sh VERSION OUTDIR}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
python3 -m pip download -q --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 -d "$tmp" "flashinfer-python==$ver"
mkdir -p "$out"
python3 - "$tmp"/flashinfer_python-"$ver"-*.whl "$out" <<'PY'
import base64, hashlib, os, sys, zipfile

wheel, out = sys.argv[1], sys.argv[2]
name = os.path.basename(wheel)
dist_info = name.split("-py3")[0] + ".dist-info/"
data = "flashinfer/data/"
csrc = {data + "csrc/" + f for f in (
    "sampling.cu", "renorm.cu", "flashinfer_sampling_binding.cu", "sampling_utils.h", "tvm_ffi_utils.h")}
cccl = tuple(data + "cccl/" + p for p in ("cub/cub/", "libcudacxx/include/", "thrust/thrust/", "LICENSE"))
sources = (".cu", ".cuh", ".cc", ".cpp", ".c", ".h", ".hpp", ".inl", ".jinja", ".ptx")


def keep(path: str) -> bool:
    if path.startswith(dist_info):
        return not path.endswith("RECORD")
    if path.startswith(data):
        return path.startswith(data + "include/") or path in csrc or path.startswith(cccl)
    return not path.endswith(sources)


source = zipfile.ZipFile(wheel)
target = os.path.join(out, name)
record = []
with zipfile.ZipFile(target, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as stripped:
    for info in source.infolist():
        if info.filename.endswith("/") or not keep(info.filename):
            continue
        body = source.read(info)
        entry = zipfile.ZipInfo(info.filename, date_time=info.date_time)
        entry.external_attr, entry.compress_type = info.external_attr, zipfile.ZIP_DEFLATED
        stripped.writestr(entry, body)
        digest = base64.urlsafe_b64encode(hashlib.sha256(body).digest()).rstrip(b"=").decode()
        record.append(f"{info.filename},sha256={digest},{len(body)}")
    record.append(f"{dist_info}RECORD,,")
    entry = zipfile.ZipInfo(dist_info + "RECORD", date_time=(2026, 1, 1, 0, 0, 0))
    entry.compress_type = zipfile.ZIP_DEFLATED
    stripped.writestr(entry, "\n".join(record) + "\n")
kept = zipfile.ZipFile(target).infolist()
print(f"{target}: {os.path.getsize(target) / 1e6:.1f} MB, {len(kept)} files "
      f"(the release's wheel: {os.path.getsize(wheel) / 1e6:.1f} MB, {len(source.infolist())} files)")
PY
