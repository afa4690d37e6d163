"""Compile a sampler's kernels for sm_90 on a machine without a GPU and summarise their SASS.

Usage (no TRITON_INTERPRET; CPU tensors only give the launch arguments):
    python scripts/express_sass.py [--sampler express|fast|mrv2|mrv2-pre50939|mrv2-vllm|vllm==X.Y.Z]
        [--mode standard|block] [--draft logits|one-hot] [--num-reqs R] [--placeholder-density PHI]
        [--config NAME] [--set FIELD=VALUE ...] [--skip-masked-vocab-blocks] [--dump DIR]

Each launch of one call of the sampler (one of our subjects with a per-kernel pipeline, from
``specsample.subjects``: express by default; ``--config`` and ``--set`` choose express's or
fast's launch configuration; or a vLLM subject, ``vllm==X.Y.Z`` from the cache or ``vllm@REF``,
whose launcher's module-level kernels are captured) is captured instead of run,
compiled with ``triton.compile`` for a CUDA 9.0 target (ptxas from Triton's bundle), and
disassembled with the bundled ``cuobjdump``. Per kernel it prints: registers per thread, SASS instructions, global
loads (LDG), fp64 instructions (D*), MUFU, warp shuffles, CTA barriers (BAR), and "load rounds": the number of
global loads (in program order) issued after the code has waited on an earlier global load's
scoreboard -- a static count of dependent memory round trips over the whole kernel, every
branch included (a path through the kernel pays the rounds on its own path only).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import os
import re
import subprocess
import sys
import tempfile

assert os.environ.get("TRITON_INTERPRET", "0") in ("", "0"), "unset TRITON_INTERPRET: this compiles for sm_90"

import torch
import triton
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource

from specsample import subjects
from specsample.devtools.tune import SAMPLERS
from specsample.kernels import express, fast, mrv2
from specsample.schema import OUR_SUBJECTS, parse_subject
from specsample.workloads import Workload, make_inputs

# Our subjects whose call is a pipeline of our kernels, and the modules their launchers find
# those kernels in (fast and the mrv2 variants launch mrv2's too).
PIPELINE_SUBJECTS = [name for name in OUR_SUBJECTS if subjects.get(name).pipeline is not None]
KERNEL_MODULES = (mrv2.pipeline, fast, express.pipeline)

BIN = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin")
TARGET = GPUTarget("cuda", 90, 32)
_DTYPES = {
    torch.float32: "fp32",
    torch.float64: "fp64",
    torch.bfloat16: "bf16",
    torch.float16: "fp16",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.bool: "i1",
}


class _Capture:
    def __init__(self, kernel, launches):
        self.kernel, self.launches = kernel, launches

    def __getitem__(self, grid):
        def launch(*args, **kwargs):  # vLLM's launchers pass the kernel's arguments by position
            self.launches.append((self.kernel, grid, dict(zip(self.kernel.arg_names, args), **kwargs)))

        return launch


def _is_vllm(name: str) -> bool:
    try:
        return parse_subject(name).base == "vllm"
    except ValueError:
        return False


def _sampler(name: str) -> str:
    if name in PIPELINE_SUBJECTS or _is_vllm(name):
        return name
    raise argparse.ArgumentTypeError(f"one of {', '.join(PIPELINE_SUBJECTS)}, or a vLLM subject (vllm==X.Y.Z)")


def _vllm_call(name: str, inputs: dict):
    """A vLLM subject's prepared launcher on ``inputs`` (CPU tensors: its input check, which
    wants CUDA tensors outside the interpreter, is left out, since nothing is launched)."""
    from specsample import validation

    check, validation.check_inputs = validation.check_inputs, lambda **inputs: None
    try:
        return subjects.get(name).prepare_inputs(inputs).call
    finally:
        validation.check_inputs = check


@contextlib.contextmanager
def _captured(namespaces: list[dict], launches: list):
    """Every ``*_kernel`` Triton function in ``namespaces`` (module dicts) launches into
    ``launches`` instead of running, until the block ends."""
    saved = [
        (ns, n, k)
        for ns in namespaces
        for n, k in list(ns.items())
        if n.endswith("_kernel") and isinstance(k, triton.JITFunction)
    ]
    try:
        for ns, n, k in saved:
            ns[n] = _Capture(k, launches)
        yield
    finally:
        for ns, n, k in saved:
            ns[n] = k


def _compile(kernel, kwargs, specialize: bool = True):
    # As the JIT specializes a launch: pointers 16-byte aligned and integers divisible by 16 get
    # tt.divisibility=16 (vectorized loads), an integer equal to 1 becomes a constant.
    # specialize=False (--no-specialize): the unspecialized compile of the earlier notes (scalar loads).
    signature, constexprs, attrs = {}, {}, {}
    opts = {k: kwargs.pop(k) for k in ("num_warps", "num_stages", "maxnreg") if k in kwargs}
    for i, name in enumerate(kernel.arg_names):
        value = kwargs[name]
        if i in kernel.constexprs or value is None:  # the JIT makes a None argument a constexpr too
            signature[name] = "constexpr"
            constexprs[name] = value
        elif isinstance(value, torch.Tensor):
            signature[name] = "*" + _DTYPES[value.dtype]
            if value.data_ptr() % 16 == 0 and specialize:
                attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(value, bool):
            signature[name] = "i1"
        elif isinstance(value, int) and value == 1 and specialize:
            signature[name] = "constexpr"
            constexprs[name] = 1
        elif isinstance(value, int):
            signature[name] = "i64" if abs(value) >= 2**31 else "i32"
            if value % 16 == 0 and specialize:
                attrs[(i,)] = [["tt.divisibility", 16]]
        elif isinstance(value, float):
            signature[name] = "fp32"
        else:
            raise TypeError(f"{name}: {type(value)}")
    src = ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs or None)
    return triton.compile(src, target=TARGET, options=opts)


def _cuobjdump(cubin: bytes, flag: str) -> str:
    """The bundled ``cuobjdump FLAG`` on a cubin, as text."""
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(cubin)
        f.flush()
        return subprocess.run(
            [os.path.join(BIN, "cuobjdump"), flag, f.name], check=True, capture_output=True, text=True
        ).stdout


def _sass(cubin: bytes) -> list[tuple[str, int]]:
    """(instruction text, control word) per instruction."""
    text = _cuobjdump(cubin, "-sass")
    out, pending = [], None
    for line in text.splitlines():
        m = re.match(r"\s*/\*[0-9a-f]{4,}\*/\s*(.*?);?\s*/\* (0x[0-9a-f]{16}) \*/", line)
        if m:
            pending = m.group(1).strip().rstrip(";").strip()
            continue
        m = re.match(r"\s*/\* (0x[0-9a-f]{16}) \*/", line)
        if m and pending is not None:
            out.append((pending, int(m.group(1), 16)))
            pending = None
    return out


def _control(hi: int) -> tuple[int, int]:
    # Volta+ control bits (bits 105.. of the 128-bit word, i.e. 41.. of the high 64): stall 4,
    # yield 1, write barrier 3, read barrier 3, wait mask 6.
    ctrl = hi >> 41
    return (ctrl >> 5) & 7, (ctrl >> 11) & 0x3F  # write barrier (7 = none), wait mask


def registers(cubin: bytes) -> dict:
    """Registers per thread and stack bytes (spills) from ``cuobjdump -res-usage``: with the warps,
    the registers set how many programs an SM holds."""
    text = _cuobjdump(cubin, "-res-usage")
    return dict(reg=int(re.search(r"REG:(\d+)", text).group(1)), stack=int(re.search(r"STACK:(\d+)", text).group(1)))


def summarise(insts):
    ops = [re.sub(r"^@!?U?P[T0-9]+\s+", "", t).split()[0] for t, _ in insts]
    n_ldg = sum(o.startswith("LDG") for o in ops)
    fp64 = sum(bool(re.match(r"D(ADD|MUL|FMA|SETP|MNMX)", o)) for o in ops)
    mufu = sum(o.startswith("MUFU") for o in ops)
    shfl = sum(o.startswith("SHFL") for o in ops)
    bar = sum(o.startswith("BAR") for o in ops)  # CTA barriers (cross-warp reductions and scans)
    # load rounds: barriers written by LDGs still unwaited; a wait on one of them, then a new LDG,
    # starts a new round.
    ldg_barriers, waited, rounds = set(), False, 0
    for (t, hi), o in zip(insts, ops):
        wb, wait = _control(hi)
        if wait & sum(1 << b for b in ldg_barriers):
            waited = True
            ldg_barriers -= {b for b in list(ldg_barriers) if wait & (1 << b)}
        if o.startswith("LDG"):
            if waited or rounds == 0:
                rounds += 1
                waited = False
            if wb != 7:
                ldg_barriers.add(wb)
    # load depth: an LDG's depth is 1 + the deepest LDG whose scoreboard was waited on before it
    # (program order, every branch flattened: conservative). Unlike load_rounds, a late wait on a
    # round-1 load between round-2 loads does not count as a round of its own.
    sb_depth, current, depth = {}, 0, 0
    for (t, hi), o in zip(insts, ops):
        wb, wait = _control(hi)
        for b in [b for b in sb_depth if wait & (1 << b)]:
            current = max(current, sb_depth.pop(b))
        if o.startswith("LDG"):
            depth = max(depth, current + 1)
            if wb != 7:
                sb_depth[wb] = max(sb_depth.get(wb, 0), current + 1)
    return dict(
        sass=len(insts), ldg=n_ldg, fp64=fp64, mufu=mufu, shfl=shfl, bar=bar, load_rounds=rounds, load_depth=depth
    )


def timeline(insts):
    """Program-order lines of the loads, the waits on them, branches and exits (for reading a path)."""
    lines, ldg_barriers = [], {}
    for i, (t, hi) in enumerate(insts):
        wb, wait = _control(hi)
        op = re.sub(r"^@!?U?P[T0-9]+\s+", "", t).split()[0]
        waited = [b for b in ldg_barriers if wait & (1 << b)]
        if waited:
            lines.append(f"{i:5d}   wait on LDG sb{waited}")
            for b in waited:
                del ldg_barriers[b]
        if op.startswith("LDG"):
            lines.append(f"{i:5d} {t}  -> sb{wb}")
            if wb != 7:
                ldg_barriers[wb] = i
        elif op.startswith(("BRA", "EXIT", "BSSY", "BSYNC", "CALL", "RET")) or op == "WARPSYNC":
            lines.append(f"{i:5d} {t}")
    return lines


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument(
        "--sampler",
        default="express",
        type=_sampler,
        help="whose kernels: " + ", ".join(PIPELINE_SUBJECTS) + ", or vllm==X.Y.Z",
    )
    ap.add_argument("--mode", default="standard")
    ap.add_argument("--draft", default="logits")
    ap.add_argument("--num-reqs", dest="reqs", type=int, default=1)
    ap.add_argument("--placeholder-density", "--phi", dest="phi", type=float, default=0.0)
    ap.add_argument("--target-dtype", default="float32", help="torch dtype of the target logits")
    ap.add_argument("--draft-dtype", default="bfloat16", help="torch dtype of the draft logits")
    ap.add_argument(
        "--config",
        default="small",
        choices=sorted({name for _, configs in SAMPLERS.values() for name in configs}),
        help="express's or fast's launch configuration (mrv2 has none)",
    )
    ap.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="FIELD=VALUE",
        help="override a Config field of --config (repeatable), e.g. --set stats_blocks=4",
    )
    ap.add_argument(
        "--skip-masked-vocab-blocks",
        action="store_true",
        help="the masked-block skip on (vLLM's skip_masked_vocab_blocks path; express and vLLM 0.34.0+)",
    )
    ap.add_argument("--dump", default=None, help="write each kernel's SASS, load timeline and PTX into this folder")
    ap.add_argument("--no-specialize", action="store_true", help="no alignment / divisibility specialization")
    ap.add_argument(
        "--dependent-launch",
        action="store_true",
        help="compile as on an sm_90 GPU, with programmatic dependent launch (a CPU pipeline launches without it)",
    )
    args = ap.parse_args(argv)
    if (
        args.skip_masked_vocab_blocks
        and "skip_masked_vocab_blocks" not in subjects.get(args.sampler).capabilities.paths
    ):
        ap.error(f"--skip-masked-vocab-blocks: {args.sampler} has no skip_masked_vocab_blocks path")
    w = Workload(
        num_reqs=args.reqs,
        num_speculative_steps=4,
        vocab_size=151936,
        mode=args.mode,
        draft=args.draft,
        placeholder_density=args.phi,
        target_dtype=getattr(torch, args.target_dtype),
        draft_dtype=getattr(torch, args.draft_dtype),
        skip_masked_vocab_blocks=args.skip_masked_vocab_blocks,
    )
    inputs = make_inputs(w, device="cpu")
    options = {}
    if args.sampler in SAMPLERS:
        configs = SAMPLERS[args.sampler][1]
        if args.config not in configs:
            ap.error(f"--config: {args.sampler} has {', '.join(configs)}")
        config = configs[args.config]
        for item in args.set:
            field, _, value = item.partition("=")
            kind = type(getattr(config, field))
            config = dataclasses.replace(config, **{field: value == "True" if kind is bool else kind(value)})
        options["config"] = config
    elif args.set:
        ap.error(f"--set: {args.sampler} has no launch configuration")
    if _is_vllm(args.sampler):
        if args.set or args.dependent_launch:
            ap.error(f"--set, --dependent-launch: {args.sampler} has no launch configuration")
        call = _vllm_call(args.sampler, inputs)
        namespaces = [call.fn.func.__globals__]  # the launcher's module: its kernels
    else:
        pipeline = subjects.get(args.sampler).pipeline

        def call():
            pipeline(**inputs, **options).run()

        namespaces = [module.__dict__ for module in KERNEL_MODULES]
    launches = []
    with _captured(namespaces, launches):
        call()
    for kernel, grid, kwargs in launches:
        if args.dependent_launch:
            kwargs = dict(kwargs, PDL=True)
        compiled = _compile(kernel, dict(kwargs), specialize=not args.no_specialize)
        insts = _sass(compiled.asm["cubin"])
        s = dict(**registers(compiled.asm["cubin"]), smem=compiled.metadata.shared, **summarise(insts))
        print(f"{kernel.__name__:28s} grid={grid!s:14s} " + " ".join(f"{k}={v}" for k, v in s.items()), flush=True)
        if args.dump:
            os.makedirs(args.dump, exist_ok=True)
            with open(os.path.join(args.dump, kernel.__name__ + ".sass"), "w") as f:
                f.write("\n".join(f"{i:5d} {t}" for i, (t, _) in enumerate(insts)) + "\n")
            with open(os.path.join(args.dump, kernel.__name__ + ".loads"), "w") as f:
                f.write("\n".join(timeline(insts)) + "\n")
            with open(os.path.join(args.dump, kernel.__name__ + ".ptx"), "w") as f:
                f.write(compiled.asm["ptx"])


if __name__ == "__main__":
    sys.exit(main())
