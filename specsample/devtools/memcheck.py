"""Inputs that have broken samplers before, run once per subject, for ``compute-sanitizer``.

::

    python -m specsample.devtools.memcheck SUBJECT [--config NAME]

``scripts/memcheck.sh`` runs this under ``compute-sanitizer --tool memcheck`` once per subject
and, for the samplers whose launch geometry depends on the batch size (fast: tiny, small,
large; express: small, large), once per configuration forced at every batch size, on the GPU
box. Without a GPU it runs under Triton's
interpreter (set here when ``TRITON_INTERPRET`` is unset): no memory checking there, but it
proves every case runs. Cases: placeholder-heavy, all-placeholder, all-NaN logits, V not a
multiple of any block size, R=1, ragged requests, R=128 (express's persistent resample pass
loops there at ``--vocab-size 65536``), masked vocabulary with the masked-block skip (for the
subjects that have that path), in every mode and draft kind; every output
token must lie in ``[0, V)`` (but the pre-#50939 replica's, which may emit ``-1`` by design)
and every count in ``[1, K + 1]``.
"""

from __future__ import annotations

import argparse
import itertools
import os

from ..schema import OUR_SUBJECTS

CASES = {
    "placeholder-heavy": dict(placeholder_density=0.75, placeholder_pattern="random"),
    "all-placeholder": dict(placeholder_pattern="all"),
    "odd-vocab-R1": dict(num_reqs=1, vocab_size=8193, placeholder_density=0.5),
    "ragged-mixed-T": dict(ragged=True, greedy_fraction=0.5, placeholder_density=0.25),
    # many requests: with --vocab-size 65536, more resample tiles (128 x 32) than an H200 runs
    # programs of express's persistent resample pass (one-hot drafts: 16 x 132), which then loops
    "many-requests": dict(
        num_reqs=128, ragged=True, greedy_fraction=0.3, placeholder_density=0.5, placeholder_pattern="random"
    ),
    # vLLM's masked-block skip, where the subject has it (express): wholly masked blocks are
    # not loaded, so the masked loads' bounds are what memcheck watches
    "masked-skip": dict(
        masked_vocab_fraction=0.9,
        skip_masked_vocab_blocks=True,
        ragged=True,
        greedy_fraction=0.25,
        placeholder_density=0.5,
        placeholder_pattern="random",
    ),
    "masked-skip-many-requests": dict(
        num_reqs=128, masked_vocab_fraction=0.99, skip_masked_vocab_blocks=True, placeholder_density=0.25
    ),
}
# Subjects run here: ours but the peers (FlashInfer is not ours to check).
SUBJECTS = tuple(s for s in OUR_SUBJECTS if not s.startswith("flashinfer"))
# The pre-#50939 replica emits the raw -1 of a block-verification placeholder (spec 5.1).
EMITS_PLACEHOLDERS = ("mrv2-pre50939",)


def configs() -> dict[str, dict]:
    """``{subject: {name: Config}}``: the launch configurations --config forces, from the kernel
    modules' ``NAMED_CONFIGS`` (fast's and express's). Imports the kernels: call it after
    ``TRITON_INTERPRET`` is set (or not), since ``@triton.jit`` reads it when a kernel is defined."""
    from ..kernels import express, fast

    return {"fast": fast.NAMED_CONFIGS, "express": express.NAMED_CONFIGS}


def _caller(subject: str, config_name: str | None):
    """``(call, unsupported)`` for ``subject``: ``call(w, device, inputs) -> (sampled,
    num_sampled)`` and ``unsupported(w) -> reason or None``, from its registry entry; with
    ``config_name`` (see :func:`configs`), the subject's sampler with that configuration at every
    batch size (its ``config=`` argument)."""
    from .. import sampler, subjects

    if config_name is None:
        return subjects.get(subject).run, subjects.get(subject).unsupported

    launch = {"fast": sampler.rejection_sample_fast, "express": sampler.rejection_sample_express}[subject]
    forced = configs()[subject][config_name]

    def call(w, device, inputs):
        return launch(**inputs, config=forced)

    return call, subjects.get(subject).unsupported


def run(subject: str, device: str, vocab_size: int = 20000, config: str | None = None) -> int:
    """Every case in every mode and draft kind the subject supports, with finite and all-NaN
    target logits; returns the number of calls made (an ``AssertionError`` names a bad output)."""
    import torch

    from ..workloads import Workload, make_inputs

    call, unsupported = _caller(subject, config)
    count = 0
    for (name, fields), mode, draft in itertools.product(
        CASES.items(), ("greedy", "standard", "block"), ("logits", "one-hot")
    ):
        point = {"num_reqs": 4, "num_speculative_steps": 4, "vocab_size": vocab_size, "mode": mode, "draft": draft}
        w = Workload(**{**point, "seed": 3, **fields})
        if unsupported(w):
            continue
        inputs = make_inputs(w, device=device)
        for nan in (False, True):
            if nan:  # all-NaN target logits: argmax must stay inside [0, V)
                inputs["target_logits"].fill_(float("nan"))
            sampled, num_sampled = call(w, device, inputs)
            for row, n in zip(sampled.tolist(), num_sampled.tolist()):
                assert 1 <= n <= w.num_speculative_steps + 1, (subject, name, mode, draft, n)
                in_range = all(0 <= t < w.vocab_size for t in row[:n])
                assert in_range or subject in EMITS_PLACEHOLDERS, (subject, name, mode, draft, row[:n])
            count += 1
    if device == "cuda":
        torch.cuda.synchronize()
    return count


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m specsample.devtools.memcheck",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("subject", choices=SUBJECTS)
    p.add_argument("--vocab-size", type=int, default=20000, help="20000: 3 stats blocks padded to 4")
    import torch

    device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cpu":
        # Before the kernels are imported (configs() and run import them): @triton.jit reads it
        # at definition.
        os.environ.setdefault("TRITON_INTERPRET", "1")
    named = configs()
    p.add_argument(
        "--config",
        choices=sorted({name for names in named.values() for name in names}),
        default=None,
        help="a launch configuration of fast or express (kernels' NAMED_CONFIGS: "
        + "; ".join(f"{s}: {', '.join(c)}" for s, c in named.items())
        + ") at every batch size (default: each batch size's own)",
    )
    args = p.parse_args(argv)
    if args.config and args.config not in named.get(args.subject, {}):
        known = ", ".join(f"{s}: {', '.join(c)}" for s, c in named.items())
        p.error(f"--config {args.config}: not a configuration of {args.subject} (known: {known})")
    label = args.subject + (f" ({args.config} config)" if args.config else "")
    print(f"{label}: {run(args.subject, device, args.vocab_size, args.config)} calls on {device} completed")


if __name__ == "__main__":
    main()
