"""vLLM-shaped trees that the tests build themselves (no vLLM source is in this repository).

:func:`make_wheel` writes a wheel-shaped zip (``vllm-<version>-py3-none-any.whl``) whose
``vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py`` is generated here: a launcher
with the MRV2 signature (or an older or broken one) that computes its result with specsample's
own PyTorch reference, plus a small Triton kernel in a helper module, so the loader's Triton
path (source read back by ``triton.jit``, the ``vllm.triton_utils`` shim) is exercised too.
Knobs make a tree misbehave in the ways a real release can: a module that raises on import, a
missing module, an older signature, a launcher that kills its process or hangs. ``cache=True``
gives it 0.34.0's shape: the draft logits as ``draft_logits_cache``, from a module whose top
imports reach code that must never load (:data:`CACHE_SOURCE`). ``gumbel="unsalted"`` or
``"flag"`` adds a drafting sampler, ``gumbel_sample`` in :data:`GUMBEL` (written here: Gumbel-max
over specsample's Philox noise keyed by ``(seed, position)``, the noise the launcher, then
specsample's batched reference, resamples with), without or with the ``is_drafting`` salt;
``"processed"`` is the unsalted one with the cache arguments of 0.22.0 to 0.27.1
(``output_processed_logits``, ``output_processed_logits_col``).
"""

from __future__ import annotations

import subprocess
import textwrap
import zipfile
from pathlib import Path

ROOT = "vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py"
HELPER = "vllm/v1/worker/gpu/sample/helper.py"

_HELPER_SOURCE = """
from vllm.triton_utils import tl, triton


@triton.jit
def _copy_kernel(src_ptr, dst_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(dst_ptr + offs, tl.load(src_ptr + offs, mask=offs < n), mask=offs < n)


def copy(src, dst):
    _copy_kernel[(triton.cdiv(src.numel(), 1024),)](src, dst, src.numel(), BLOCK=1024)
    return dst
"""

GUMBEL = "vllm/v1/worker/gpu/sample/gumbel.py"


def gumbel_source(kind: str) -> str:
    """Our drafting sampler: ``argmax(logits / T + G)`` with ``G`` the Gumbel noise of
    ``philox.randint(seed, position)`` (plus a salt under ``is_drafting``), the draft logits
    written to the cache column. Without the salt it shares the resample step's stream.
    ``kind``: "unsalted", "flag" (the salt) or "processed" (unsalted, older cache names)."""
    flag = kind == "flag"
    cache, cache_col = (
        ("output_processed_logits", "output_processed_logits_col")
        if kind == "processed"
        else ("logits_cache", "logits_cache_col")
    )
    flag_arg = "is_drafting, " if flag else ""
    salt = "(1 << 30) if is_drafting else 0" if flag else "0"
    return f"""
import torch

from vllm.triton_utils import tl, triton


def noise_stream():
    # Reached by the launcher, so the closure keeps this module (as a real verifier reaches its
    # Gumbel helpers).
    return "philox(seed, pos)"


def gumbel_sample(logits, expanded_idx_mapping, temperature, seed, pos, apply_temperature,
                  {flag_arg}{cache}=None, {cache_col}=None, use_fp64=False):
    from specsample.reference import philox
    from specsample.reference.mrv2 import gumbel_noise

    slot = expanded_idx_mapping.long()
    if {cache} is not None:
        {cache}[slot, int({cache_col})] = logits
    x = logits.float()
    if apply_temperature:
        x = x / temperature[slot].float()[:, None]
    shifted = pos.to(torch.int64) + ({salt})
    words = philox.randint(seed[slot], shifted.to(torch.int32))
    return (x + gumbel_noise(words, logits.shape[-1])).argmax(dim=-1)
"""


CACHE = "vllm/v1/worker/gpu/spec_decode/draft_cache.py"
ROWS = "vllm/utils/rows.py"
# Only what rejection_sample reaches may load: the cache's row helper (a Triton function) and the
# host function it calls. The top of the module also imports a runtime that raises on import, for
# a method of a class nothing builds and for an annotation.
CACHE_SOURCE = """
from vllm.distributed.state import get_group
from vllm.triton_utils import tl, triton
from vllm.utils.rows import row_count
from vllm.v1.worker.gpu.batch import Batch


@triton.jit
def cache_row(req_state_idx):
    return req_state_idx.to(tl.int64)


def check_rows(values, row_mapping):
    assert row_count(values) == values.shape[0] and (row_mapping is None or row_mapping.ndim == 1)


class DraftCache:
    def __init__(self, num_rows):
        self.group = get_group()

    def stale(self, batch: Batch) -> Batch | None:
        return None
"""
RUNTIME = {
    "vllm/distributed/state.py": "raise RuntimeError('the distributed runtime must not load')\n",
    "vllm/v1/worker/gpu/batch.py": "raise RuntimeError('the input batch must not load')\n",
    ROWS: "def row_count(values):\n    return int(values.shape[0])\n",
}

_SIGNATURES = {
    # the MRV2 launcher's arguments after PR #50939, plus a newer one with a default
    "current": "use_fp64=False, use_block_verification=False, watermark_key=None",
    # before block verification (vLLM 0.22.0 to 0.24.0)
    "no-block": "use_fp64=False",
    # an argument specsample cannot fill
    "unfillable": "use_fp64=False, use_block_verification=False, *, contexts",
    # 0.30.0's shape: watermarking
    "watermark": "use_fp64=False, use_block_verification=False, contexts=None, watermarking=None, watermark_key=None",
    # 0.33.0's shape: watermarking with a skip mask, and FLy
    "fly": (
        "use_fp64=False, use_block_verification=False, contexts=None, watermarking=None, "
        "watermarking_skip_mask=None, watermark_key=None, fly_window_size=0, fly_entropy_threshold=0.3, "
        "fly_entropy_top_k=3"
    ),
    # 0.34.0's shape (with cache=True): and masked-block skipping
    "paths": (
        "use_fp64=False, use_block_verification=False, contexts=None, watermarking=None, "
        "watermarking_skip_mask=None, watermark_key=None, fly_window_size=0, fly_entropy_threshold=0.3, "
        "fly_entropy_top_k=3, skip_masked_vocab_blocks=False"
    ),
}
# What a launcher with path arguments received at its last call (read by the tests).
_PATH_ARGS = (
    "contexts",
    "watermarking",
    "watermark_key",
    "fly_window_size",
    "fly_entropy_threshold",
    "fly_entropy_top_k",
    "skip_masked_vocab_blocks",
)


def launcher_source(
    signature: str = "current", *, misbehave: str = "", marker: int = 0, cache: bool = False, gumbel: str = ""
) -> str:
    """The generated rejection_sampler_utils.py. ``misbehave``: "" (correct), "exit" (the
    process dies when any draft is -1), "hang" (sleeps forever when any draft is -1),
    "raise-on-import", "missing-module" (imports a vllm module the tree lacks), "bad-shim" (takes
    a name the shim does not provide), "fly-no-entropy" (FLy defers without its entropy gate),
    "watermark-unstable" (watermarked draws change from call to call). ``marker`` is returned in ``MARKER``, to tell two loaded
    versions apart."""
    imports = [
        "import os",
        "import time",
        "import torch",
        "from vllm.triton_utils import tl, triton",
        "from vllm.v1.worker.gpu.sample.helper import copy",
    ]
    if cache:
        imports.append("from vllm.v1.worker.gpu.spec_decode.draft_cache import DraftCache, check_rows")
    if gumbel:
        imports.append("from vllm.v1.worker.gpu.sample.gumbel import noise_stream")
    if misbehave == "missing-module":
        imports.append("from vllm.v1.worker.gpu.sample.not_there import nothing")
    if misbehave == "bad-shim":
        imports.append("from vllm.triton_utils import gluon")
    path_args = [a for a in _PATH_ARGS if f"{a}=" in _SIGNATURES[signature]]
    body = f"""
MARKER = {marker}
RECEIVED = {{}}
CALLS = [0]
if {misbehave == "raise-on-import"!r}:
    raise RuntimeError("this release cannot be imported")


def rejection_sample(target_logits, {"draft_logits_cache: DraftCache | None" if cache else "draft_logits"},
                     draft_sampled, cu_num_logits, pos, idx_mapping,
                     expanded_idx_mapping, expanded_local_pos, temperature, seed, num_speculative_steps,
                     synthetic_conditional_rates=None, {_SIGNATURES[signature]}):
    from specsample.reference import rejection_sample as reference
    if {bool(gumbel)!r}:
        # the batched reference: the same draws, fast enough for the exactness trials
        from specsample.reference.batched import rejection_sample as reference
        assert noise_stream()

    RECEIVED.clear()
    RECEIVED.update({{name: value for name, value in locals().items() if name in {path_args!r}}})
    CALLS[0] += 1
    if {cache!r}:
        draft_logits = None
        if draft_logits_cache is not None:
            check_rows(draft_logits_cache.values, draft_logits_cache.row_mapping)
            RECEIVED["row_mapping"] = draft_logits_cache.row_mapping
            draft_logits = draft_logits_cache.values
            if draft_logits_cache.row_mapping is not None:
                # one rank's rows: back to request-slot order for the reference
                rows = draft_logits_cache.row_mapping.long()
                draft_logits = draft_logits.new_zeros(rows.numel(), *draft_logits.shape[1:])
                draft_logits[rows >= 0] = draft_logits_cache.values[rows[rows >= 0]]
        if {misbehave == "left-out"!r}:
            globals()["DraftCache"](4)  # reaches the left-out runtime in a way no import shows

    if bool((draft_sampled < 0).any()):
        if {misbehave == "exit"!r}:
            os._exit(42)
        if {misbehave == "hang"!r}:
            time.sleep(3600)
    kwargs = dict(synthetic_conditional_rates=synthetic_conditional_rates, use_fp64=use_fp64)
    if {signature != "no-block"!r}:
        kwargs["use_block_verification"] = use_block_verification
    sampled, num_sampled = reference(target_logits, draft_logits, draft_sampled, cu_num_logits, pos,
                                     idx_mapping, expanded_idx_mapping, expanded_local_pos, temperature,
                                     seed, num_speculative_steps, **kwargs)
    fly = locals().get("fly_window_size", 0)
    if fly:
        # FLy: the accepted prefix by FLy's rules ("fly-no-entropy": deferring wherever it fits,
        # the entropy gate ignored, a planted violation)
        from specsample.reference.fly import fly_outcomes, fly_prefix

        inputs = dict(target_logits=target_logits, draft_logits=draft_logits, draft_sampled=draft_sampled,
                      cu_num_logits=cu_num_logits, pos=pos, idx_mapping=idx_mapping, temperature=temperature,
                      seed=seed)
        cu = cu_num_logits.tolist()
        for r, o in enumerate(fly_outcomes(inputs, fly, fly_entropy_threshold, fly_entropy_top_k)):
            tau = o.tau
            if {misbehave == "fly-no-entropy"!r}:
                drafts = draft_sampled[cu[r] + 1 : cu[r + 1]].tolist()
                tau, _ = fly_prefix(list(o.native), [d >= 0 for d in drafts], [True] * len(drafts), fly)
            sampled[r, :tau] = draft_sampled[cu[r] + 1 : cu[r] + 1 + tau]
            sampled[r, tau] = 0
            num_sampled[r] = tau + 1
    if locals().get("contexts") is not None:
        # watermarking: the last token moves by a function of the key ("watermark-unstable": and
        # of the call count, a planted violation)
        last = (num_sampled.long() - 1, )
        rows = torch.arange(num_sampled.numel())
        shift = watermark_key % 7 + 1 + ({misbehave == "watermark-unstable"!r} and CALLS[0])
        sampled[rows, last[0]] = (sampled[rows, last[0]] + shift) % target_logits.shape[1]
    return copy(sampled.contiguous(), torch.empty_like(sampled)), num_sampled
"""
    return "\n".join(imports) + "\n" + textwrap.dedent(body)


def tree_files(
    signature: str = "current", *, misbehave: str = "", marker: int = 0, cache: bool = False, gumbel: str = ""
) -> dict[str, str]:
    """The tree as {path: text}; its package __init__ files raise, so loading must not run them."""
    return {
        **({CACHE: CACHE_SOURCE, **RUNTIME} if cache else {}),
        **({GUMBEL: gumbel_source(gumbel)} if gumbel else {}),
        "vllm/__init__.py": "raise RuntimeError('vllm/__init__.py must not run: it imports all of vLLM')\n",
        "vllm/v1/__init__.py": "raise RuntimeError('package __init__ ran')\n",
        "vllm/triton_utils/__init__.py": "raise RuntimeError('the real vllm.triton_utils must not load')\n",
        "vllm/unrelated/big.py": "raise RuntimeError('not in the closure')\n",
        HELPER: _HELPER_SOURCE,
        ROOT: launcher_source(signature, misbehave=misbehave, marker=marker, cache=cache, gumbel=gumbel),
    }


def make_wheel(directory: Path, version: str, files: dict[str, str] | None = None, **knobs) -> Path:
    """A wheel-shaped zip of a generated tree (see :func:`tree_files`)."""
    path = Path(directory) / f"vllm-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for name, text in (files if files is not None else tree_files(**knobs)).items():
            archive.writestr(name, text)
    return path


def make_checkout(directory: Path, commits: list[dict[str, str]]) -> tuple[Path, list[str]]:
    """A git repository with one commit per tree in ``commits``; returns it and the hashes."""
    repo = Path(directory)
    repo.mkdir(parents=True, exist_ok=True)
    git = [
        "git",
        "-C",
        str(repo),
        "-c",
        "user.name=t",
        "-c",
        "user.email=t@example.invalid",
        "-c",
        "commit.gpgsign=false",
    ]
    subprocess.run([*git, "init", "-q", "-b", "main"], check=True)
    shas = []
    for files in commits:
        for name, text in files.items():
            out = repo / name
            out.parent.mkdir(parents=True, exist_ok=True)
            out.write_text(text)
        subprocess.run([*git, "add", "-A"], check=True)
        subprocess.run([*git, "commit", "-q", "-m", f"tree {len(shas)}"], check=True)
        shas.append(
            subprocess.run([*git, "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
        )
    return repo, shas
