"""The planted-regression knob: mrv2's Pipeline ``ballast_iters`` (set from
``specsample/subjects/ours.py``'s ``PLANTED_BALLAST_ITERS``, 0 in every real commit). Outputs
unchanged, the ballast loop really runs where it is planted and only there, compiled out at 0,
and a planted commit (specsample.track.signoff.validate.planted_commit) changes that one line
and nothing else."""

from __future__ import annotations

import inspect
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch
from conftest import compiler_env
from gitrepo import GIT, make_repo

from specsample import subjects
from specsample.kernels import fast, mrv2
from specsample.subjects import commits, ours
from specsample.track.asv_runs import git
from specsample.track.signoff import validate
from specsample.workloads import Workload, make_inputs

REPO = Path(__file__).resolve().parents[1]
PLANTED_ITERS = 16

# Block verification with draft logits: the residual-mass kernel runs (rows 1..K-1), also
# around placeholders; two vocab blocks.
BLOCK_LOGITS = Workload(
    num_reqs=3,
    num_speculative_steps=3,
    vocab_size=9000,
    mode="block",
    draft="logits",
    placeholder_density=0.25,
    placeholder_pattern="random",
)
SMALL_BLOCK_LOGITS = Workload(
    num_reqs=4,
    num_speculative_steps=3,
    vocab_size=300,
    mode="block",
    draft="logits",
    placeholder_density=0.25,
    placeholder_pattern="random",
)


def _emitted(sampled: torch.Tensor, num_sampled: torch.Tensor) -> list[list[int]]:
    return [sampled[r, : int(num_sampled[r])].tolist() for r in range(sampled.shape[0])]


def _expected_ballast(pipe) -> tuple[np.ndarray, np.ndarray]:
    """What the kernel stores for each (row, block): the sum of acc = acc * 0.5 + 1 (ballast_iters
    times) from (block * BLOCK_V + j) + row, and which programs pay it (every ballast_every-th,
    by row + block)."""
    acc = (
        np.arange(pipe.vocab_block_size, dtype=np.float64)[None, None, :]
        + np.arange(pipe.num_logits)[:, None, None]
        + pipe.vocab_block_size * np.arange(pipe.num_blocks)[None, :, None]
    )
    for _ in range(pipe.ballast_iters):
        acc = acc * 0.5 + 1.0
    paying = (np.arange(pipe.num_logits)[:, None] + np.arange(pipe.num_blocks)[None, :]) % pipe.ballast_every == 0
    return acc.sum(axis=2), paying


def test_the_committed_knob_is_zero_and_the_subjects_build_no_ballast(device):
    assert ours.PLANTED_BALLAST_ITERS == 0
    inputs = make_inputs(BLOCK_LOGITS, device=device)
    for name in subjects.names():
        pipeline = subjects.get(name).pipeline
        if pipeline is not None:
            pipe = pipeline(**inputs)
            assert getattr(pipe, "ballast", None) is None and getattr(pipe, "ballast_iters", 0) == 0, name


def test_knob_leaves_outputs_bit_identical(device):
    inputs = make_inputs(SMALL_BLOCK_LOGITS, device=device)
    outputs = {}
    for iters in (0, 8):
        sampled, num_sampled = mrv2.launch(**inputs, ballast_iters=iters)
        outputs[iters] = (_emitted(sampled, num_sampled), num_sampled.tolist())
    assert outputs[0] == outputs[8]


def test_pipeline_runs_the_ballast_in_the_residual_mass_kernel_only(device):
    inputs = make_inputs(BLOCK_LOGITS, device=device)
    assert mrv2.Pipeline(**inputs).ballast is None  # the default, 0: no scratch
    pipe = mrv2.Pipeline(**inputs, ballast_iters=8)
    assert pipe.ballast_iters == 8 and pipe.ballast.shape == (pipe.num_logits, pipe.num_blocks)
    pipe.ballast.fill_(float("nan"))
    # only the residual-mass launch writes it
    for name, stage in pipe.stages():
        stage()
        assert torch.isnan(pipe.ballast).all().item() == (name in ("stats", "cum_log_p")), name
    expected, paying = _expected_ballast(pipe)
    assert pipe.ballast_every > 1 and 0 < paying.sum() < paying.size
    got = pipe.ballast.cpu().numpy()
    np.testing.assert_allclose(got[paying], expected[paying], rtol=1e-5)
    assert np.isnan(got[~paying]).all()
    # only block verification with draft logits runs that kernel: other modes never pay
    standard = make_inputs(Workload(num_reqs=3, num_speculative_steps=3, vocab_size=300), device=device)
    assert mrv2.Pipeline(**standard, ballast_iters=8).ballast_iters == 0
    one_hot = make_inputs(
        Workload(num_reqs=3, num_speculative_steps=3, vocab_size=300, mode="block", draft="one-hot"), device=device
    )
    assert mrv2.Pipeline(**one_hot, ballast_iters=8).ballast_iters == 0
    # nor does fast, whose points are the validation's controls
    assert "fast" not in validate.PLANTED_SUBJECTS and getattr(fast.Pipeline(**inputs), "ballast_iters", 0) == 0


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_a_planted_commit_changes_one_line_and_slows_exactly_the_planted_subjects(tmp_path, monkeypatch, device):
    """validate.planted_commit: a throw-away commit on base (no branch moves) whose only change is
    PLANTED_BALLAST_ITERS; its pipelines run the ballast for PLANTED_SUBJECTS' block points with
    draft logits, and nowhere else, with outputs bit-identical to base's."""
    monkeypatch.setenv("SPECSAMPLE_CACHE", str(tmp_path / "cache"))
    repo = make_repo(tmp_path / "repo")
    base = git(repo, "rev-parse", "HEAD")
    sha = validate.planted_commit(repo, base, PLANTED_ITERS, 0.05)
    assert git(repo, "rev-parse", f"{sha}^") == base and git(repo, "rev-parse", "HEAD") == base
    assert git(repo, "branch", "--contains", sha) == "" and len(git(repo, "worktree", "list").splitlines()) == 1
    assert git(repo, "diff", "--name-only", base, sha) == validate.PLANTED_FILE
    changed = [
        line
        for line in git(repo, "diff", "-U0", base, sha).splitlines()
        if line[:1] in "+-" and not line.startswith(("+++", "---"))
    ]
    assert changed == ["-PLANTED_BALLAST_ITERS = 0", f"+PLANTED_BALLAST_ITERS = {PLANTED_ITERS}"]

    checkout = commits.load_checkout(commits.extract(repo, sha), sha)
    inputs = make_inputs(BLOCK_LOGITS, device=device)
    with checkout.active():
        registry = checkout.registry
        assert registry.get("mrv2").pipeline is not None
        pipes = {
            name: registry.get(name).pipeline(**inputs)
            for name in registry.names()
            if registry.get(name).pipeline is not None
        }
        standard = registry.get("mrv2").pipeline(
            **make_inputs(Workload(num_reqs=3, num_speculative_steps=3, vocab_size=300), device=device)
        )
    planted = {name for name, p in pipes.items() if getattr(p, "ballast_iters", 0) > 0}
    assert planted == set(validate.PLANTED_SUBJECTS)
    assert {pipes[name].ballast_iters for name in planted} == {PLANTED_ITERS} and standard.ballast_iters == 0
    pipe = pipes["mrv2"]
    pipe.ballast.fill_(float("nan"))
    with checkout.active():
        sampled, num_sampled = pipe.run()
    expected, paying = _expected_ballast(pipe)
    np.testing.assert_allclose(pipe.ballast.cpu().numpy()[paying], expected[paying], rtol=1e-5)
    reference = mrv2.launch(**make_inputs(BLOCK_LOGITS, device=device))
    assert _emitted(sampled, num_sampled) == _emitted(*reference) and num_sampled.tolist() == reference[1].tolist()
    # a head whose knob line is not the plain one is refused, not planted somewhere else
    path = repo / validate.PLANTED_FILE
    path.write_text(path.read_text().replace("PLANTED_BALLAST_ITERS = 0", "PLANTED_BALLAST_ITERS = int('0')"))
    git(repo, *GIT, "commit", "-q", "-am", "no plain knob line")
    with pytest.raises(validate.ValidationError, match="no single 'PLANTED_BALLAST_ITERS = <n>' line"):
        validate.planted_commit(repo, git(repo, "rev-parse", "HEAD"), 3)


def test_knob_at_zero_compiles_exactly_as_without_it():
    """PTX for sm_90 (Triton's own ptxas; no GPU needed) of the residual-mass kernel at
    BALLAST_ITERS=0 equals that of the same kernel with the knob's lines removed, up to debug
    line info: at 0 the loop is absent. At 8 the loop is there."""
    pytest.importorskip("triton.backends.nvidia")
    script = textwrap.dedent(
        r"""
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
        """
    )
    proc = subprocess.run(
        [sys.executable, "-c", script], env=compiler_env(), capture_output=True, text=True, timeout=300
    )
    if proc.returncode != 0 and ("ptxas" in proc.stderr or "GPUTarget" in proc.stderr):
        pytest.skip(f"cannot compile for sm_90 here: {proc.stderr.strip().splitlines()[-1]}")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_the_validation_knows_which_line_to_plant():
    text = (REPO / validate.PLANTED_FILE).read_text()
    assert len(validate.PLANTED_LINE.findall(text)) == 1
    assert "ballast_iters" in inspect.signature(mrv2.Pipeline).parameters
