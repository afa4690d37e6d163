"""``python -m specsample.devtools.express_stages``: the express sampler beside mrv2 and fast on a
GPU -- whole calls and each kernel alone -- at the points its predictions name
(``docs/performance-log.md``).

GPU box, from the repository root, after ``source contrib/offline-gpu-box/gpu-env.sh``::

    python -m specsample.devtools.express_stages --out "$OUT/express-stages.json"
    python -m specsample.devtools.express_stages --quick      # the base point's six modes only

For each workload: the whole call of ``mrv2``, ``fast`` and ``express`` interleaved in one
measurement with each output classified once (:func:`specsample.measure.measure_point`: cold L2,
CUDA-graph replay; express must read "same semantics, other stream"), then each kernel alone
for ``fast`` and ``express`` (:func:`specsample.measure.measure_stages`). Prints one block per
workload -- medians in us, express / fast and express / mrv2, and the bandwidth fraction
``bytes_required / median / copy bandwidth`` -- and writes every median to JSON after each
workload. About 10 minutes for the full list on an H200.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

SUBJECTS = ("mrv2", "fast", "express")
STAGE_SUBJECTS = ("fast", "express")
BASE = dict(num_reqs=128, num_speculative_steps=4, vocab_size=151936)


def workloads(quick: bool) -> dict:
    from ..workloads import Workload

    out = {}
    for mode in ("standard", "block", "greedy"):
        for draft in ("logits", "one-hot"):
            for phi in (0.0, 0.5, 1.0) if not quick else (0.0, 0.5):
                if quick and draft == "one-hot" and phi:
                    continue
                out[f"base-{mode}-{draft}-phi{phi:g}"] = Workload(
                    mode=mode, draft=draft, placeholder_density=phi, **BASE
                )
    if not quick:
        for r in (1, 8, 32, 512):
            for mode in ("standard", "block", "greedy"):
                out[f"R{r}-{mode}-phi0.5"] = Workload(mode=mode, placeholder_density=0.5, **{**BASE, "num_reqs": r})
        out["V32000-block-phi0"] = Workload(mode="block", **{**BASE, "vocab_size": 32000})
        out["V262144-standard-phi0.5"] = Workload(placeholder_density=0.5, **{**BASE, "vocab_size": 262144})
        out["K8-block-phi0"] = Workload(mode="block", **{**BASE, "num_speculative_steps": 8})
    return out


def run(out: Path | None, quick: bool, samples: int) -> None:
    from ..measure import measure_point, measure_stages
    from ..timing import TimingConfig, copy_bandwidth
    from ..workloads import bytes_required

    config = TimingConfig(num_samples=samples)
    bw = copy_bandwidth()
    print(f"copy bandwidth {bw / 1e12:.2f} TB/s", flush=True)
    rows = {}
    for name, w in workloads(quick).items():
        t0 = time.time()
        calls = measure_point(SUBJECTS, w, config, device="cuda")
        stages = measure_stages(STAGE_SUBJECTS, w, config, device="cuda")
        required = bytes_required(w)
        row = {"workload": w.name, "bytes_required": required, "calls_us": {}, "semantics": {}, "stages_us": {}}
        for subject, result in calls.items():
            row["semantics"][subject] = result.semantics
            row["calls_us"][subject] = result.timing.median * 1e6 if result.timing else None
        for (subject, stage), timing in stages.items():
            row["stages_us"].setdefault(subject, {})[stage] = timing.median * 1e6
        us = row["calls_us"]
        e = us.get("express")
        line = f"{name}: " + "  ".join(f"{s} {us[s]:.1f}" for s in SUBJECTS if us.get(s))
        if e and us.get("fast") and us.get("mrv2"):
            line += f"  | express/fast {e / us['fast']:.3f} express/mrv2 {e / us['mrv2']:.3f}"
            line += f"  | bw fraction express {required / (e * 1e-6) / bw:.3f} fast {required / (us['fast'] * 1e-6) / bw:.3f}"
        print(line + f"  ({time.time() - t0:.0f} s)", flush=True)
        for subject in STAGE_SUBJECTS:
            kernels = row["stages_us"].get(subject, {})
            print(f"    {subject:8s} " + "  ".join(f"{k} {v:.1f}" for k, v in kernels.items()), flush=True)
        if row["semantics"].get("express") != "same semantics, other stream":
            print(f"    WARNING: express semantics {row['semantics'].get('express')!r}", flush=True)
        rows[name] = row
        if out is not None:
            out.write_text(json.dumps({"copy_bandwidth_bytes_per_s": bw, "rows": rows}, indent=1))


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(
        prog="python -m specsample.devtools.express_stages",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--out", type=Path, default=None, help="JSON of every median, rewritten after each workload")
    p.add_argument(
        "--quick", action="store_true", help="the base point only: three modes x logits at phi 0, 0.5; one-hot at phi 0"
    )
    p.add_argument("--samples", type=int, default=20, help="samples per subject, point and kernel")
    args = p.parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        p.error("needs a CUDA GPU")
    run(args.out, args.quick, args.samples)


if __name__ == "__main__":
    main()
