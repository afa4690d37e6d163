"""Each run's ``<sha8>.outcomes`` files (written by ``specsample bench``): per point, the status,
semantics and reason that asv does not record, merged onto the frame's rows
(:func:`apply_outcomes`); per subject, the provenance of the code measured
(:func:`load_provenance`)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd

from ...schema import AXES, PATH_AXES
from .files import Problem, Skip, read_json
from .frame import COLUMNS, as_dtype, with_path_defaults

OUTCOMES_SUFFIX = ".outcomes"  # per point: status, semantics, reason; per subject: provenance


def load_provenance(results_dir: str | Path) -> dict[tuple[str, str], dict[str, dict]]:
    """``(machine, sha8) -> {subject: provenance}`` from the runs' ``<sha8>.outcomes`` files:
    what code each subject was (release, commit, file hashes)."""
    out: dict[tuple[str, str], dict[str, dict]] = {}
    for machine_dir in sorted(p for p in Path(results_dir).iterdir() if p.is_dir()):
        for path in sorted(machine_dir.glob(f"*{OUTCOMES_SUFFIX}")):
            try:
                out[(machine_dir.name, path.stem[:8])] = dict(read_json(path).get("subjects", {}))
            except Skip:
                continue
    return out


def load_outcomes(machine_dir: Path, problems: list[Problem]) -> list[dict]:
    """Rows of every ``<sha8>.outcomes`` file (written by ``specsample bench``): one per
    (sweep, point, subject), with its status, semantics and reason."""
    rows = []
    for path in sorted(machine_dir.glob(f"*{OUTCOMES_SUFFIX}")):
        try:
            data = read_json(path)
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
        except (Skip, KeyError, TypeError, AttributeError) as exc:
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
            found[column] = as_dtype(found[column], str(keyed[column].dtype)) if column in COLUMNS else found[column]
    merged = keyed.merge(found, on=list(_OUTCOME_KEY), how="left")
    crashed = (merged["o_status"] == "crashed").fillna(False).to_numpy(dtype=bool)
    status = merged["status"].astype(object).to_numpy(copy=True)  # writable under copy-on-write
    status[crashed & (status != "ok")] = "crashed"
    frame = frame.copy()
    frame["status"] = pd.array(status, dtype="str")
    frame["semantics"] = as_dtype(merged["o_semantics"], "str").array
    frame["reason"] = as_dtype(merged["o_reason"], "str").array
    for column in ("n_throttled", "sm_clock_mhz"):  # the GPU state, where the run recorded it
        frame[column] = as_dtype(merged[f"o_{column}"], COLUMNS[column]).array
    for column in ("acceptance_rate", "deferral_rate"):
        if f"o_{column}" in merged:
            frame[column] = as_dtype(merged[f"o_{column}"], "float64").array
    return frame
