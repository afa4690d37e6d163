"""asv result files to one tidy DataFrame: the seam between the benchmark suite and everything else.

This module is the only place that reads asv's JSON. Sign-off (``signoff.py``) and dashboards
(``dashboard.py``) read the frame that :func:`load_results` returns, never the files.

Layout read (asv 0.6.6, ``results_dir`` from ``asv.conf.json``)::

    results/benchmarks.json                      param_names, params, unit, type per benchmark
    results/<machine>/machine.json               asv machine info (no GPU field)
    results/<machine>/<sha8>-<env>.json          one file per (commit, environment)
    results/<machine>/<sha8>.gpuinfo               GPU, driver, CUDA, torch, triton (our suite's)

A result file stores, per benchmark, one row of values aligned with its ``result_columns``
(``result``, ``params``, ``version``, ``started_at``, ``duration``, ``stats_ci_99_a``,
``stats_ci_99_b``, ``stats_q_25``, ``stats_q_75``, ``stats_number``, ``stats_repeat``,
``samples``, ``profile``); trailing ``null`` columns are dropped, and a column whose entries are
all ``null`` is stored as a single ``null``. Parametrized values are flat lists in
``itertools.product(*params)`` order, params being Python ``repr`` strings. In ``result``,
``null`` means the benchmark failed and ``NaN`` means it was skipped (``NotImplementedError`` in
``setup``).
"""

from __future__ import annotations

import ast
import itertools
import json
import logging
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from ..schema import AXES, PATH_AXES, PATH_DEFAULTS, axis_name
from ..schema import TIERS as SCHEMA_TIERS

logger = logging.getLogger(__name__)

# ---------------------------------------------------------------------------------------------
# Column contract
# ---------------------------------------------------------------------------------------------

# One row per (benchmark, commit, machine, env, parameter combination). Every consumer selects
# by these names; parameters that are not listed here (a new axis added to the suite) are
# appended after them as extra columns, parsed from their repr, so nothing is lost.
COLUMNS: dict[str, str] = {
    "commit": "str",  # full 40-hex commit hash
    "date": "datetime64[ms, UTC]",  # commit date asv recorded (ms resolution in the file)
    "machine": "str",
    "env": "str",  # asv environment name, e.g. "existing-py_..._python3"
    "gpu": "str",  # from <sha8>.gpuinfo; missing file -> NaN (pandas "str" missing value)
    "driver": "str",
    "cuda": "str",
    "torch": "str",
    "triton": "str",
    "benchmark": "str",  # full asv name, "<module>.<Class>.<method>"
    "module": "str",  # "bench_sampler"
    "tier": "str",  # "smoke" | "quick" | "nightly" | "full"; missing without a tier prefix
    "sweep": "str",  # class name less tier and family: "NightlyBatchLatency" -> "Batch"
    "metric": "str",  # method name, "time_sample"
    "unit": "str",  # asv unit from benchmarks.json: "seconds" for time_*, the attribute for track_*
    "subject": "str",  # what was measured: "mrv2", "vllm==0.33.0", ... (asv parameter "variant")
    "mode": "str",
    "draft": "str",
    "num_reqs": "Int64",
    "num_speculative_steps": "Int64",  # K (asv parameter "K")
    "vocab_size": "Int64",
    "placeholder_density": "float64",  # phi (asv parameter "phi")
    "placeholder_pattern": "str",  # "trailing" | "random" | "all" (asv parameter "pattern")
    "stage": "str",
    # vLLM's newer sampler paths (specsample.schema.PATH_AXES): a row of a sweep that does not
    # vary one (every result older than these axes) holds its default, PATH_DEFAULTS.
    "logits_shape": "str",
    "row_entropy": "str",
    "masked_vocab_fraction": "float64",
    "skip_masked_vocab_blocks": "boolean",
    "fly_window_size": "Int64",
    "watermark": "boolean",
    "draft_cache": "str",
    "value": "float64",  # median of the samples for time_*, the returned number for track_*
    "ci_lo": "float64",  # asv's 99% confidence interval of the median (time_* only)
    "ci_hi": "float64",
    "q25": "float64",
    "q75": "float64",
    "n_samples": "Int64",  # samples behind value (asv's stats "repeat"); <NA> for track_*
    "samples": "object",  # list[float] per-call times when run with --record-samples, else None
    "status": "str",  # "ok" | "failed" (asv null) | "skipped" (asv NaN) | "crashed" (outcomes)
    "semantics": "str",  # specsample.schema.SEMANTICS of the subject at this point (outcomes)
    "reason": "str",  # why a point crashed, failed or was skipped, where the run recorded it
    # GPU state per sample (specsample.gpustate), where the measurement recorded it:
    "capped": "boolean",  # sampling stopped on the time cap before reaching its noise target
    "n_throttled": "Int64",  # samples left out: taken while the GPU was throttled
    "sm_clock_mhz": "float64",  # median SM clock over the kept samples
    # From the output check at the point (outcomes): accepted drafts over valid drafts, and
    # drafts accepted by a confirmed FLy deferral over valid drafts (FLy points only).
    "acceptance_rate": "float64",
    "deferral_rate": "float64",
}

# The parameter axes of the suite under their canonical names (specsample.schema.AXES); asv's
# parameter names are mapped to them here, on loading (specsample.schema.axis_name).
PARAM_COLUMNS: tuple[str, ...] = (*AXES, *PATH_AXES)
ENV_COLUMNS: tuple[str, ...] = ("gpu", "driver", "cuda", "torch", "triton")
# Class-name prefixes (specsample.schema.TIERS, capitalised) and the metric-family suffixes the
# suite's class factory appends (benchmarks/common.py: make_classes). Both are stripped so that
# "sweep" names the sweep, and a sweep's Latency and Derived classes share it.
TIERS: tuple[str, ...] = tuple(t.capitalize() for t in SCHEMA_TIERS)
FAMILY_SUFFIXES: tuple[str, ...] = ("Latency", "Derived")

# asv's file-format versions (asv.results.Results.api_version, asv.benchmarks.Benchmarks
# .api_version). A file with another version is skipped, not guessed at.
RESULTS_API_VERSION = 2
BENCHMARKS_API_VERSION = 2

_NOT_RESULT_FILES = {"machine.json", "benchmarks.json"}
# JSON, but not named *.json: asv would try to read it as a result file and warn.
_GPUINFO_SUFFIX = ".gpuinfo"
OUTCOMES_SUFFIX = ".outcomes"  # per point: status, semantics, reason; per subject: provenance
_STATS_FIELDS = {  # asv result column -> our column
    "stats_ci_99_a": "ci_lo",
    "stats_ci_99_b": "ci_hi",
    "stats_q_25": "q25",
    "stats_q_75": "q75",
    "stats_repeat": "n_samples",
}


@dataclass(frozen=True)
class Problem:
    """A file, or one benchmark inside a file, that the loader skipped, and why."""

    path: Path
    reason: str


class _Skip(Exception):
    """Raised inside the loader for content that becomes a :class:`Problem`."""


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def load_results(results_dir: str | Path) -> tuple[pd.DataFrame, list[Problem]]:
    """Read every machine directory under ``results_dir`` into one tidy frame.

    Parameters
    ----------
    results_dir : str or Path
        asv's ``results_dir`` (holding ``benchmarks.json`` and one directory per machine).

    Returns
    -------
    frame : DataFrame
        Columns :data:`COLUMNS` in that order with those dtypes, then any parameter axes not in
        :data:`PARAM_COLUMNS`. Rows are sorted by machine, date, benchmark.
    problems : list of Problem
        Files or benchmark entries that were skipped (corrupt or truncated JSON, a format
        version other than asv 0.6.6's, values that do not match their params). Each is also
        logged as a warning naming the file.

    Examples
    --------
    >>> df, problems = load_results("results")          # doctest: +SKIP
    >>> df[df.metric == "time_sample"].groupby("subject").value.median()  # doctest: +SKIP
    """
    results_dir = Path(results_dir)
    problems: list[Problem] = []
    benchmarks = _load_benchmarks(results_dir / "benchmarks.json", problems)
    rows: list[dict] = []
    outcomes: list[dict] = []
    for machine_dir in sorted(p for p in results_dir.iterdir() if p.is_dir()):
        gpuinfo = _load_gpuinfo(machine_dir, problems)
        for path in _result_files(machine_dir):
            rows.extend(_rows_from_file(path, benchmarks, gpuinfo, problems))
        outcomes.extend(_load_outcomes(machine_dir, problems))
    for problem in problems:
        logger.warning("skipped %s: %s", problem.path.name, problem.reason)
    return apply_outcomes(to_frame(rows), outcomes), problems


def load_provenance(results_dir: str | Path) -> dict[tuple[str, str], dict[str, dict]]:
    """``(machine, sha8) -> {subject: provenance}`` from the runs' ``<sha8>.outcomes`` files:
    what code each subject was (release, commit, file hashes)."""
    out: dict[tuple[str, str], dict[str, dict]] = {}
    for machine_dir in sorted(p for p in Path(results_dir).iterdir() if p.is_dir()):
        for path in sorted(machine_dir.glob(f"*{OUTCOMES_SUFFIX}")):
            try:
                out[(machine_dir.name, path.stem[:8])] = dict(_read_json(path).get("subjects", {}))
            except _Skip:
                continue
    return out


def commit_order(df: pd.DataFrame) -> pd.DataFrame:
    """Commits per machine in date order.

    Returns a frame with columns ``machine``, ``commit``, ``date``, ``position`` (0 for the
    oldest commit of that machine). Ties in date keep the first-seen order of the hash so the
    result is deterministic.
    """
    commits = (
        df[["machine", "commit", "date"]]
        .drop_duplicates(["machine", "commit"])
        .sort_values(["machine", "date", "commit"], kind="stable")
        .reset_index(drop=True)
    )
    commits["position"] = commits.groupby("machine").cumcount().astype("Int64")
    return commits


def point_ratio(rows: pd.DataFrame, numerator: str, denominator: str, key: list[str]) -> pd.Series:
    """``numerator``'s value over ``denominator``'s (two subjects) at every point of ``key`` (the
    sweep and axes, less the subject) where both have a row; the median where a point has
    several. Indexed by ``key``, NaN axes (a sampler row's stage) kept."""

    def side(subject: str) -> pd.Series:
        return rows[rows["subject"] == subject].groupby(key, dropna=False)["value"].median()

    return (side(numerator) / side(denominator)).dropna()


def latest_commit(df: pd.DataFrame, machine: str) -> str | None:
    """The newest commit (by date) with results on ``machine``, or None if it has none."""
    order = commit_order(df)
    order = order[(order.machine == machine) & order.commit.notna()]
    return None if order.empty else str(order.commit.iloc[-1])


def machine_environment(
    df: pd.DataFrame, machine: str | None = None, commit: str | None = None
) -> dict[str, str | None]:
    """machine, commit, gpu, driver, cuda, torch, triton of one run, for reports.

    Defaults: the machine of the newest row, and that machine's newest commit. Values the
    suite did not record are None.
    """
    if df.empty:
        return dict.fromkeys(("machine", "commit", *ENV_COLUMNS))
    if machine is None:
        machine = str(df.sort_values("date", kind="stable")["machine"].iloc[-1])
    commit = commit or latest_commit(df, machine)
    rows = df[df["machine"] == machine]
    if commit is not None:  # rows of subjects rather than commits (a sign-off of two releases) have none
        rows = rows[rows["commit"] == commit]
    info: dict[str, str | None] = {"machine": machine, "commit": commit}
    for column in ENV_COLUMNS:
        values = rows[column].dropna() if column in rows else ()
        info[column] = str(values.iloc[0]) if len(values) else None
    return info


def split_benchmark_name(name: str) -> dict[str, str | None]:
    """``"bench_sampler.NightlyBatchLatency.time_sample"`` -> module, tier, sweep, metric.

    The class-name prefix is the tier (Smoke, Quick, Nightly, Full, lowercased); the rest of the
    class name, less a metric-family suffix (Latency, Derived), is the sweep ("Batch"). A class
    without a tier prefix has tier None and its whole name as sweep; a function benchmark
    (``module.time_x``) has neither.
    """
    parts = name.split(".")
    if len(parts) < 3:
        return {"module": parts[0] if len(parts) == 2 else None, "tier": None, "sweep": None, "metric": parts[-1]}
    module, cls, metric = ".".join(parts[:-2]), parts[-2], parts[-1]
    tier = next((t for t in TIERS if cls.startswith(t) and len(cls) > len(t)), None)
    sweep = cls[len(tier) :] if tier else cls
    suffix = next((f for f in FAMILY_SUFFIXES if sweep.endswith(f) and len(sweep) > len(f)), None)
    if tier and suffix:
        sweep = sweep[: -len(suffix)]
    return {"module": module, "tier": tier.lower() if tier else None, "sweep": sweep, "metric": metric}


def parse_param(text: str) -> object:
    """An asv parameter repr (``"'mrv2'"``, ``"128"``, ``"0.5"``) back to its Python value.

    Reprs that are not literals (``"<class 'torch.float16'>"``) stay as the text.
    """
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return text


def load_asv_regressions(html_dir: str | Path) -> tuple[pd.DataFrame, list[Problem]]:
    """Read the steps ``asv publish`` detected (``html/regressions.json``) into a frame.

    ``regressions.json`` holds ``{"regressions": [[name, graph_path, graph_params, param_index,
    last_value, best_value, jumps], ...]}`` where each jump is ``[rev_before or null, rev_after,
    value_before, value_after]`` in asv's revision numbers (``null``: the step is one commit).
    ``html/index.json`` maps revisions to hashes and holds the benchmarks' params, so both are
    needed.

    Returns
    -------
    frame : DataFrame
        One row per jump: ``benchmark``, ``module``, ``tier``, ``sweep``, ``metric``,
        ``machine``, the parameter columns, ``commit_before`` (missing when the step is pinned to a
        single commit), ``commit_after``, ``value_before``, ``value_after``, ``change``
        (``value_after / value_before - 1``), ``last_value``, ``best_value``. Empty when
        ``regressions.json`` is absent.
    problems : list of Problem
    """
    html_dir = Path(html_dir)
    problems: list[Problem] = []
    path = html_dir / "regressions.json"
    if not path.exists():
        return _regressions_frame([]), problems
    try:
        entries = _read_json(path)["regressions"]
        index = _read_json(html_dir / "index.json")
        revision_to_hash = {int(k): v for k, v in index["revision_to_hash"].items()}
        benchmarks = index["benchmarks"]
    except (_Skip, KeyError, TypeError, ValueError, OSError) as exc:
        problems.append(Problem(path, f"cannot read asv regressions: {exc}"))
        logger.warning("skipped %s: %s", path.name, problems[-1].reason)
        return _regressions_frame([]), problems
    rows = []
    for entry in entries:
        try:
            rows.extend(_regression_rows(entry, benchmarks, revision_to_hash))
        except (KeyError, IndexError, TypeError, ValueError) as exc:
            problems.append(Problem(path, f"malformed entry {entry!r:.80}: {exc}"))
    for problem in problems:
        logger.warning("skipped %s: %s", problem.path.name, problem.reason)
    return _regressions_frame(rows), problems


# ---------------------------------------------------------------------------------------------
# Reading files
# ---------------------------------------------------------------------------------------------


def _read_json(path: Path) -> dict:
    """Parse one JSON file; corrupt, truncated or unreadable files raise _Skip."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)  # asv writes NaN for skipped results; json accepts it
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise _Skip(f"unreadable JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise _Skip(f"expected a JSON object, got {type(data).__name__}")
    return data


def _check_version(data: dict, expected: int) -> None:
    """asv refuses files of another api_version; so do we, rather than misparse them."""
    version = data.get("version")
    if version != expected:
        raise _Skip(f"asv file format version {version!r}, this loader reads {expected} (asv 0.6.6)")


def _load_benchmarks(path: Path, problems: list[Problem]) -> dict[str, dict]:
    """benchmarks.json: name -> {param_names, unit, ...}. Missing -> {} (params named param1..)."""
    if not path.exists():
        problems.append(Problem(path, "no benchmarks.json: parameters named param1, param2, ..."))
        return {}
    try:
        data = _read_json(path)
        _check_version(data, BENCHMARKS_API_VERSION)
    except _Skip as exc:
        problems.append(Problem(path, str(exc)))
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict)}


def _result_files(machine_dir: Path) -> list[Path]:
    return sorted(p for p in machine_dir.glob("*.json") if p.name not in _NOT_RESULT_FILES)


def _load_gpuinfo(machine_dir: Path, problems: list[Problem]) -> dict[str, dict]:
    """sha8 -> {gpu, driver, cuda, torch, triton} from <sha8>.gpuinfo files."""
    info = {}
    for path in sorted(machine_dir.glob(f"*{_GPUINFO_SUFFIX}")):
        try:
            data = _read_json(path)
        except _Skip as exc:
            problems.append(Problem(path, str(exc)))
            continue
        sha8 = path.stem[:8]
        info[sha8] = {k: None if data.get(k) is None else str(data[k]) for k in ENV_COLUMNS}
    return info


def _load_outcomes(machine_dir: Path, problems: list[Problem]) -> list[dict]:
    """Rows of every ``<sha8>.outcomes`` file (written by ``specsample bench``): one per
    (sweep, point, subject), with its status, semantics and reason."""
    rows = []
    for path in sorted(machine_dir.glob(f"*{OUTCOMES_SUFFIX}")):
        try:
            data = _read_json(path)
            for record in data.get("points", []):
                rows.append(
                    {
                        "machine": machine_dir.name,
                        "sha8": path.stem[:8],
                        "tier": record["tier"],
                        "sweep": record["sweep"],
                        **record["point"],
                        "subject": record["subject"],
                        "o_status": record.get("status"),
                        "o_semantics": record.get("semantics"),
                        "o_reason": record.get("reason"),
                        "o_n_throttled": record.get("n_throttled"),
                        "o_sm_clock_mhz": record.get("sm_clock_mhz"),
                        "o_acceptance_rate": record.get("acceptance_rate"),
                        "o_deferral_rate": record.get("deferral_rate"),
                    }
                )
        except (_Skip, KeyError, TypeError, AttributeError) as exc:
            problems.append(Problem(path, f"unreadable outcomes ({exc})"))
    return rows


_OUTCOME_KEY = ("machine", "sha8", "tier", "sweep", *(a for a in AXES if a != "stage"), *PATH_AXES)


def apply_outcomes(frame: pd.DataFrame, outcomes: list[dict]) -> pd.DataFrame:
    """``frame`` with each row's ``semantics`` and ``reason`` from the outcomes, and ``status``
    ``crashed`` where asv recorded a failure and the run recorded a crash."""
    if frame.empty or not outcomes:
        return frame
    found = with_path_defaults(pd.DataFrame(outcomes)).drop_duplicates(list(_OUTCOME_KEY), keep="last")
    keyed = frame.assign(sha8=frame["commit"].str[:8])
    for column in _OUTCOME_KEY:
        if column in found and column in keyed:
            found[column] = _as_dtype(found[column], str(keyed[column].dtype)) if column in COLUMNS else found[column]
    merged = keyed.merge(found, on=list(_OUTCOME_KEY), how="left")
    crashed = (merged["o_status"] == "crashed").fillna(False).to_numpy(dtype=bool)
    status = merged["status"].astype(object).to_numpy(copy=True)  # writable under copy-on-write
    status[crashed & (status != "ok")] = "crashed"
    frame = frame.copy()
    frame["status"] = pd.array(status, dtype="str")
    frame["semantics"] = _as_dtype(merged["o_semantics"], "str").array
    frame["reason"] = _as_dtype(merged["o_reason"], "str").array
    for column in ("n_throttled", "sm_clock_mhz"):  # the GPU state, where the run recorded it
        frame[column] = _as_dtype(merged[f"o_{column}"], COLUMNS[column]).array
    for column in ("acceptance_rate", "deferral_rate"):
        if f"o_{column}" in merged:
            frame[column] = _as_dtype(merged[f"o_{column}"], "float64").array
    return frame


def with_path_defaults(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every path axis (:data:`specsample.schema.PATH_AXES`) present, missing
    values at their defaults: results recorded before the axes existed were measured there."""
    for axis in PATH_AXES:
        if axis not in frame:
            frame[axis] = PATH_DEFAULTS[axis]
        elif frame[axis].isna().any():
            frame[axis] = frame[axis].astype(object).where(frame[axis].notna(), PATH_DEFAULTS[axis])
    return frame


def _rows_from_file(
    path: Path, benchmarks: dict[str, dict], gpuinfo: dict[str, dict], problems: list[Problem]
) -> list[dict]:
    """All rows of one <sha8>-<env>.json; the whole file is skipped if its header is bad."""
    try:
        data = _read_json(path)
        _check_version(data, RESULTS_API_VERSION)
        header = _file_header(data, path, gpuinfo)
        columns = data["result_columns"]
        results = data["results"]
        # Well-formed JSON of the wrong shape (hand-edited, another tool's file) is skipped as a
        # whole, not half-read or crashed on.
        if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
            raise _Skip("result_columns is not a list of names")
        if not isinstance(results, dict):
            raise _Skip(f"results is a JSON {type(results).__name__}, not an object")
    except (_Skip, KeyError, TypeError, ValueError, AttributeError) as exc:
        problems.append(Problem(path, _reason(exc)))
        return []
    rows = []
    for name, stored in results.items():
        try:
            entry = dict(zip(columns, stored))
            rows.extend(_rows_from_entry(name, entry, benchmarks.get(name), header))
        except (_Skip, KeyError, TypeError, ValueError, AttributeError) as exc:
            problems.append(Problem(path, f"{name}: {_reason(exc)}"))
    return rows


def _reason(exc: Exception) -> str:
    return str(exc) if isinstance(exc, _Skip) else f"{type(exc).__name__}: {exc}"


def _file_header(data: dict, path: Path, gpuinfo: dict[str, dict]) -> dict:
    """The columns shared by every row of one result file."""
    commit = data["commit_hash"]
    if not isinstance(commit, str):
        raise _Skip("commit_hash missing")
    params = data.get("params")
    machine = (params.get("machine") if isinstance(params, dict) else None) or path.parent.name
    env = gpuinfo.get(commit[:8], dict.fromkeys(ENV_COLUMNS))
    return {
        "commit": commit,
        "date": pd.Timestamp(data["date"], unit="ms", tz="UTC") if data.get("date") else pd.NaT,
        "machine": machine,
        "env": data.get("env_name"),
        **env,
    }


def _rows_from_entry(name: str, entry: dict, meta: dict | None, header: dict) -> list[dict]:
    """Expand one benchmark's stored lists into one row per parameter combination."""
    params = entry.get("params") or []
    names = _param_names(meta, len(params))
    # Parse each axis once, then expand: product order is asv's storage order.
    combos = list(itertools.product(*([parse_param(p) for p in axis] for axis in params)))
    n = len(combos)
    values = _per_point(entry.get("result"), n, "result")
    samples = _per_point(entry.get("samples"), n, "samples")
    stats = {col: _per_point(entry.get(key), n, key) for key, col in _STATS_FIELDS.items()}
    base = {
        **header,
        "benchmark": name,
        **split_benchmark_name(name),
        "unit": (meta or {}).get("unit"),
    }
    rows = []
    for i, combo in enumerate(combos):
        row = dict(base)
        row.update(zip((axis_name(n) for n in names), combo))
        row.update(_value_fields(values[i], samples[i]))
        row.update({col: stats[col][i] for col in stats})
        rows.append(row)
    return rows


def _param_names(meta: dict | None, n_params: int) -> list[str]:
    """param_names from benchmarks.json; asv's own default names if the benchmark is unknown."""
    names = (meta or {}).get("param_names")
    if names is None:
        return [f"param{i + 1}" for i in range(n_params)]
    if len(names) != n_params:
        # The benchmark's parameters changed since this file was written: the stored values
        # no longer line up with today's names.
        raise _Skip(f"{n_params} params stored but benchmarks.json names {len(names)}")
    return list(names)


def _per_point(stored: list | None, n: int, key: str) -> list:
    """A stored column as one entry per point; asv compresses an all-null column to null."""
    if stored is None:
        return [None] * n
    if not isinstance(stored, list) or len(stored) != n:
        raise _Skip(
            f"{key} has {len(stored) if isinstance(stored, list) else 'no'} entries for {n} parameter combinations"
        )
    return stored


def _value_fields(value: float | None, samples: list | None) -> dict:
    if value is None:
        status = "failed"
    elif isinstance(value, float) and math.isnan(value):
        status = "skipped"
    else:
        status = "ok"
    return {
        "value": np.nan if value is None else float(value),
        "status": status,
        "samples": [float(s) for s in samples] if samples else None,
    }


# ---------------------------------------------------------------------------------------------
# Building the frame
# ---------------------------------------------------------------------------------------------


def to_frame(rows: list[dict]) -> pd.DataFrame:
    """Rows (dicts keyed by :data:`COLUMNS`) to a frame with the declared column order and
    dtypes, extras after them, sorted by machine, date, benchmark. Also used by
    :mod:`specsample.paired`, whose rows come from a measurement rather than asv's files."""
    raw = with_path_defaults(pd.DataFrame(rows)) if rows else pd.DataFrame(rows)
    extras = [c for c in raw.columns if c not in COLUMNS]
    frame = pd.DataFrame(index=raw.index)
    for column, dtype in COLUMNS.items():
        source = raw[column] if column in raw else pd.Series([None] * len(raw), dtype=object)
        frame[column] = _as_dtype(source, dtype)
    for column in extras:
        frame[column] = _infer_extra(raw[column])
    if not frame.empty:
        frame = frame.sort_values(["machine", "date", "benchmark"], kind="stable")
    return frame.reset_index(drop=True)


def _as_dtype(series: pd.Series, dtype: str) -> pd.Series:
    if dtype == "object":
        return series.astype(object)
    if dtype.startswith("datetime64"):
        return pd.to_datetime(series, utc=True).astype(dtype)
    if dtype == "boolean":
        return series.map(lambda v: None if _is_missing(v) else v in (True, "True", "true", 1)).astype(dtype)
    if dtype in ("Int64", "float64"):
        # A repr that is not a number (a "None" param) becomes missing rather than an error.
        numeric = pd.to_numeric(series, errors="coerce")
        return numeric.astype(dtype) if dtype == "float64" else numeric.round().astype(dtype)
    # Rows that lack a parameter come out of pd.DataFrame(rows) as float NaN, not None.
    return series.map(lambda v: None if _is_missing(v) else str(v)).astype(dtype)


def _is_missing(value: object) -> bool:
    return value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value))


def _infer_extra(series: pd.Series) -> pd.Series:
    """An unknown parameter axis: numeric if every value is a number, else strings."""
    present = series.dropna()
    if len(present) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        all_int = all(isinstance(v, int) for v in present)
        return _as_dtype(series, "Int64" if all_int else "float64")
    return _as_dtype(series, "str")


# ---------------------------------------------------------------------------------------------
# asv publish regressions
# ---------------------------------------------------------------------------------------------

_REGRESSION_VALUE_COLUMNS = {
    "commit_before": "str",
    "commit_after": "str",
    "value_before": "float64",
    "value_after": "float64",
    "change": "float64",
    "last_value": "float64",
    "best_value": "float64",
}


def _regression_rows(entry: list, benchmarks: dict, revision_to_hash: dict[int, str]) -> list:
    name, graph_path, _graph_params, index, last_value, best_value, jumps = entry
    benchmark = name.split("(")[0]
    meta = benchmarks[benchmark]
    point = {}
    if index is not None:
        combo = next(itertools.islice(itertools.product(*meta["params"]), index, None))
        point = {axis_name(n): parse_param(v) for n, v in zip(meta["param_names"], combo)}
    base = {
        "benchmark": benchmark,
        **split_benchmark_name(benchmark),
        "machine": _machine_from_graph_path(graph_path),
        **point,
        "last_value": last_value,
        "best_value": best_value,
    }
    return [
        {
            **base,
            "commit_before": None if rev_before is None else revision_to_hash[int(rev_before)],
            "commit_after": revision_to_hash[int(rev_after)],
            "value_before": value_before,
            "value_after": value_after,
            "change": value_after / value_before - 1 if value_before else np.nan,
        }
        for rev_before, rev_after, value_before, value_after in jumps
    ]


def _machine_from_graph_path(graph_path: str) -> str | None:
    """asv names graph files graphs/<key>-<value>/.../<benchmark>.json; machine is one key."""
    for part in graph_path.split("/"):
        if part.startswith("machine-"):
            return part[len("machine-") :]
    return None


def _regressions_frame(rows: list[dict]) -> pd.DataFrame:
    head = ["benchmark", "module", "tier", "sweep", "metric", "machine"]
    dtypes = {c: "str" for c in head}
    dtypes.update({c: COLUMNS[c] for c in PARAM_COLUMNS})
    dtypes.update(_REGRESSION_VALUE_COLUMNS)
    raw = with_path_defaults(pd.DataFrame(rows)) if rows else pd.DataFrame(rows)
    frame = pd.DataFrame(index=raw.index)
    for column, dtype in dtypes.items():
        source = raw[column] if column in raw else pd.Series([None] * len(raw), dtype=object)
        frame[column] = _as_dtype(source, dtype)
    for column in [c for c in raw.columns if c not in dtypes]:
        frame[column] = _infer_extra(raw[column])
    return frame
