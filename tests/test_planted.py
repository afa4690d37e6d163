"""The planted-regression knob (specsample.kernels.planted): outputs unchanged, read at
construction, compiled out at 0."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from specsample import subjects
from specsample.kernels import fast, mrv2, planted
from specsample.workloads import Workload, make_inputs

REPO = Path(__file__).resolve().parents[1]

# Block verification with draft logits: the residual-mass kernel runs (rows 1..K-1), also
# around placeholders; two vocab blocks.
BLOCK_LOGITS = Workload(num_reqs=3, num_speculative_steps=3, vocab_size=9000, mode="block", draft="logits",
                        placeholder_density=0.25, placeholder_pattern="random")  # fmt: skip
SMALL_BLOCK_LOGITS = Workload(num_reqs=4, num_speculative_steps=3, vocab_size=300, mode="block", draft="logits",
                              placeholder_density=0.25, placeholder_pattern="random")  # fmt: skip


def _emitted(sampled: torch.Tensor, num_sampled: torch.Tensor) -> list[list[int]]:
    return [sampled[r, : int(num_sampled[r])].tolist() for r in range(sampled.shape[0])]


def test_knob_leaves_outputs_bit_identical(device, monkeypatch):
    inputs = make_inputs(SMALL_BLOCK_LOGITS, device=device)
    outputs = {}
    for iters in (0, 8):
        monkeypatch.setattr(planted, "BALLAST_ITERS", iters)
        sampled, num_sampled = subjects.get("mrv2").run(SMALL_BLOCK_LOGITS, device, inputs=inputs)
        outputs[iters] = (_emitted(sampled, num_sampled), num_sampled.tolist())
    assert outputs[0] == outputs[8]


def test_pipeline_reads_the_knob_at_construction_and_runs_the_ballast(device, monkeypatch):
    inputs = make_inputs(BLOCK_LOGITS, device=device)
    assert mrv2.Pipeline(**inputs).ballast is None  # the committed value, 0: no scratch
    monkeypatch.setattr(planted, "BALLAST_ITERS", 8)
    pipe = mrv2.Pipeline(**inputs)
    assert pipe.ballast_iters == 8 and pipe.ballast.shape == (pipe.num_logits, pipe.num_blocks)
    pipe.ballast.fill_(float("nan"))
    pipe.run()
    # every BALLAST_EVERY-th program (by row + block) stored the sum of acc = acc * 0.5 + 1
    # (eight times) from (block * 8192 + j) + row; the others never ran the loop
    acc = (np.arange(mrv2.VOCAB_BLOCK_SIZE, dtype=np.float64)[None, None, :] + np.arange(pipe.num_logits)[:, None, None]
           + mrv2.VOCAB_BLOCK_SIZE * np.arange(pipe.num_blocks)[None, :, None])
    for _ in range(8):
        acc = acc * 0.5 + 1.0
    paying = (np.arange(pipe.num_logits)[:, None] + np.arange(pipe.num_blocks)[None, :]) % planted.BALLAST_EVERY == 0
    assert planted.BALLAST_EVERY > 1 and 0 < paying.sum() < paying.size
    got = pipe.ballast.cpu().numpy()
    np.testing.assert_allclose(got[paying], acc.sum(axis=2)[paying], rtol=1e-5)
    assert np.isnan(got[~paying]).all()
    # only the residual-mass kernel has it: other modes never pay
    standard = make_inputs(Workload(num_reqs=3, num_speculative_steps=3, vocab_size=300), device=device)
    assert mrv2.Pipeline(**standard).ballast_iters == 0
    # nor does the fast variant (planted.VARIANTS), whose points are the validation's controls
    assert "fast" not in planted.VARIANTS and fast.Pipeline(**inputs).ballast_iters == 0


def test_knob_at_zero_compiles_exactly_as_without_it():
    """PTX for sm_90 (Triton's own ptxas; no GPU needed) of the residual-mass kernel at
    BALLAST_ITERS=0 equals that of the same kernel with the knob's lines removed, up to debug
    line info; at 8 the loop is there."""
    pytest.importorskip("triton.backends.nvidia")
    script = textwrap.dedent(
        r'''
        import importlib.util, inspect, re, sys, tempfile
        from pathlib import Path
        import triton
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource
        from specsample.kernels import mrv2

        TYPES = {"target_logits_ptr": "*fp32", "draft_logits_ptr": "*bf16", "draft_sampled_ptr": "*i64",
                 "expanded_idx_mapping_ptr": "*i32", "expanded_local_pos_ptr": "*i32"}

        def ptx(fn, consts):
            sig, cx = {}, {}
            for i, name in enumerate(inspect.signature(fn.fn).parameters):
                if name in consts:
                    sig[name], cx[(i,)] = "constexpr", consts[name]
                else:
                    sig[name] = TYPES.get(name, "*fp32") if name.endswith("_ptr") else "i64"
            k = triton.compile(ASTSource(fn, sig, cx), target=GPUTarget("cuda", 90, 32), options={"num_warps": 8})
            lines = [l.split("//")[0].rstrip() for l in k.asm["ptx"].splitlines()]
            lines = [l for l in lines if l.strip() and not re.match(r"\s*\.(loc|file)\b", l)]
            return lines[: next((i for i, l in enumerate(lines) if ".section" in l and "debug" in l), len(lines))]

        consts = dict(PLACEHOLDER_FIX=True, BLOCK_V=8192, NUM_BLOCKS_P2=32)
        src = inspect.getsource(mrv2._residual_mass_kernel.fn)
        stripped = re.sub(r"    # TEST-ONLY.*\n(    #.*\n)*    ballast_ptr=None,\n    BALLAST_ITERS: tl.constexpr = 0,\n"
                          r"    BALLAST_EVERY: tl.constexpr = 1,\n", "", src)
        stripped = re.sub(r"    if BALLAST_ITERS > 0:\n(        .*\n)+", "", stripped)
        assert "BALLAST" not in stripped and "ballast" not in stripped, stripped
        path = Path(tempfile.mkdtemp()) / "without_knob.py"
        path.write_text("import triton\nimport triton.language as tl\n"
                        "from specsample.kernels.mrv2 import _global_lse\n" + stripped)
        spec = importlib.util.spec_from_file_location("without_knob", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        without = ptx(module._residual_mass_kernel, consts)
        at_zero = ptx(mrv2._residual_mass_kernel, dict(consts, ballast_ptr=None, BALLAST_ITERS=0, BALLAST_EVERY=1))
        at_eight = ptx(mrv2._residual_mass_kernel, dict(consts, BALLAST_ITERS=8, BALLAST_EVERY=4))
        fma = lambda lines: sum("fma" in l for l in lines)
        print(len(without), len(at_zero), fma(without), fma(at_eight))
        sys.exit(0 if at_zero == without and fma(at_eight) >= fma(without) + 8 * 32 else 1)
        '''
    )
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), env.get("PYTHONPATH", "")) if p)
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0 and ("ptxas" in proc.stderr or "GPUTarget" in proc.stderr):
        pytest.skip(f"cannot compile for sm_90 here: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stdout + proc.stderr
