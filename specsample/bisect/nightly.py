"""The nightly bisects on its own: a change point that shows up on ``vllm@main`` is bisected over
the vLLM commits between the two nights, and the culprit is written where the dashboards read it.

A new change of ``vllm@main`` is one whose ``after`` is the newest commit of our repository with
results on that machine (it appeared tonight), over commits, not a stage shift. The vLLM commits
measured on each night are the ``commit`` of ``vllm@main``'s provenance in that run's outcomes
(``<sha8>.outcomes``). Each bisection writes ``results/<machine>/culprits/<change id>.json`` and
``.md`` (the report of :mod:`.report`); :func:`load_culprits` reads them back for the dashboards.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pandas as pd

CULPRITS_DIR = "culprits"
SUBJECT = "vllm@main"


def new_main_changes(changes: pd.DataFrame, newest_commit: str) -> pd.DataFrame:
    """The changes of ``vllm@main`` over commits that end at ``newest_commit``, shifts left out."""
    if changes.empty or "subject" not in changes:
        return changes.iloc[0:0]
    keep = (
        (changes["dimension"] == "commits")
        & (changes["subject"] == SUBJECT)
        & (changes["after"] == newest_commit)
        & ~changes["shift"].astype(bool)
    )
    return changes[keep].reset_index(drop=True)


def vllm_commits(change: dict, provenance: dict) -> tuple[str, str] | None:
    """(GOOD, BAD): the vLLM commits ``vllm@main`` was on at the change's two nights, or None
    when a run did not record it."""
    machine = change["machine"]
    ends = []
    for ours in (change["before"], change["after"]):
        found = provenance.get((machine, str(ours)[:8]), {}).get(SUBJECT, {})
        if not found.get("commit"):
            return None
        ends.append(found["commit"])
    return (ends[0], ends[1]) if ends[0] != ends[1] else None


def auto_bisect(
    results_dir: Path,
    machine: str,
    vllm_repo: Path,
    *,
    limit: int = 2,
    log: Callable[[str], None] = print,
    measurer_options: dict | None = None,
) -> list[dict]:
    """Bisect tonight's new ``vllm@main`` changes on ``machine`` (at most ``limit``, largest
    effect first); returns what each wrote. A change whose ends cannot be named is logged and
    left; a bisection that cannot start (an end that does not load) is logged and left."""
    from ..track import changepoints
    from ..track.results import commit_order, load_provenance, load_results
    from . import BisectError, bisect, report, runner

    df, _ = load_results(results_dir)
    df = df[df["machine"] == machine]
    if df.empty:
        return []
    newest = commit_order(df)["commit"].iloc[-1]
    changes = new_main_changes(changepoints.detect(df, "commits"), newest)
    if changes.empty:
        log(f"specsample nightly: no new change of {SUBJECT} on {machine}; nothing to bisect")
        return []
    provenance = load_provenance(results_dir)
    out_dir = Path(results_dir) / machine / CULPRITS_DIR
    written = []
    for change in changepoints.to_records(changes.head(limit)):
        ends = vllm_commits(change, provenance)
        if ends is None:
            log(f"specsample nightly: change {change['id']}: the vLLM commits of its two nights are not recorded")
            continue
        point = runner.point_of(change)
        target = runner.Target(Path(vllm_repo), "vllm", point, True)
        try:
            commits = runner.commit_range(target.repo, *ends)
            runner.check_point(target, commits[0], commits[-1])
            measurer = runner.PairedMeasurer(target, commits[0], commits[-1], log=log, **(measurer_options or {}))
            result = bisect(commits, measurer)
        except BisectError as exc:
            log(f"specsample nightly: change {change['id']} not bisected: {exc}")
            continue
        context = {
            "repo": str(target.repo),
            "vllm": True,
            "subject": "vllm@<commit>",
            "point": point,
            "point_label": changepoints.point_label(point),
            "change": change,
            "machine": machine,
        }
        out_dir.mkdir(parents=True, exist_ok=True)
        js, md = out_dir / f"{change['id']}.json", out_dir / f"{change['id']}.md"
        js.write_text(json.dumps(report.to_json(result, context), indent=1, default=str) + "\n")
        md.write_text(report.to_markdown(result, context))
        log(f"specsample nightly: change {change['id']}: {report.headline(result)}")
        written.append({"id": change["id"], "status": result.status, "culprit": result.culprit, "json": str(js)})
    return written


def load_culprits(results_dir: str | Path | None) -> dict[str, dict]:
    """``{change id: {"status", "culprit", "candidates"}}`` from every machine's culprits."""
    found: dict[str, dict] = {}
    if results_dir is None or not Path(results_dir).is_dir():
        return found
    for path in sorted(Path(results_dir).glob(f"*/{CULPRITS_DIR}/*.json")):
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            continue
        found[path.stem] = {k: data.get(k) for k in ("status", "culprit", "candidates")}
    return found


def culprit_text(entry: dict | None) -> str:
    """What a dashboard says of a change's bisection: ``culprit vllm abc1234567``, or empty."""
    if not entry:
        return ""
    if entry.get("culprit"):
        return f"culprit vllm {str(entry['culprit'])[:10]}"
    if entry.get("candidates"):
        return "culprit one of " + ", ".join(str(c)[:10] for c in entry["candidates"])
    return "not reproduced by bisect" if entry.get("status") == "not-reproducible" else ""
