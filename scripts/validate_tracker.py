"""Validate the tracker on one GPU in about 300 s: A/A false alarms, detection power of planted
slowdowns, a bisection over a test-built checkout, and throttled samples under a heat load.

    python scripts/validate_tracker.py            # writes $OUT/validate_tracker.json (else ./validate-tracker/)

Four parts, each one JSON section (the figures for the note):

1. ``aa``: ``--aa-runs`` (20) A/A sign-offs of ``--aa-points`` quick-tier points (``mrv2``,
   Density sweep) in one worker process, each judged with sign-off's four-way verdict and
   default thresholds: the false regressions (``slower``) counted, and the verdict counts.
2. ``power``: the planted delay (``mrv2+extra=N``, :mod:`specsample.subjects.planted`)
   calibrated at the base point (block verification, draft logits, R=128 K=4 V=151936 phi=0)
   for 1%, 2%, 3% and 5%, then ``--power-reps`` paired comparisons of ``mrv2`` against each
   plant: the fraction judged ``slower`` at the sign-off's thresholds (2% and 0.5 us) and at
   ``min_effect`` 0.5% (what the noise target allows), and the smallest plant caught at 95%.
3. ``bisect``: a throw-away git repository of this ``specsample/`` with ``--commits`` (17)
   commits, the planted delay (5%) added to ``mrv2`` in one of them; ``specsample bisect``'s
   search and paired measurer over it: the culprit, whether it is the planted commit, the steps,
   measurements and device time.
4. ``throttle``: the base point measured paired (A/A) with no load and then while a second
   process runs bf16 matmuls on the same GPU: the samples NVML flagged as throttled, and why.

Every measurement goes through the same worker, NVML monitor and noise target as
``specsample signoff``. Exit 0 when it ran (the figures are the result, not a pass/fail).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from specsample import worker  # noqa: E402
from specsample.bisect import bisect, report, runner  # noqa: E402
from specsample.track.signoff import stats  # noqa: E402

BASE_POINT = {
    "mode": "block",
    "draft": "logits",
    "num_reqs": 128,
    "num_speculative_steps": 4,
    "vocab_size": 151936,
    "placeholder_density": 0.0,
    "placeholder_pattern": "trailing",
}
TARGETS = (0.01, 0.02, 0.03, 0.05)
GIT = ("-c", "user.name=validate", "-c", "user.email=validate@specsample.invalid", "-c", "commit.gpgsign=false")

HEAT = """
import sys, time, torch
a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
end = time.time() + float(sys.argv[1])
print("heat: running", flush=True)
while time.time() < end:
    for _ in range(20):
        a = (a @ b).clamp_(-1, 1)
    torch.cuda.synchronize()
"""


def log(line: str) -> None:
    print(line, flush=True)


def options(samples: int, **more) -> worker.JobOptions:
    return worker.JobOptions(num_samples=samples, calls_per_sample=10, **more)


def judge(records: dict, a: str, b: str, **kwargs) -> dict:
    return stats.compare_samples(records[a]["samples"], records[b]["samples"], **kwargs)


def part_aa(args) -> dict:
    from specsample import tiers

    sweep = next(s for s in tiers.sweeps("quick") if s.name == "Density")
    points = [p for p in sweep.points() if p["subject"] == "mrv2"][: args.aa_points]
    units = [
        worker.Unit(
            f"aa{r}/{i}", {k: v for k, v in p.items() if k != "subject"}, ("mrv2", "mrv2"), labels=("base", "head")
        )
        for r in range(args.aa_runs)
        for i, p in enumerate(points)
    ]
    start = time.monotonic()
    out = worker.run_units(units, options(args.samples, noise_target=args.noise_target), log=log)
    # each A/A run judged at the sign-off's thresholds and at those of the power part's finest
    # figure (suffix "_min_effect_0.5pct"): a plant caught there must not come with false alarms there
    thresholds = {"": {}, "_min_effect_0.5pct": {"min_effect": 0.005, "min_abs": 0.0}}
    runs = []
    for r in range(args.aa_runs):
        run = {"run": r + 1}
        for suffix, limits in thresholds.items():
            verdicts = []
            for i in range(len(points)):
                rec = out.records[f"aa{r}/{i}"]
                if rec["base"]["status"] != "ok" or rec["head"]["status"] != "ok":
                    verdicts.append("not measured")
                    continue
                capped = bool(rec["base"].get("capped") or rec["head"].get("capped"))
                verdicts.append(judge(rec, "base", "head", capped=capped, **limits)["verdict"])
            run[f"verdicts{suffix}"] = verdicts
            run[f"false_regressions{suffix}"] = verdicts.count("slower")
        runs.append(run)
    summary = {}
    for suffix in thresholds:
        counts = {v: 0 for v in stats.COMPARED_VERDICTS}
        for run in runs:
            for v in run[f"verdicts{suffix}"]:
                counts[v] = counts.get(v, 0) + 1
        summary[f"false_regressions{suffix}"] = sum(run[f"false_regressions{suffix}"] for run in runs)
        summary[f"verdict_counts{suffix}"] = counts
    return {
        "runs": args.aa_runs,
        "points_per_run": len(points),
        "points": points,
        "runs_with_a_false_regression": sum(1 for run in runs if run["false_regressions"]),
        **summary,
        "per_run": runs,
        "gpu": out.gpu,
        "seconds": time.monotonic() - start,
    }


def calibrate(args) -> tuple[dict[float, int], dict]:
    """Delay iterations for each target slowdown at the base point (one interleaved unit)."""
    scan = [0, 16, 64, 256, 1024, 4096]
    names = tuple("mrv2" if n == 0 else f"mrv2+extra={n}" for n in scan)
    unit = worker.Unit("calibrate", BASE_POINT, names, labels=tuple(f"n{n}" for n in scan))
    out = worker.run_units([unit], options(args.samples * 2), log=log)
    rec = out.records["calibrate"]
    base = float(np.median(rec["n0"]["samples"]))
    curve = [(n, float(np.median(rec[f"n{n}"]["samples"])) / base - 1) for n in scan]
    chosen = {}
    xs, ys = [n for n, _ in curve], np.maximum.accumulate([s for _, s in curve])
    for t in TARGETS:
        if ys[-1] >= t:
            chosen[t] = max(1, round(float(np.interp(t, ys, xs))))
        else:  # past the scan: extrapolate the last segment (the delay is linear in N)
            slope = (ys[-1] - ys[-2]) / (xs[-1] - xs[-2]) or ys[-1] / xs[-1]
            chosen[t] = round(xs[-1] + (t - ys[-1]) / slope) if slope > 0 else xs[-1]
    return chosen, {"base_us": base * 1e6, "curve": curve, "chosen": {str(t): n for t, n in chosen.items()}}


def part_power(args, chosen: dict[float, int]) -> dict:
    units = [
        worker.Unit(f"p{t}/{r}", BASE_POINT, ("mrv2", f"mrv2+extra={n}"), labels=("base", "head"))
        for t, n in chosen.items()
        for r in range(args.power_reps)
    ]
    start = time.monotonic()
    out = worker.run_units(units, options(args.samples, noise_target=args.noise_target), log=log)
    rows = []
    for t, n in chosen.items():
        measured, caught_default, caught_fine = [], 0, 0
        for r in range(args.power_reps):
            rec = out.records[f"p{t}/{r}"]
            if rec["base"]["status"] != "ok" or rec["head"]["status"] != "ok":
                continue
            default = judge(rec, "base", "head")
            fine = judge(rec, "base", "head", min_effect=0.005, min_abs=0.0)
            measured.append(default["ratio"] - 1)
            caught_default += default["verdict"] == "slower"
            caught_fine += fine["verdict"] == "slower"
        k = max(len(measured), 1)
        rows.append(
            {
                "target": t,
                "delay_iterations": n,
                "measured_median": float(np.median(measured)) if measured else None,
                "reps": len(measured),
                "power_at_signoff_thresholds": caught_default / k,
                "power_at_min_effect_0.5pct": caught_fine / k,
            }
        )

    def smallest(key):
        return next((r["target"] for r in rows if r[key] >= 0.95), None)

    return {
        "rows": rows,
        "smallest_at_95pct_signoff_thresholds": smallest("power_at_signoff_thresholds"),
        "smallest_at_95pct_min_effect_0.5pct": smallest("power_at_min_effect_0.5pct"),
        "seconds": time.monotonic() - start,
    }


PLANT = """

# ---- validation plant (scripts/validate_tracker.py) ----
from .planted import PlantedSubject as _Planted

SUBJECTS = tuple(
    _Planted(s.name, s.summary, s.capabilities, s.prepare_inputs, provenance=s.provenance, base=s, extra={n})
    if s.name == "mrv2" else s
    for s in SUBJECTS
)
"""


def build_checkout(root: Path, commits: int, planted_at: int, iters: int) -> tuple[Path, list[str]]:
    repo = root / "repo"
    shutil.copytree(REPO / "specsample", repo / "specsample", ignore=shutil.ignore_patterns("__pycache__"))
    subprocess.run(["git", "init", "-q", str(repo)], check=True)

    def commit(message: str) -> str:
        subprocess.run(["git", "-C", str(repo), "add", "-A"], check=True)
        subprocess.run(["git", "-C", str(repo), *GIT, "commit", "-q", "-m", message], check=True)
        return subprocess.run(
            ["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()

    shas = [commit("base")]
    for i in range(1, commits):
        if i == planted_at:
            ours = repo / "specsample" / "subjects" / "ours.py"
            ours.write_text(ours.read_text() + PLANT.format(n=iters))
        else:
            (repo / "CHANGES").write_text(f"commit {i}\n")
        shas.append(commit(f"commit {i}" + (" (planted delay)" if i == planted_at else "")))
    return repo, shas


def part_bisect(args, iters: int) -> dict:
    root = Path(tempfile.mkdtemp(prefix="validate-bisect-"))
    try:
        planted_at = args.commits * 2 // 3
        repo, shas = build_checkout(root, args.commits, planted_at, iters)
        target = runner.Target(repo, "mrv2", dict(BASE_POINT), False)
        commits = runner.commit_range(repo, shas[0], shas[-1])
        runner.check_point(target, commits[0], commits[-1])
        measurer = runner.PairedMeasurer(
            target, commits[0], commits[-1], samples=args.samples, noise_target=args.noise_target, log=log
        )
        start = time.monotonic()
        result = bisect(commits, measurer)
        wall = time.monotonic() - start
        return {
            "commits": len(commits),
            "planted_commit": shas[planted_at],
            "planted_index": planted_at,
            "delay_iterations": iters,
            "status": result.status,
            "culprit": result.culprit,
            "found_the_planted_commit": result.culprit == shas[planted_at],
            "steps": len(result.steps),
            "measurements": result.measurements,
            "device_seconds": result.seconds,
            "wall_seconds": wall,
            "headline": report.headline(result),
            "report": report.to_json(result, {"point": BASE_POINT, "subject": "mrv2@<commit>"}),
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def part_throttle(args) -> dict:
    unit = lambda key: worker.Unit(key, BASE_POINT, ("mrv2", "mrv2"), labels=("base", "head"))  # noqa: E731
    opts = options(args.throttle_samples, time_cap_s=args.heat_seconds)
    quiet = worker.run_units([unit("quiet")], opts, log=log)
    heat = subprocess.Popen(
        [sys.executable, "-c", HEAT, str(args.heat_seconds + 30)], stdout=subprocess.PIPE, text=True
    )
    try:
        heat.stdout.readline()  # the load is running
        time.sleep(args.warm_seconds)  # let it heat the GPU first
        loaded = worker.run_units([unit("loaded")], opts, log=log)
    finally:
        heat.kill()
        heat.wait()

    def summary(outcome, key):
        rec = outcome.records[key]
        out = {}
        for side in ("base", "head"):
            r = rec[side]
            state = r.get("gpu_state") or {}
            out[side] = {
                "status": r["status"],
                "kept_samples": len(r.get("samples") or []),
                "n_throttled": r.get("n_throttled"),
                "throttled_because": state.get("throttled_because"),
                "sm_clock_mhz": state.get("sm_clock_mhz"),
                "temperature_c": state.get("temperature_c"),
                "power_w": state.get("power_w"),
                "reason": r.get("reason"),
            }
        return out

    return {
        "samples_per_side": args.throttle_samples,
        "quiet": summary(quiet, "quiet"),
        "under_matmul_load": summary(loaded, "loaded"),
        "gpu": loaded.gpu,
    }


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", default=os.environ.get("OUT") or "validate-tracker")
    p.add_argument("--aa-runs", type=int, default=20)
    p.add_argument("--aa-points", type=int, default=4)
    p.add_argument("--power-reps", type=int, default=20)
    p.add_argument("--commits", type=int, default=17)
    p.add_argument("--samples", type=int, default=30)
    p.add_argument("--noise-target", type=float, default=0.005)
    p.add_argument("--throttle-samples", type=int, default=400)
    p.add_argument("--heat-seconds", type=float, default=40.0)
    p.add_argument("--warm-seconds", type=float, default=10.0)
    p.add_argument("--parts", default="aa,power,bisect,throttle")
    args = p.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    parts = set(args.parts.split(","))
    result: dict = {"args": vars(args)}
    start = time.monotonic()
    path = out / "validate_tracker.json"

    def save():
        result["seconds"] = time.monotonic() - start
        path.write_text(json.dumps(result, indent=1, default=str) + "\n")

    if "aa" in parts:
        log("== A/A sign-offs")
        result["aa"] = part_aa(args)
        save()
    chosen = None
    if parts & {"power", "bisect"}:
        log("== calibration of the planted delay")
        chosen, result["calibration"] = calibrate(args)
        save()
    if "power" in parts:
        log("== detection power")
        result["power"] = part_power(args, chosen)
        save()
    if "bisect" in parts:
        log("== bisect over a test-built checkout")
        result["bisect"] = part_bisect(args, chosen[0.05])
        save()
    if "throttle" in parts:
        log("== throttling under a matmul heat load")
        result["throttle"] = part_throttle(args)
        save()
    log(
        json.dumps(
            {k: v for k, v in result.items() if k != "bisect"} | {"bisect": result.get("bisect", {}).get("headline")},
            default=str,
        )[:4000]
    )
    log(f"wrote {path} ({result['seconds']:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
