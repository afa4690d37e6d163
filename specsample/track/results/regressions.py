"""The steps ``asv publish`` detected (``html/regressions.json``) as a frame
(:func:`load_asv_regressions`)."""

from __future__ import annotations

import itertools
import logging
from pathlib import Path

import numpy as np
import pandas as pd

from ...schema import axis_name
from .files import Problem, Skip, read_json
from .frame import COLUMNS, PARAM_COLUMNS, as_dtype, infer_extra, with_path_defaults
from .loader import parse_param, split_benchmark_name

logger = logging.getLogger(__name__)

_REGRESSION_VALUE_COLUMNS = {
    "commit_before": "str",
    "commit_after": "str",
    "value_before": "float64",
    "value_after": "float64",
    "change": "float64",
    "last_value": "float64",
    "best_value": "float64",
}


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
        entries = read_json(path)["regressions"]
        index = read_json(html_dir / "index.json")
        revision_to_hash = {int(k): v for k, v in index["revision_to_hash"].items()}
        benchmarks = index["benchmarks"]
    except (Skip, KeyError, TypeError, ValueError, OSError) as exc:
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
        frame[column] = as_dtype(source, dtype)
    for column in [c for c in raw.columns if c not in dtypes]:
        frame[column] = infer_extra(raw[column])
    return frame
