"""Small results frames with known content, for the dashboard and change-point tests.

Everything here is made up, shaped like the H200 results (benchmark names, units, axes,
quartiles and samples, outcome columns) so the code under test cannot tell the difference. Each
builder documents what it plants; the tests assert that the pages and the change points find
exactly that. :func:`write_asv_results` writes a frame as an asv 0.6.6 results directory (and
the ``<sha8>.outcomes`` sidecars), for the command line and the loader.
"""

from __future__ import annotations

import hashlib
import itertools
import json
from pathlib import Path

import numpy as np
import pandas as pd

from specsample.schema import BASE_POINT, asv_name
from specsample.track.results import split_benchmark_name, to_frame

MACHINE = "synthetic-h200"
RELEASES = ("0.26.0", "0.27.0", "0.27.1", "0.28.0", "0.29.0")
OURS = ("mrv2", "mrv2-pre50939", "fast")
MODES = ("greedy", "standard", "block")
UNITS = {
    "time_sample": "seconds",
    "track_latency_us": "us",
    "track_stage_us": "us",
    "track_ratio_to_mrv2": "ratio",
    "track_bandwidth_fraction": "fraction of copy bandwidth",
}
SAMPLES = 10
NOISE = 0.003  # relative spread of the per-call samples and of the run-to-run level
AXES = (
    "subject",
    "mode",
    "draft",
    "num_reqs",
    "num_speculative_steps",
    "vocab_size",
    "placeholder_density",
    "placeholder_pattern",
    "stage",
)


def commit_hash(label: str) -> str:
    return hashlib.sha1(label.encode()).hexdigest()


def benchmark_name(tier: str, sweep: str, metric: str) -> str:
    family = "Latency" if metric == "time_sample" else "Derived"
    module = "bench_stages" if metric == "track_stage_us" else "bench_sampler"
    suffix = "" if metric == "track_stage_us" else family
    return f"{module}.{tier.capitalize()}{sweep}{suffix}.{metric}"


def row(
    *,
    commit: str,
    date: pd.Timestamp,
    tier: str,
    sweep: str,
    metric: str,
    point: dict,
    seconds: float | None,
    rng: np.random.Generator,
    status: str = "ok",
    semantics: str | None = None,
    reason: str | None = None,
    machine: str = MACHINE,
) -> dict:
    """One result row; ``seconds`` is the point's latency (the value is derived per metric)
    and None for a point that did not produce one."""
    name = benchmark_name(tier, sweep, metric)
    out = {
        "commit": commit,
        "date": date,
        "machine": machine,
        "env": "synthetic",
        "gpu": "NVIDIA H200",
        "driver": "580.0",
        "cuda": "13.0",
        "torch": "2.11",
        "triton": "3.6",
        "benchmark": name,
        **split_benchmark_name(name),
        "unit": UNITS[metric],
        **{a: BASE_POINT.get(a) for a in AXES if a != "subject"},
        **point,
        "status": status,
        "semantics": semantics,
        "reason": reason,
    }
    if seconds is None or status != "ok":
        return {**out, "value": np.nan}
    if metric == "time_sample":
        samples = np.sort(seconds * (1 + NOISE * rng.standard_normal(SAMPLES)))
        q25, median, q75 = np.percentile(samples, [25, 50, 75])
        half = 2.6 * NOISE * seconds / np.sqrt(SAMPLES)
        return {
            **out,
            "value": median,
            "q25": q25,
            "q75": q75,
            "ci_lo": median - half,
            "ci_hi": median + half,
            "n_samples": SAMPLES,
            "samples": samples.tolist(),
        }
    value = {
        "track_latency_us": seconds * 1e6,
        "track_stage_us": seconds * 1e6,
        "track_ratio_to_mrv2": 1.0,
        "track_bandwidth_fraction": 1e-6 / seconds,
    }[metric]
    return {**out, "value": value}


def latency(mode: str, draft: str, phi: float, num_reqs: int = 128, *, placeholder_fix: bool) -> float:
    """A plausible latency in seconds: larger batches take longer; without the placeholder
    fix, placeholders cost in the modes that read draft logits."""
    base = 20e-6 + 0.6e-6 * num_reqs * (0.5 if mode == "greedy" else 1.0)
    reads_drafts = mode in ("standard", "block") and draft == "logits"
    cost = 0.40 * phi if reads_drafts and not placeholder_fix else 0.40 * phi * 0.55 if reads_drafts else 0.0
    return base * (1 + cost)


# ---------------------------------------------------------------------------------------------
# A history over commits
# ---------------------------------------------------------------------------------------------


def history_frame(
    *,
    commits: int = 6,
    fast_step_at: int = 3,
    fast_change: float = -0.10,
    mrv2_step_at: int = 4,
    mrv2_change: float = 0.12,
    seed: int = 1,
    machine: str = MACHINE,
) -> pd.DataFrame:
    """Nightly Batch sweep (time_sample, track_latency_us, track_ratio_to_mrv2) over
    ``commits`` commits, one a day, for mrv2, mrv2-pre50939 and fast at R = 8, 128.

    Planted: fast changes by ``fast_change`` from commit ``fast_step_at`` on, mrv2 by
    ``mrv2_change`` from ``mrv2_step_at`` on (a regression); mrv2-pre50939 never changes. Each
    run's level moves by NOISE (0.3%), well under the noise floor. mrv2's ratio to itself is
    recorded as failed, as older runs did.
    """
    rng = np.random.default_rng(seed)
    rows = []
    for c in range(commits):
        commit = commit_hash(f"commit-{c}")
        date = pd.Timestamp("2026-11-01", tz="UTC") + pd.Timedelta(days=c)
        for subject, mode, r in itertools.product(OURS, MODES, (8, 128)):
            seconds = latency(mode, "logits", 0.5, r, placeholder_fix=True)
            if subject == "fast":
                seconds *= 0.8 * (1 + fast_change if c >= fast_step_at else 1)
            if subject == "mrv2" and c >= mrv2_step_at:
                seconds *= 1 + mrv2_change
            seconds *= 1 + NOISE * rng.standard_normal()
            point = {"subject": subject, "mode": mode, "num_reqs": r}
            for metric in ("time_sample", "track_latency_us"):
                rows.append(
                    row(
                        commit=commit,
                        date=date,
                        tier="nightly",
                        sweep="Batch",
                        metric=metric,
                        point=point,
                        seconds=seconds,
                        rng=rng,
                        machine=machine,
                    )
                )
            self_ratio = subject == "mrv2"
            rows.append(
                row(
                    commit=commit,
                    date=date,
                    tier="nightly",
                    sweep="Batch",
                    metric="track_ratio_to_mrv2",
                    point=point,
                    seconds=seconds,
                    rng=rng,
                    status="failed" if self_ratio else "ok",
                    machine=machine,
                )
            )
    return to_frame(rows)


# ---------------------------------------------------------------------------------------------
# The releases tier at one commit
# ---------------------------------------------------------------------------------------------


def releases_frame(
    *,
    releases=RELEASES,
    commit_label: str = "releases-run",
    seed: int = 2,
    date: str = "2026-11-10",
    crash=("0.29.0", "block", "logits", 1.0),
    violates=("0.26.0", "standard", "one-hot", 0.5),
    other_stream: str = "0.26.0",
) -> pd.DataFrame:
    """The releases tier (Density at phi 0, 0.5, 1, trailing; Shape at R 8, 128) for
    ``releases`` and ours, at one commit, time_sample and track_latency_us.

    Planted: the releases from 0.28.0 on have the placeholder fix (standard and block with
    draft logits: at phi=1 the latency drops from 1.40 to 1.22 of phi=0's, -12.9%, at phi=0.5
    -7.5%, so also in the Shape sweep, which holds phi at 0.5; nothing changes at phi=0, with
    one-hot drafts or in greedy); ``crash`` = (release, mode, draft, phi) crashed;
    ``violates`` = (release, mode, draft, phi) violates placeholder semantics;
    ``other_stream``'s points draw other random numbers ("same semantics, other stream").
    mrv2 and fast have the fix (mrv2-pre50939 not); fast is 0.6x mrv2.
    """
    rng = np.random.default_rng(seed)
    commit = commit_hash(commit_label)
    when = pd.Timestamp(date, tz="UTC")
    rows = []
    subjects = [*OURS, *(f"vllm=={r}" for r in releases)]
    points = [
        ("Density", {"mode": m, "draft": d, "placeholder_density": phi})
        for m, d, phi in itertools.product(MODES, ("logits", "one-hot"), (0.0, 0.5, 1.0))
    ]
    points += [("Shape", {"mode": m, "num_reqs": r}) for m, r in itertools.product(MODES, (8, 128))]
    for subject, (sweep, point) in itertools.product(subjects, points):
        release = subject.removeprefix("vllm==") if subject.startswith("vllm==") else None
        fixed = subject in ("mrv2", "fast") or (release is not None and _at_least(release, "0.28.0"))
        full = {**{a: BASE_POINT[a] for a in ("draft", "placeholder_density")}, **point}
        seconds = latency(
            full["mode"],
            full["draft"],
            full["placeholder_density"],
            full.get("num_reqs", BASE_POINT["num_reqs"]),
            placeholder_fix=fixed,
        )
        seconds *= (0.6 if subject == "fast" else 1.0) * (1 + NOISE * rng.standard_normal())
        status, semantics, reason = "ok", "same draws", None
        if release == other_stream:
            semantics = "same semantics, other stream"
        key = (release, full["mode"], full["draft"], full["placeholder_density"])
        if sweep == "Density" and key == tuple(crash):
            status, semantics, reason = "crashed", "crashed", "worker died: signal 11"
        if sweep == "Density" and key == tuple(violates):
            semantics = "violates placeholder semantics"
        for metric in ("time_sample", "track_latency_us"):
            rows.append(
                row(
                    commit=commit,
                    date=when,
                    tier="releases",
                    sweep=sweep,
                    metric=metric,
                    point={"subject": subject, **point},
                    seconds=seconds,
                    rng=rng,
                    status=status,
                    semantics=semantics if subject.startswith("vllm") else None,
                    reason=reason,
                )
            )
    return to_frame(rows)


def placeholders_frame(
    *, commit_label: str = "placeholders-run", date: str = "2026-11-08", seed: int = 3
) -> pd.DataFrame:
    """A nightly "Placeholders" sweep at phi 0, 0.5, 1 for both draft kinds, mrv2 (with the
    placeholder fix), mrv2-pre50939 (without) and fast (0.6x mrv2), time_sample and
    track_latency_us, at one commit: what the placeholder panel draws."""
    rng = np.random.default_rng(seed)
    commit, when = commit_hash(commit_label), pd.Timestamp(date, tz="UTC")
    rows = []
    for subject, mode, draft, phi in itertools.product(OURS, MODES, ("logits", "one-hot"), (0.0, 0.5, 1.0)):
        seconds = latency(mode, draft, phi, placeholder_fix=subject != "mrv2-pre50939")
        seconds *= (0.6 if subject == "fast" else 1.0) * (1 + NOISE * rng.standard_normal())
        point = {"subject": subject, "mode": mode, "draft": draft, "placeholder_density": phi}
        for metric in ("time_sample", "track_latency_us"):
            rows.append(
                row(
                    commit=commit,
                    date=when,
                    tier="nightly",
                    sweep="Placeholders",
                    metric=metric,
                    point=point,
                    seconds=seconds,
                    rng=rng,
                )
            )
    return to_frame(rows)


STAGE_US = {"stats": 40.0, "cum_log_p": 3.0, "residual_mass": 20.0, "rejection": 4.0, "resample": 30.0, "insert": 3.0}


def stages_frame(*, commit_label: str = "stages-run", date: str = "2026-11-08") -> pd.DataFrame:
    """NightlyStages (track_stage_us, draft logits) at phi 0, 0.5, 1 for mrv2 and
    mrv2-pre50939: mrv2's residual-mass kernel takes (1 - phi / 2) of the replica's (-50% at
    phi=1, unchanged at phi=0); every other stage is the same; greedy skips the residual mass
    and the rejection (as the suite does: NotImplementedError in setup)."""
    rng = np.random.default_rng(4)
    commit, when = commit_hash(commit_label), pd.Timestamp(date, tz="UTC")
    rows = []
    for subject, mode, phi, (stage, us) in itertools.product(
        ("mrv2", "mrv2-pre50939"), MODES, (0.0, 0.5, 1.0), STAGE_US.items()
    ):
        skipped = mode == "greedy" and stage in ("residual_mass", "rejection")
        if stage == "residual_mass" and subject == "mrv2":
            us *= 1 - phi / 2
        rows.append(
            row(
                commit=commit,
                date=when,
                tier="nightly",
                sweep="Stages",
                metric="track_stage_us",
                point={"subject": subject, "mode": mode, "placeholder_density": phi, "stage": stage},
                seconds=us * 1e-6,
                rng=rng,
                status="skipped" if skipped else "ok",
            )
        )
    return to_frame(rows)


def peers_frame(
    *, commit_label: str = "peers-run", date: str = "2026-11-08", kernel_fraction: float = 1.3
) -> pd.DataFrame:
    """At one commit: QuickShape latency (R 8, 512 x V 32000, 262144, mode standard) of mrv2,
    fast (0.6x) and torch-eager (20x mrv2), and NightlyPeers bandwidth fractions of mrv2 (0.4)
    and flashinfer-kernel (``kernel_fraction``, above 1 by default) at R 8, 128."""
    rng = np.random.default_rng(5)
    commit, when = commit_hash(commit_label), pd.Timestamp(date, tz="UTC")
    rows = []
    scale = {"mrv2": 1.0, "fast": 0.6, "torch-eager": 20.0}
    for subject, r, v in itertools.product(scale, (8, 512), (32000, 262144)):
        seconds = latency("standard", "logits", 0.5, r, placeholder_fix=True) * v / 151936 * scale[subject]
        rows.append(
            row(
                commit=commit,
                date=when,
                tier="quick",
                sweep="Shape",
                metric="time_sample",
                point={"subject": subject, "mode": "standard", "num_reqs": r, "vocab_size": v},
                seconds=seconds * (1 + NOISE * rng.standard_normal()),
                rng=rng,
            )
        )
    for subject, r in itertools.product(("mrv2", "flashinfer-kernel"), (8, 128)):
        fraction = 0.4 if subject == "mrv2" else kernel_fraction
        rows.append(
            row(
                commit=commit,
                date=when,
                tier="nightly",
                sweep="Peers",
                metric="track_bandwidth_fraction",
                point={"subject": subject, "num_reqs": r},
                seconds=1e-6 / fraction,
                rng=rng,
            )
        )
    return to_frame(rows)


def site_frame() -> pd.DataFrame:
    """Everything above in one frame: what the dashboard tests build their site from."""
    parts = [history_frame(), placeholders_frame(), stages_frame(), peers_frame(), releases_frame()]
    return to_frame([r for part in parts for r in part.to_dict("records")])


def _at_least(version: str, other: str) -> bool:
    return tuple(map(int, version.split("."))) >= tuple(map(int, other.split(".")))


# ---------------------------------------------------------------------------------------------
# asv's results directory
# ---------------------------------------------------------------------------------------------

_RESULT_COLUMNS = [
    "result",
    "params",
    "version",
    "started_at",
    "duration",
    "stats_ci_99_a",
    "stats_ci_99_b",
    "stats_q_25",
    "stats_q_75",
    "stats_number",
    "stats_repeat",
    "samples",
    "profile",
]


def write_asv_results(frame: pd.DataFrame, results: Path, provenance: dict | None = None) -> Path:
    """``frame`` as asv 0.6.6 writes results: ``benchmarks.json``, one ``<sha8>-<env>.json``
    per machine and commit, and a ``<sha8>.outcomes`` per run with the rows' status, semantics
    and reason (and ``provenance``: {subject: record}). Each benchmark's params are the values
    its rows take; combinations without a row are stored as skipped (NaN)."""
    results.mkdir(parents=True, exist_ok=True)
    benchmarks: dict = {"version": 2}
    axes = [a for a in AXES if a in frame]
    for name, rows in frame.groupby("benchmark"):
        names = [a for a in axes if rows[a].notna().any()]
        params = [[repr(_plain(v)) for v in sorted(rows[a].dropna().unique(), key=str)] for a in names]
        benchmarks[name] = {
            "name": name,
            "param_names": [asv_name(a) for a in names],
            "params": params,
            "unit": str(rows["unit"].iloc[0]),
            "type": "time" if name.endswith("time_sample") else "track",
            "version": "1",
        }
    (results / "benchmarks.json").write_text(json.dumps(benchmarks))
    for (machine, commit), run in frame.groupby(["machine", "commit"]):
        folder = results / machine
        folder.mkdir(exist_ok=True)
        (folder / "machine.json").write_text(json.dumps({"machine": machine, "version": 1}))
        entries = {}
        for name, rows in run.groupby("benchmark"):
            meta = benchmarks[name]
            names = [a for a in axes if asv_name(a) in meta["param_names"]]
            by_combo = {tuple(repr(_plain(r[a])) for a in names): r for r in rows.to_dict("records")}
            columns = {
                c: []
                for c in (
                    "result",
                    "stats_ci_99_a",
                    "stats_ci_99_b",
                    "stats_q_25",
                    "stats_q_75",
                    "stats_repeat",
                    "samples",
                )
            }
            for combo in itertools.product(*meta["params"]):
                r = by_combo.get(combo)
                if r is None:
                    columns["result"].append(float("nan"))
                    for c in list(columns)[1:]:
                        columns[c].append(None)
                    continue
                ok = r["status"] == "ok"
                skipped = r["status"] == "skipped"
                columns["result"].append(float(r["value"]) if ok else float("nan") if skipped else None)
                for c, source in (
                    ("stats_ci_99_a", "ci_lo"),
                    ("stats_ci_99_b", "ci_hi"),
                    ("stats_q_25", "q25"),
                    ("stats_q_75", "q75"),
                ):
                    columns[c].append(_number(r.get(source)) if ok else None)
                columns["stats_repeat"].append(int(r["n_samples"]) if ok and _number(r.get("n_samples")) else None)
                columns["samples"].append(list(r["samples"]) if ok and isinstance(r.get("samples"), list) else None)
            entries[name] = [
                columns["result"],
                meta["params"],
                "1",
                0,
                1.0,
                columns["stats_ci_99_a"],
                columns["stats_ci_99_b"],
                columns["stats_q_25"],
                columns["stats_q_75"],
                None,
                columns["stats_repeat"],
                columns["samples"],
            ]
        date = pd.Timestamp(run["date"].iloc[0])
        data = {
            "version": 2,
            "commit_hash": commit,
            "env_name": "synthetic",
            "date": int(date.timestamp() * 1000),
            "params": {"machine": machine},
            "python": "3.12",
            "requirements": {},
            "env_vars": {},
            "result_columns": _RESULT_COLUMNS,
            "results": entries,
        }
        (folder / f"{commit[:8]}-synthetic.json").write_text(json.dumps(data))
        first = run.iloc[0]
        (folder / f"{commit[:8]}.gpuinfo").write_text(
            json.dumps({k: _text(first.get(k)) for k in ("gpu", "driver", "cuda", "torch", "triton")})
        )
        outcomes = [
            {
                "tier": r["tier"],
                "sweep": r["sweep"],
                "subject": r["subject"],
                "point": {a: _plain(r[a]) for a in axes if a not in ("subject", "stage")},
                "status": r["status"],
                "semantics": _text(r.get("semantics")),
                "reason": _text(r.get("reason")),
            }
            for r in run.to_dict("records")
            if _text(r.get("semantics")) or r["status"] != "ok"
        ]
        subjects = {s: rec for s, rec in (provenance or {}).items() if s in set(run["subject"])}
        (folder / f"{commit[:8]}.outcomes").write_text(
            json.dumps({"version": 1, "subjects": subjects, "points": outcomes})
        )
    return results


def _plain(value):
    if isinstance(value, (np.integer,)):
        return int(value)
    if isinstance(value, (np.floating,)):
        return float(value)
    return value


def _number(value):
    if value is None or value is pd.NA:
        return None
    value = float(value)
    return None if np.isnan(value) else value


def _text(value):
    if value is None or value is pd.NA or (isinstance(value, float) and np.isnan(value)):
        return None
    return str(value)
