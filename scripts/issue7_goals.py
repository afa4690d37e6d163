"""Issue 7's five goals for one commit, from the committed asv results (no GPU needed).

    python3 scripts/issue7_goals.py 7f8da1d6 [--machine h200]

Reads ``results/`` through :func:`specsample.results.load_results` (the one DataFrame) and
prints, for the ``fast`` variant of that commit's nightly tier (``--tier quick``: the quick
tier's points, a subset):

1. phi=1 / phi=0 latency at the base point (Density sweep, trailing placeholders), per mode and
   draft, against the goal 1.5 / (K + 1), with mrv2's and the replica's ratios beside it;
2. the bandwidth fraction at the base point, phi=0.5 (Density sweep, trailing, draft logits);
3. the geometric-mean speedup over mrv2 across the tier (``track_ratio_to_mrv2``) and the
   slowest points;
4. FlashInfer from logits (and its kernel alone) over ``fast`` in the Peers sweep;
5. is not a timing: it is the test suite (reported by hand).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import pandas as pd

from specsample.results import load_results

BASE = dict(num_reqs=128, K=4, vocab_size=151936)


def _point(df: pd.DataFrame, **where) -> pd.DataFrame:
    mask = np.ones(len(df), dtype=bool)
    for column, value in where.items():
        mask &= (df[column] == value).to_numpy()
    return df[mask]


def goals(df: pd.DataFrame) -> str:
    lines = []
    lat = _point(df, metric="track_latency_us", sweep="Density", pattern="trailing", **BASE)
    k = BASE["K"]
    lines.append(f"1. phi=1 / phi=0 latency, base point, trailing (goal <= {1.5 / (k + 1):.2f})")
    for (mode, draft), group in lat.groupby(["mode", "draft"], sort=True):
        by = group.set_index(["variant", "phi"])["value"]
        cells = []
        for variant in ("fast", "mrv2", "mrv2-pre50939"):
            if (variant, 0.0) in by.index and (variant, 1.0) in by.index:
                cells.append(f"{variant} {by[(variant, 1.0)] / by[(variant, 0.0)]:.3f}")
        fast0, fast1 = by.get(("fast", 0.0)), by.get(("fast", 1.0))
        lines.append(f"   {mode:8s} {draft:7s}: " + ", ".join(cells) + f"   (fast {fast1:.1f} / {fast0:.1f} us)")

    bw = _point(df, metric="track_bandwidth_fraction", sweep="Density", pattern="trailing", phi=0.5, draft="logits",
                **BASE)  # fmt: skip
    lines.append("2. bandwidth fraction, base point, phi=0.5, trailing, draft logits (goal >= 0.80)")
    for mode, group in bw.groupby("mode", sort=True):
        by = group.set_index("variant")["value"]
        lines.append(f"   {mode:8s}: " + ", ".join(f"{v} {by[v]:.3f}" for v in ("fast", "mrv2") if v in by.index))

    ratio = _point(df, metric="track_ratio_to_mrv2", variant="fast")
    speedup = 1.0 / ratio["value"]
    lines.append(f"3. speedup over mrv2, {len(ratio)} points: geomean {np.exp(np.log(speedup).mean()):.3f}x "
                 f"(goal >= 1.3), slowest {speedup.min():.3f}x (goal >= 0.98)")  # fmt: skip
    for sweep, group in ratio.groupby("sweep", sort=True):
        lines.append(f"   {sweep:12s} geomean {np.exp(-np.log(group['value']).mean()):.3f}x")
    cols = ["sweep", "mode", "draft", "num_reqs", "K", "vocab_size", "phi", "pattern"]
    slowest = ratio.assign(speedup=speedup).nsmallest(3, "speedup")
    for _, row in slowest.iterrows():
        lines.append("   slow: " + " ".join(f"{c}={row[c]}" for c in cols) + f" -> {row['speedup']:.3f}x")

    peers = _point(df, metric="track_latency_us", sweep="Peers")
    lines.append("4. FlashInfer / fast, Peers sweep (goal >= 3 from logits at R >= 32)")
    for (r, v), group in peers.groupby(["num_reqs", "vocab_size"], sort=True):
        by = group.set_index("variant")["value"]
        if "fast" not in by.index or "flashinfer" not in by.index:
            continue
        kernel = f", kernel alone {by['flashinfer-kernel'] / by['fast']:.2f}" if "flashinfer-kernel" in by.index else ""
        lines.append(f"   R={r:<4d} V={v:<7d}: from logits {by['flashinfer'] / by['fast']:.2f}{kernel}"
                     f"   (fast {by['fast']:.1f} us)")  # fmt: skip
    return "\n".join(lines)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("commit", help="a commit hash or its prefix, as in results/<machine>/")
    p.add_argument("--machine", default="h200")
    p.add_argument("--tier", default="nightly", help="nightly (every goal) or quick (goals 1-3 on its points)")
    p.add_argument("--results", type=Path, default=Path("results"))
    args = p.parse_args()
    df, _ = load_results(args.results)
    df = df[df["commit"].str.startswith(args.commit) & (df["machine"] == args.machine) & (df["tier"] == args.tier)]
    if df.empty:
        raise SystemExit(f"issue7_goals.py: no {args.tier} results for commit {args.commit} on {args.machine}")
    print(f"commit {df['commit'].iloc[0][:8]} on {args.machine} ({df['gpu'].iloc[0]}), {args.tier} tier")
    print(goals(df))


if __name__ == "__main__":
    main()
