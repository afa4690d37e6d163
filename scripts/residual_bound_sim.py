"""How many vocabulary blocks would a rejection-based level 1 read for express's draft residual?

A design question of issue 18 (goal 3, notes/express-single-pass.md), answered on the CPU with
the suite's own workloads: for every tested row of a standard-mode batch, the residual
``max(p - q, 0)`` in blocks of 2048 entries (express's SAMPLE_BLOCK), then

* the naive bound ``U_b = P_b`` (the block's target mass, known from the stats partials):
  expected proposals ``sum_b P_b / sum_b m_b = 1 / Z``;
* adaptive rejection: propose ``b ~ U``, read the block (its exact mass ``m_b``), accept with
  probability ``m_b / U_b``, else set ``U_b = m_b`` and propose again. A block is read at most
  once; the count of blocks read is simulated.

Usage: python scripts/residual_bound_sim.py [--agreement A ...] [--reqs R] [--repeats N]
"""

from __future__ import annotations

import argparse
import math

import torch

from specsample.workloads import Workload, make_inputs

BLOCK = 2048


def block_masses(x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(target block masses P_b, residual block masses m_b) of one row, fp64."""
    p, q = torch.softmax(x, 0), torch.softmax(y, 0)
    nb = math.ceil(x.numel() / BLOCK)
    pad = nb * BLOCK - x.numel()
    P = torch.nn.functional.pad(p, (0, pad)).view(nb, BLOCK).sum(1)
    M = torch.nn.functional.pad((p - q).clamp(min=0), (0, pad)).view(nb, BLOCK).sum(1)
    return P, M


def blocks_read(P: torch.Tensor, M: torch.Tensor, g: torch.Generator) -> int:
    U, exact = P.clone(), torch.zeros(P.numel(), dtype=torch.bool)
    while True:
        b = int(torch.multinomial(U, 1, generator=g))
        if exact[b]:
            return int(exact.sum())  # an exact bound always accepts
        exact[b] = True
        if float(torch.rand(1, generator=g, dtype=torch.float64)) * float(U[b]) < float(M[b]):
            return int(exact.sum())
        U[b] = M[b]


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--agreement", type=float, nargs="+", default=[0.5, 0.7, 0.9, 0.97])
    ap.add_argument("--reqs", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args(argv)
    for a in args.agreement:
        w = Workload(num_reqs=args.reqs, num_speculative_steps=4, vocab_size=151936, mode="standard", agreement=a)
        inp = make_inputs(w, device="cpu")
        cu, t = inp["cu_num_logits"], inp["temperature"].double()
        g = torch.Generator().manual_seed(1)
        inv_z, reads = [], []
        for r in range(w.num_reqs):
            slot = int(inp["idx_mapping"][r])
            for j in range(w.num_speculative_steps):
                x = inp["target_logits"][int(cu[r]) + j].double()
                y = inp["draft_logits"][slot, j].double() / t[slot]
                P, M = block_masses(x, y)
                inv_z.append(float(P.sum() / M.sum()))
                reads += [blocks_read(P, M, g) for _ in range(args.repeats)]
        z, n = torch.tensor(inv_z), torch.tensor(reads, dtype=torch.float64)
        print(
            f"agreement {a}: {len(inv_z)} rows; naive bound 1/Z median {z.median():.2f}; adaptive: blocks "
            f"read mean {n.mean():.2f}, median {n.median():.0f}, p99 {n.quantile(0.99):.0f}, "
            f"max {n.max():.0f} of {math.ceil(w.vocab_size / BLOCK)}"
        )


if __name__ == "__main__":
    main()
