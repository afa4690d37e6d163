"""Inputs that have broken samplers before, run once per in-tree variant; for memcheck.

Usage (GPU box): ``scripts/memcheck.sh`` runs this under ``compute-sanitizer --tool memcheck``
once per variant. It also runs on a CPU under ``TRITON_INTERPRET=1`` (no memory checking there,
but it proves every case runs). Cases: placeholder-heavy, all-placeholder, all-NaN logits,
V not a multiple of any block size, R=1, ragged requests, in every mode and draft kind.
"""

from __future__ import annotations

import argparse
import itertools

import torch

from specsample import variants
from specsample.kernels import fast
from specsample.workloads import Workload, make_inputs

CASES = {
    "placeholder-heavy": dict(placeholder_density=0.75, placeholder_pattern="random"),
    "all-placeholder": dict(placeholder_pattern="all"),
    "odd-vocab-R1": dict(num_reqs=1, vocab_size=8193, placeholder_density=0.5),
    "ragged-mixed-T": dict(ragged=True, greedy_fraction=0.5, placeholder_density=0.25),
}


def run(variant: str, device: str, vocab_size: int) -> int:
    v = variants.get(variant)
    count = 0
    for (name, fields), mode, draft in itertools.product(CASES.items(), ("greedy", "standard", "block"), ("logits", "one-hot")):
        w = Workload(**{"num_reqs": 4, "num_speculative_steps": 4, "vocab_size": vocab_size, "mode": mode,
                        "draft": draft, "seed": 3, **fields})  # fmt: skip
        if v.unsupported(w):
            continue
        inputs = make_inputs(w, device=device)
        for nan in (False, True):
            if nan:  # all-NaN target logits: argmax must stay inside [0, V)
                inputs["target_logits"].fill_(float("nan"))
            sampled, num_sampled = v.run(w, device, inputs)
            vocab = w.vocab_size
            for row, n in zip(sampled.tolist(), num_sampled.tolist()):
                assert 1 <= n <= w.num_speculative_steps + 1, (variant, name, mode, draft, n)
                assert all(0 <= t < vocab for t in row[:n]) or variant == "mrv2-pre50939", (variant, name, row[:n])
            count += 1
    if device == "cuda":
        torch.cuda.synchronize()
    return count


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("variant", choices=[n for n in variants.names() if not n.startswith("flashinfer")])
    p.add_argument("--vocab-size", type=int, default=20000, help="20000: 3 stats blocks padded to 4")
    p.add_argument("--fast-config", choices=("default", "tiny", "small", "large"), default="default",
                   help="fast only: force its tiny-, small- or large-batch configuration at every batch size")  # fmt: skip
    args = p.parse_args()
    if args.fast_config != "default":
        forced = {"tiny": fast.TINY_BATCH_CONFIG, "small": fast.SMALL_BATCH_CONFIG, "large": fast.LARGE_BATCH_CONFIG}
        fast.default_config = lambda num_reqs: forced[args.fast_config]  # looked up at each Pipeline
    device = "cuda" if torch.cuda.is_available() else "cpu"
    label = args.variant + ("" if args.fast_config == "default" else f" ({args.fast_config} config)")
    print(f"{label}: {run(args.variant, device, args.vocab_size)} calls on {device} completed")


if __name__ == "__main__":
    main()
