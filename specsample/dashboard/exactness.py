"""The releases page's exactness section: the committed ``results/<machine>/<sha8>.exactness``
files (``specsample exactness``, docs/exactness.md), one row per (subject, mode, drafting).

Reads JSON only: no torch, no Triton, like the rest of the dashboard.
"""

from __future__ import annotations

import json
from pathlib import Path

SUFFIX = ".exactness"  # specsample.exactness.SUFFIX (that module is not imported here: it is the check's)
DRAFTING_ORDER = {"independent": 0, "production": 1, "production-unsalted": 2}
MODE_ORDER = {"standard": 0, "block": 1}


def _summary(row: dict) -> str:
    worst = row.get("worst") or {}
    if row.get("verdict") == "biased" and worst:
        return f"biased (chi2={worst['chi2']:.1f}, df={worst['df']}, {worst['what']}, {row['drafting']})"
    if row.get("verdict") in ("skipped", "failed"):
        return f"{row['verdict']}: {row.get('reason', '')}"
    return str(row.get("verdict", ""))


def _subject_key(subject: str) -> tuple:
    if subject.startswith("vllm=="):
        return (0, tuple(int(x) if x.isdigit() else 0 for x in subject[6:].split(".")))
    return (1, (subject,))


def exactness_rows(results_dir: str | Path | None, machine) -> list[dict]:
    """The rows for the releases page: every ``.exactness`` file of ``machine``, releases first
    (in release order), then our subjects; skipped checks left out."""
    if results_dir is None or machine is None:
        return []
    rows = []
    for path in sorted((Path(results_dir) / str(machine)).glob(f"*{SUFFIX}")):
        for line in path.read_text().splitlines():
            if not line.strip():
                continue
            row = json.loads(line)
            if row.get("verdict") == "skipped":
                continue
            worst = row.get("worst") or {}
            rows.append(
                {
                    "subject": row["subject"],
                    "mode": row["mode"],
                    "drafting": row["drafting"],
                    "verdict": row["verdict"],
                    "summary": _summary(row),
                    "p_value": "" if not worst else f"{worst['p_value']:.2g}",
                    "threshold": f"{row.get('threshold', 0):.2g}",
                    "trials": f"{row.get('num_trials', 0):,}",
                    "commit": str(row.get("commit", path.stem))[:8],
                }
            )
    rows.sort(
        key=lambda r: (
            _subject_key(r["subject"]),
            MODE_ORDER.get(r["mode"], 9),
            DRAFTING_ORDER.get(r["drafting"], 9),
            r["commit"],
        )
    )
    return rows
