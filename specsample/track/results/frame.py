"""The results frame: its column contract, building it from rows, and queries on it.

One row per (benchmark, commit, machine, env, parameter combination); :data:`COLUMNS` names and
types every column, and :func:`to_frame` builds a frame of them from rows, whoever made the rows
(asv's files, :mod:`.loader`; a paired measurement, :mod:`specsample.runs.paired`).
"""

from __future__ import annotations

import math

import pandas as pd

from ...schema import AXES, PATH_AXES, PATH_DEFAULTS

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


# ---------------------------------------------------------------------------------------------
# Building the frame
# ---------------------------------------------------------------------------------------------


def to_frame(rows: list[dict]) -> pd.DataFrame:
    """Rows (dicts keyed by :data:`COLUMNS`) to a frame with the declared column order and
    dtypes, extras after them, sorted by machine, date, benchmark. Also used by
    :mod:`specsample.runs.paired`, whose rows come from a measurement rather than asv's files."""
    raw = with_path_defaults(pd.DataFrame(rows)) if rows else pd.DataFrame(rows)
    extras = [c for c in raw.columns if c not in COLUMNS]
    frame = pd.DataFrame(index=raw.index)
    for column, dtype in COLUMNS.items():
        source = raw[column] if column in raw else pd.Series([None] * len(raw), dtype=object)
        frame[column] = as_dtype(source, dtype)
    for column in extras:
        frame[column] = infer_extra(raw[column])
    if not frame.empty:
        frame = frame.sort_values(["machine", "date", "benchmark"], kind="stable")
    return frame.reset_index(drop=True)


def as_dtype(series: pd.Series, dtype: str) -> pd.Series:
    """``series`` as one of :data:`COLUMNS`' dtypes; missing values (None, NaN, NA) stay missing."""
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


def infer_extra(series: pd.Series) -> pd.Series:
    """An unknown parameter axis: numeric if every value is a number, else strings."""
    present = series.dropna()
    if len(present) and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in present):
        all_int = all(isinstance(v, int) for v in present)
        return as_dtype(series, "Int64" if all_int else "float64")
    return as_dtype(series, "str")


def with_path_defaults(frame: pd.DataFrame) -> pd.DataFrame:
    """``frame`` with every path axis (:data:`specsample.schema.PATH_AXES`) present, missing
    values at their defaults: results recorded before the axes existed were measured there."""
    for axis in PATH_AXES:
        if axis not in frame:
            frame[axis] = PATH_DEFAULTS[axis]
        elif frame[axis].isna().any():
            frame[axis] = frame[axis].astype(object).where(frame[axis].notna(), PATH_DEFAULTS[axis])
    return frame


# ---------------------------------------------------------------------------------------------
# Queries
# ---------------------------------------------------------------------------------------------


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
