"""asv's result files of a results directory to the one tidy frame (:func:`load_results`), with
each run's outcomes merged in (:mod:`.outcomes`).

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
import logging
import math
from pathlib import Path

import numpy as np
import pandas as pd

from ...schema import TIERS as SCHEMA_TIERS
from ...schema import axis_name
from .files import Problem, Skip, read_json
from .frame import ENV_COLUMNS, to_frame
from .outcomes import apply_outcomes, load_outcomes

logger = logging.getLogger(__name__)

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
_STATS_FIELDS = {  # asv result column -> our column
    "stats_ci_99_a": "ci_lo",
    "stats_ci_99_b": "ci_hi",
    "stats_q_25": "q25",
    "stats_q_75": "q75",
    "stats_repeat": "n_samples",
}


def load_results(results_dir: str | Path) -> tuple[pd.DataFrame, list[Problem]]:
    """Read every machine directory under ``results_dir`` into one tidy frame.

    Parameters
    ----------
    results_dir : str or Path
        asv's ``results_dir`` (holding ``benchmarks.json`` and one directory per machine).

    Returns
    -------
    frame : DataFrame
        Columns :data:`.frame.COLUMNS` in that order with those dtypes, then any parameter axes
        not in :data:`.frame.PARAM_COLUMNS`. Rows are sorted by machine, date, benchmark.
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
        outcomes.extend(load_outcomes(machine_dir, problems))
    for problem in problems:
        logger.warning("skipped %s: %s", problem.path.name, problem.reason)
    return apply_outcomes(to_frame(rows), outcomes), problems


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


def _check_version(data: dict, expected: int) -> None:
    """asv refuses files of another api_version; so do we, rather than misparse them."""
    version = data.get("version")
    if version != expected:
        raise Skip(f"asv file format version {version!r}, this loader reads {expected} (asv 0.6.6)")


def _load_benchmarks(path: Path, problems: list[Problem]) -> dict[str, dict]:
    """benchmarks.json: name -> {param_names, unit, ...}. Missing -> {} (params named param1..)."""
    if not path.exists():
        problems.append(Problem(path, "no benchmarks.json: parameters named param1, param2, ..."))
        return {}
    try:
        data = read_json(path)
        _check_version(data, BENCHMARKS_API_VERSION)
    except Skip as exc:
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
            data = read_json(path)
        except Skip as exc:
            problems.append(Problem(path, str(exc)))
            continue
        sha8 = path.stem[:8]
        info[sha8] = {k: None if data.get(k) is None else str(data[k]) for k in ENV_COLUMNS}
    return info


def _rows_from_file(
    path: Path, benchmarks: dict[str, dict], gpuinfo: dict[str, dict], problems: list[Problem]
) -> list[dict]:
    """All rows of one <sha8>-<env>.json; the whole file is skipped if its header is bad."""
    try:
        data = read_json(path)
        _check_version(data, RESULTS_API_VERSION)
        header = _file_header(data, path, gpuinfo)
        columns = data["result_columns"]
        results = data["results"]
        # Well-formed JSON of the wrong shape (hand-edited, another tool's file) is skipped as a
        # whole, not half-read or crashed on.
        if not isinstance(columns, list) or not all(isinstance(c, str) for c in columns):
            raise Skip("result_columns is not a list of names")
        if not isinstance(results, dict):
            raise Skip(f"results is a JSON {type(results).__name__}, not an object")
    except (Skip, KeyError, TypeError, ValueError, AttributeError) as exc:
        problems.append(Problem(path, _reason(exc)))
        return []
    rows = []
    for name, stored in results.items():
        try:
            entry = dict(zip(columns, stored))
            rows.extend(_rows_from_entry(name, entry, benchmarks.get(name), header))
        except (Skip, KeyError, TypeError, ValueError, AttributeError) as exc:
            problems.append(Problem(path, f"{name}: {_reason(exc)}"))
    return rows


def _reason(exc: Exception) -> str:
    return str(exc) if isinstance(exc, Skip) else f"{type(exc).__name__}: {exc}"


def _file_header(data: dict, path: Path, gpuinfo: dict[str, dict]) -> dict:
    """The columns shared by every row of one result file."""
    commit = data["commit_hash"]
    if not isinstance(commit, str):
        raise Skip("commit_hash missing")
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
        raise Skip(f"{n_params} params stored but benchmarks.json names {len(names)}")
    return list(names)


def _per_point(stored: list | None, n: int, key: str) -> list:
    """A stored column as one entry per point; asv compresses an all-null column to null."""
    if stored is None:
        return [None] * n
    if not isinstance(stored, list) or len(stored) != n:
        raise Skip(
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
