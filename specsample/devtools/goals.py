"""``specsample goals COMMIT``: one commit's committed results against performance goals read
from data. No GPU and no torch: it reads the results frame
(:func:`specsample.track.results.load_results`) of that commit's run on one machine and tier.

The goals live in a JSON file, by default ``goals.json`` beside this module (the fast
sampler's goals); ``--goals FILE`` reads another of the same form, so a new goal, threshold or
point is a data change. The file holds a ``title``, the ``subject`` the goals are about, a
``base_point`` (column values) and a list of ``goals``. Every goal has a ``name``, a ``title``
and a ``kind``; all but ``manual`` select rows of one ``metric`` by ``where`` (column ->
value, or ``{"at_least": x}``, ``{"at_most": x}``, ``{"in": [...]}``), to which
``"at_base_point": true`` adds the base point. The kinds:

``point_ratio``
    Per ``group_by`` group, each of ``subjects``' value at the ``numerator`` point (column
    values) over its value at the ``denominator`` point; the goal is on the subject's ratio in
    every group.
``value``
    Per group, each of ``subjects``' value; the goal is on the subject's value in every group.
``speedup``
    The subject's ``1 / value`` of a ratio-to-baseline metric over every selected point, or,
    with ``"against": OTHER``, OTHER's value over the subject's of a latency metric at every
    point both were measured at (e.g. the newest vLLM release over ours; ``"fastest-release"``:
    at each point, the fastest ``vllm==X.Y.Z`` subject measured there, so that "never slower
    than any release" is one goal; ``"newest-release"``, see below): geometric mean (goal
    ``geomean``), slowest point (goal ``slowest``), the geometric mean per ``by`` column value
    and the ``slowest`` N points, described by the ``describe`` columns. With no point
    selected, ``no results (why)`` where the results lack the goal's ``where`` sweep or, there,
    the subject it is measured against (results from before the sweep existed), else ``no
    points``; the verdict is ``no data`` either way.
``subject_ratio``
    Per group, each of ``ratios``' subjects' value over the subject's; the goal is on the
    ``ratio`` it names, in the groups whose rows match the goal's own ``where``.
``manual``
    Not computed from results: its ``note`` is printed.

``"newest-release"``, as ``against`` or in ``subjects``, is the newest ``vllm==X.Y.Z`` subject in
the results (``{newest}`` in a title names it), so that a goals file follows vLLM's releases.
When it is older than the newest release of :data:`specsample.tiers.MRV2_RELEASES`, the report
says so first: those results predate the release, and the goal was not measured against it.

A goal's ``goal`` gives its threshold as ``at_least`` or ``at_most`` and an optional ``note``.
Each goal's line ends in ``met``, ``not met (k of n)`` -- k groups of n meet it -- or
``no data``. ``label`` is a :meth:`str.format` pattern of the group's columns.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import NamedTuple
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd

from ..schema import SYMBOLS, release_key, release_version
from ..tiers import NEWEST_RELEASE

KINDS = ("point_ratio", "value", "speedup", "subject_ratio", "manual")
# The fields each kind needs besides name, title and kind.
_REQUIRED = {
    "point_ratio": ("metric", "group_by", "label", "subjects", "numerator", "denominator", "goal"),
    "value": ("metric", "group_by", "label", "subjects", "goal"),
    "speedup": ("metric", "by", "slowest", "describe", "goal"),
    "subject_ratio": ("metric", "group_by", "label", "ratios", "goal"),
    "manual": ("note",),
}


# ``"against"`` value of a speedup goal: at each point, the fastest vLLM release measured there.
FASTEST_RELEASE = "fastest-release"
# ``"against"`` value or ``subjects`` entry: the newest vLLM release in the results.
NEWEST_MEASURED = "newest-release"


class GoalsError(ValueError):
    """A goals file that cannot be used, or results that do not have the commit asked for."""


def default_goals_path() -> Path:
    return Path(str(resources.files(__package__).joinpath("goals.json")))


def load_goals(path: str | Path | None = None) -> dict:
    """The goals of ``path`` (default: :func:`default_goals_path`), checked for the fields their
    kinds need."""
    path = Path(path) if path is not None else default_goals_path()
    try:
        spec = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise GoalsError(f"goals file {path}: {exc}") from None
    for key in ("subject", "goals"):
        if key not in spec:
            raise GoalsError(f"goals file {path}: no {key!r}")
    for i, goal in enumerate(spec["goals"]):
        name = goal.get("name", f"#{i + 1}")
        kind = goal.get("kind")
        if kind not in KINDS:
            raise GoalsError(f"goals file {path}: goal {name}: kind must be one of {', '.join(KINDS)}, got {kind!r}")
        missing = [k for k in ("name", "title", *_REQUIRED[kind]) if k not in goal]
        if missing:
            raise GoalsError(f"goals file {path}: goal {name} ({kind}) lacks {', '.join(missing)}")
        threshold = goal.get("goal", {})
        bounds = [threshold] if kind != "speedup" else [threshold.get("geomean", {}), threshold.get("slowest", {})]
        for bound in bounds:
            if kind != "manual" and ("at_least" in bound) == ("at_most" in bound):
                raise GoalsError(f"goals file {path}: goal {name}: give its threshold as at_least or at_most")
        if goal.get("at_base_point") and "base_point" not in spec:
            raise GoalsError(f"goals file {path}: goal {name} is at the base point, and there is no base_point")
    return spec


# ---- selecting the results -------------------------------------------------------------------


def select(
    df: pd.DataFrame, commit: str, machine: str | None = None, tier: str = "nightly"
) -> tuple[pd.DataFrame, str]:
    """The rows of ``commit`` (a hash or its prefix) on ``machine`` (default: the one machine
    with results for it) in ``tier``, and the machine; :class:`GoalsError` says what exists."""
    rows = df[df["commit"].str.startswith(commit)]
    if rows.empty:
        newest = df.sort_values("date")["commit"].drop_duplicates().str[:8].tolist()[-5:][::-1]
        raise GoalsError(f"no results for commit {commit}; newest commits: {', '.join(newest) or 'none'}")
    commits = sorted(rows["commit"].unique())
    if len(commits) > 1:
        raise GoalsError(f"commit {commit} is ambiguous: {', '.join(c[:12] for c in commits)}")
    machines = sorted(rows["machine"].unique())
    if machine is None:
        if len(machines) > 1:
            raise GoalsError(f"commit {commit} has results on {', '.join(machines)}: give --machine")
        machine = machines[0]
    rows = rows[rows["machine"] == machine]
    if rows.empty:
        raise GoalsError(f"no results for commit {commit} on {machine} (it has results on {', '.join(machines)})")
    tiers = sorted(rows["tier"].dropna().unique())
    rows = rows[rows["tier"] == tier]
    if rows.empty:
        raise GoalsError(f"no {tier} results for commit {commit} on {machine} (tiers there: {', '.join(tiers)})")
    return rows, machine


def header(df: pd.DataFrame, machine: str, tier: str) -> str:
    gpu = df["gpu"].dropna()
    return f"commit {df['commit'].iloc[0][:8]} on {machine} ({gpu.iloc[0] if len(gpu) else 'GPU unknown'}), {tier} tier"


# ---- the report ------------------------------------------------------------------------------


def report(df: pd.DataFrame, spec: dict) -> str:
    """One block of lines per goal of ``spec`` (:func:`load_goals`), from the rows of ``df``
    (one commit, machine and tier; rows whose status is not ``ok`` are left out)."""
    opening, results = evaluate(df, spec)
    return "\n".join([*opening, *(line for result in results for line in result.lines)])


class GoalResult(NamedTuple):
    """One goal's report lines (a title line ending in its verdict, then details), its
    ``verdict`` (``met``, ``not met (k of n)``, ``no data``, or ``""`` for a manual goal), and a
    one-line ``summary`` of its figures and its ``target`` (the README's table)."""

    goal: dict
    lines: list[str]
    verdict: str
    summary: str
    target: str


def evaluate(df: pd.DataFrame, spec: dict) -> tuple[list[str], list[GoalResult]]:
    """The report's opening lines (the newest-release note) and one :class:`GoalResult` per goal
    of ``spec``, from the rows of ``df`` whose status is ``ok``."""
    if "status" in df.columns:
        df = df[df["status"] == "ok"]
    spec, opening = _with_newest_release(df, spec)
    return opening, [GoalResult(goal, *_KIND_REPORTS[goal["kind"]](df, goal, spec)) for goal in spec["goals"]]


# ---- the README's figures --------------------------------------------------------------------

README_BEGIN = "<!-- figures: generated by `specsample goals {args} --readme README.md`; do not edit -->"
README_END = "<!-- figures: end -->"


def readme_block(df: pd.DataFrame, spec: dict, machine: str, tier: str, args: str) -> str:
    """The README's figures: a markdown table, one row per goal of ``spec`` (its figures and
    verdict) from the rows of ``df`` (:func:`select`), with the commit and GPU that produced them,
    between markers that name the command (``specsample goals ARGS``) that writes it."""
    opening, results = evaluate(df, spec)
    gpu = df["gpu"].dropna() if "gpu" in df else pd.Series(dtype=str)
    where = (
        f"Commit `{df['commit'].iloc[0][:8]}`, {tier} tier, on {gpu.iloc[0] if len(gpu) else 'an unknown GPU'} "
        f"(machine `{machine}`); the goals' subject is `{spec['subject']}`:"
    )
    rows = ["| goal | target | measured | verdict |", "|---|---|---|---|"]
    for r in results:
        title = f"{r.goal['name']}. {r.goal['title']}"
        rows.append(f"| {_cell(title)} | {_cell(r.target) or '-'} | {_cell(r.summary)} | {r.verdict or '-'} |")
    notes = [f"_{line}_" for line in opening]
    return "\n".join([README_BEGIN.format(args=args), where, "", *rows, *([""] + notes if notes else []), README_END])


def _cell(text: str) -> str:
    return " ".join(text.split()).replace("|", "\\|")


def rewrite_readme(path: str | Path, block: str) -> bool:
    """Replace the figures block of the README at ``path`` (from its begin marker to
    :data:`README_END`) with ``block``; True if the file changed. :class:`GoalsError` when the
    README has no such block."""
    path = Path(path)
    try:
        text = path.read_text()
    except OSError as exc:
        raise GoalsError(f"README {path}: {exc}") from None
    begin = README_BEGIN.split("{args}")[0]
    start = text.find(begin)
    end = text.find(README_END, start)
    if start < 0 or end < 0:
        raise GoalsError(f"README {path} has no figures block (a line starting {begin!r} ... {README_END!r})")
    new = text[:start] + block + text[end + len(README_END) :]
    if new != text:
        path.write_text(new)
    return new != text


def readme_figures(path: str | Path) -> tuple[str, str] | None:
    """``(args, block)`` of the README's figures block: the ``specsample goals`` arguments its
    begin marker names and the block itself; None without one."""
    text = Path(path).read_text()
    begin, after = README_BEGIN.split("{args}")
    start = text.find(begin)
    end = text.find(README_END, start)
    if start < 0 or end < 0:
        return None
    args = text[start + len(begin) : text.index(after, start)]
    return args, text[start : end + len(README_END)]


def _with_newest_release(df: pd.DataFrame, spec: dict) -> tuple[dict, list[str]]:
    """``spec`` with ``"newest-release"`` resolved in the results of ``df``, and the report's
    opening line when that is not the newest release specsample knows."""
    versions = sorted({v for v in df["subject"].map(release_version).dropna()}, key=release_key) if len(df) else []
    newest = f"vllm=={versions[-1]}" if versions else NEWEST_MEASURED
    uses = any(g.get("against") == NEWEST_MEASURED or NEWEST_MEASURED in g.get("subjects", ()) for g in spec["goals"])
    lines = []
    if uses and newest != NEWEST_RELEASE:
        found = (
            f"{newest} is the newest release in these results" if versions else "no vLLM release is in these results"
        )
        lines.append(f"newest-release: {found}; the newest MRV2 release is {NEWEST_RELEASE}, not measured here")

    def resolve(goal: dict) -> dict:
        goal = dict(goal, title=goal["title"].replace("{newest}", newest))
        if goal.get("against") == NEWEST_MEASURED:
            goal["against"] = newest
        if "subjects" in goal:
            goal["subjects"] = [newest if s == NEWEST_MEASURED else s for s in goal["subjects"]]
        return goal

    return dict(spec, goals=[resolve(g) for g in spec["goals"]]), lines


def _rows(df: pd.DataFrame, goal: dict, spec: dict) -> pd.DataFrame:
    where = dict(spec.get("base_point", {})) if goal.get("at_base_point") else {}
    where.update(goal.get("where", {}))
    return _match(df[df["metric"] == goal["metric"]], where)


def _match(df: pd.DataFrame, where: dict) -> pd.DataFrame:
    mask = np.ones(len(df), dtype=bool)
    for column, want in where.items():
        if column not in df:  # a frame without the column (older results, a hand-made one) matches no row
            mask &= False
            continue
        values = df[column]
        if isinstance(want, dict):
            if "at_least" in want:
                mask &= (values >= want["at_least"]).to_numpy(dtype=bool, na_value=False)
            if "at_most" in want:
                mask &= (values <= want["at_most"]).to_numpy(dtype=bool, na_value=False)
            if "in" in want:
                mask &= values.isin(want["in"]).to_numpy()
        else:
            mask &= (values == want).to_numpy(dtype=bool, na_value=False)
    return df[mask]


def _by_subject(rows: pd.DataFrame) -> dict[str, float]:
    return rows.groupby("subject")["value"].median().to_dict()


def _bound(threshold: dict) -> tuple[str, Callable[[float], bool]]:
    if "at_most" in threshold:
        limit = threshold["at_most"]
        return f"<= {limit:g}", lambda v: v <= limit
    limit = threshold["at_least"]
    return f">= {limit:g}", lambda v: v >= limit


def _verdict(passed: list[bool]) -> str:
    if not passed:
        return "no data"
    return "met" if all(passed) else f"not met ({sum(passed)} of {len(passed)})"


def _target(goal: dict, what: str) -> str:
    note = goal["goal"].get("note")
    return what + (f" ({note})" if note else "")


def _title(goal: dict, what: str, passed: list[bool]) -> str:
    note = goal["goal"].get("note")
    return f"{goal['name']}. {goal['title']} (goal: {what}{', ' + note if note else ''}): {_verdict(passed)}"


def _groups(rows: pd.DataFrame, goal: dict):
    """``(label, group rows)`` per ``group_by`` group, in sorted order."""
    keys = goal["group_by"]
    for key, group in rows.groupby(keys, sort=True):
        key = key if isinstance(key, tuple) else (key,)
        yield goal["label"].format(**dict(zip(keys, key))), group


def _point_ratio(df: pd.DataFrame, goal: dict, spec: dict) -> list[str]:
    subject, unit = spec["subject"], goal.get("unit", "")
    op, ok = _bound(goal["goal"])
    lines, passed, summary = [], [], []
    for label, group in _groups(_rows(df, goal, spec), goal):
        num, den = _by_subject(_match(group, goal["numerator"])), _by_subject(_match(group, goal["denominator"]))
        ratios = {s: num[s] / den[s] for s in goal["subjects"] if s in num and s in den}
        cells = ", ".join(f"{s} {r:.3f}" for s, r in ratios.items())
        detail = f"   ({subject} {num[subject]:.1f} / {den[subject]:.1f} {unit})" if subject in ratios else ""
        lines.append(f"   {label}: {cells}{detail}")
        if subject in ratios:
            passed.append(ok(ratios[subject]))
            summary.append(f"{' '.join(label.split())} {ratios[subject]:.3f}")
    return (
        [_title(goal, f"{subject} {op}", passed), *lines],
        _verdict(passed),
        ", ".join(summary),
        _target(goal, f"{subject} {op}"),
    )


def _value(df: pd.DataFrame, goal: dict, spec: dict) -> list[str]:
    subject = spec["subject"]
    op, ok = _bound(goal["goal"])
    lines, passed, summary = [], [], []
    for label, group in _groups(_rows(df, goal, spec), goal):
        by = _by_subject(group)
        lines.append(f"   {label}: " + ", ".join(f"{s} {by[s]:.3f}" for s in goal["subjects"] if s in by))
        if subject in by:
            passed.append(ok(by[subject]))
            summary.append(f"{' '.join(label.split())} {by[subject]:.3f}")
    return (
        [_title(goal, f"{subject} {op}", passed), *lines],
        _verdict(passed),
        ", ".join(summary),
        _target(goal, f"{subject} {op}"),
    )


def _speedup(df: pd.DataFrame, goal: dict, spec: dict) -> list[str]:
    subject = spec["subject"]
    rows = _rows(df, goal, spec)
    if "against" in goal:
        rows = _against(rows, subject, goal["against"])
    else:
        rows = rows[rows["subject"] == subject]
    geomean_op, geomean_ok = _bound(goal["goal"]["geomean"])
    slowest_op, slowest_ok = _bound(goal["goal"]["slowest"])
    if rows.empty:
        missing = _missing_sweep(df, goal)
        what = f"no results ({missing})" if missing else "no points"
        return (
            [f"{goal['name']}. {goal['title']}, {what} (goal: geomean {geomean_op}, slowest {slowest_op}): no data"],
            "no data",
            what,
            f"geomean {geomean_op}, slowest {slowest_op}",
        )
    rows = rows.assign(speedup=1.0 / rows["value"])
    geomean, slowest = float(np.exp(np.log(rows["speedup"]).mean())), float(rows["speedup"].min())
    verdict = _verdict([geomean_ok(geomean), slowest_ok(slowest)])
    lines = [
        f"{goal['name']}. {goal['title']}, {len(rows)} points: geomean {geomean:.3f}x (goal {geomean_op}), "
        f"slowest {slowest:.3f}x (goal {slowest_op}): {verdict}"
    ]
    for key, group in rows.groupby(goal["by"], sort=True):
        lines.append(f"   {key!s:12s} geomean {np.exp(np.log(group['speedup']).mean()):.3f}x")
    for _, row in rows.nsmallest(goal["slowest"], "speedup").iterrows():
        where = " ".join(f"{SYMBOLS.get(c, c)}={row[c]}" for c in goal["describe"])
        lines.append(f"   slow: {where} -> {row['speedup']:.3f}x")
    summary = f"geomean {geomean:.2f}x, slowest {slowest:.3f}x, {len(rows)} points"
    return lines, verdict, summary, f"geomean {geomean_op}, slowest {slowest_op}"


def _missing_sweep(df: pd.DataFrame, goal: dict) -> str:
    """Why a goal whose ``where`` names a sweep has no rows at all: the results lack the sweep
    (e.g. a commit run before it existed), or lack the subject it is measured against there;
    "" when both are there (the goal's points are not, a narrower case)."""
    sweep = goal.get("where", {}).get("sweep")
    if not isinstance(sweep, str):
        return ""
    rows = df[df["sweep"] == sweep] if "sweep" in df else df.iloc[:0]
    if rows.empty:
        return f"these results have no {sweep} sweep"
    other = goal.get("against")
    if other and other != FASTEST_RELEASE and not (rows["subject"] == other).any():
        return f"{other} is not in the {sweep} sweep's results"
    return ""


def _against(rows: pd.DataFrame, subject: str, other: str) -> pd.DataFrame:
    """One row per point both ran (the sweep and every axis but the subject), ``value`` =
    ``subject``'s latency over ``other``'s, so that ``1 / value`` is the speedup over ``other``."""
    from ..track.results import PARAM_COLUMNS, point_ratio

    key = ["sweep", *(c for c in PARAM_COLUMNS if c in rows and c != "subject")]
    if other == FASTEST_RELEASE:
        releases = rows[rows["subject"].map(release_version).notna()]
        fastest = releases.groupby(key, dropna=False)["value"].min().reset_index().assign(subject=other)
        rows = pd.concat([rows[rows["subject"] == subject], fastest], ignore_index=True)
    return point_ratio(rows, subject, other, key).rename("value").reset_index()


def _subject_ratio(df: pd.DataFrame, goal: dict, spec: dict) -> list[str]:
    subject, unit = spec["subject"], goal.get("unit", "")
    target = goal["goal"]["ratio"]
    op, ok = _bound(goal["goal"])
    lines, passed, counted = [], [], []
    for label, group in _groups(_rows(df, goal, spec), goal):
        by = _by_subject(group)
        present = [r for r in goal["ratios"] if r["subject"] in by]
        if subject not in by or not present:
            continue
        cells = ", ".join(f"{r['label']} {by[r['subject']] / by[subject]:.2f}" for r in present)
        lines.append(f"   {label}: {cells}   ({subject} {by[subject]:.1f} {unit})")
        if target in by and not _match(group, goal["goal"].get("where", {})).empty:
            passed.append(ok(by[target] / by[subject]))
            counted.append(by[target] / by[subject])
    what = f"{target} / {subject}"
    summary = f"{what} {min(counted):.2f}-{max(counted):.2f} at {len(counted)} points" if counted else "no points"
    return [_title(goal, f"{what} {op}", passed), *lines], _verdict(passed), summary, _target(goal, f"{what} {op}")


def _manual(df: pd.DataFrame, goal: dict, spec: dict) -> list[str]:
    return [f"{goal['name']}. {goal['title']}: {goal['note']}"], "", goal["note"], ""


_KIND_REPORTS = {
    "point_ratio": _point_ratio,
    "value": _value,
    "speedup": _speedup,
    "subject_ratio": _subject_ratio,
    "manual": _manual,
}
