"""The sign-off's markdown report, fit to paste into a PR: verdicts frame -> text.

:func:`report_markdown` reads the output of :func:`.stats.compare` or
:func:`.stats.compare_variants` and says, in this order: the verdict and why (the exit code of
:func:`.stats.exit_code`), the thresholds, what was not verified (crashed and failed points
with their reasons, head's semantics violations, points measured on one side only), the
regressions and improvements, the semantics each side showed, and the noise and the machine.
Nothing here decides a verdict; it only formats what :mod:`.stats` decided.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np
import pandas as pd

from ...schema import SYMBOLS
from ...schema import PATH_DEFAULTS
from ..results import PARAM_COLUMNS
from . import stats, verdict

# Short labels for the point column; the frame keeps the full names.
_PARAM_LABELS = {k: v for k, v in SYMBOLS.items() if k != "placeholder_pattern"}


def report_markdown(
    verdicts: pd.DataFrame,
    machine_info: Mapping[str, object] | None = None,
    *,
    allow_missing: bool = False,
    fail_on_inconclusive: bool = False,
    max_rows: int = 40,
    title: str = "specsample sign-off",
    notes: Iterable[str] = (),
) -> str:
    """A markdown report of :func:`.stats.compare` output.

    Parameters
    ----------
    verdicts : DataFrame
        Output of :func:`.stats.compare` or :func:`.stats.compare_variants` (with a ``commit``
        key column, shown in every table).
    machine_info : mapping, optional
        Keys among machine, gpu, driver, cuda, torch, triton (see
        :func:`specsample.track.results.machine_environment`); missing keys are left out.
    allow_missing : bool
        As passed to :func:`.stats.exit_code`: whether points measured on one side only pass.
    fail_on_inconclusive : bool
        As passed to :func:`.stats.exit_code`: whether an ``inconclusive`` point fails.
    max_rows : int
        Rows shown per table; the rest are counted.
    title : str
        Heading.
    notes : iterable of str
        Paragraphs appended at the end (how the sides were measured, subjects absent).
    """
    code = stats.exit_code(verdicts, allow_missing=allow_missing, fail_on_inconclusive=fail_on_inconclusive)
    sections = [
        f"## {title}",
        _summary_line(verdicts, code, allow_missing, fail_on_inconclusive),
        _thresholds_line(verdicts),
        _status_section(
            "Crashed", verdicts, "crashed", max_rows, "A point whose process died (a fault or a hang): not verified."
        ),
        _status_section("Failed", verdicts, "failed", max_rows, "A point that raised: not verified."),
        _violations_section(verdicts, max_rows),
        _one_sided_section(verdicts, max_rows, allow_missing),
        _table_section("Slower", verdicts, "slower", max_rows, ascending=False),
        _table_section("Faster", verdicts, "faster", max_rows, ascending=True),
        _table_section("Inconclusive", verdicts, "inconclusive", max_rows, ascending=False),
        _semantics_section(verdicts),
        _counts_line(verdicts),
        _noise_line(verdicts),
        _machine_line(machine_info),
        *notes,
    ]
    return "\n\n".join(s.rstrip() for s in sections if s) + "\n"


# ---- headline --------------------------------------------------------------------------------


def _plural(n: int, word: str) -> str:
    return f"{n} {word}{'s' * (n != 1)}"


def _summary_line(verdicts: pd.DataFrame, code: int, allow_missing: bool, fail_on_inconclusive: bool = False) -> str:
    if verdicts.empty:
        return "**FAIL**: no points to compare (check the selected commits or subjects)."
    n = stats.counts(verdicts)
    one_sided = n["missing"] + n["new"]
    what = []
    if n["slower"]:
        what.append(f"{n['slower']} slower")
    if n["inconclusive"] and fail_on_inconclusive:
        what.append(f"{n['inconclusive']} inconclusive (failing by --fail-on-inconclusive)")
    if n["crashed"]:
        what.append(_plural(n["crashed"], "crashed point"))
    if n["failed"]:
        what.append(_plural(n["failed"], "failed point"))
    if n["violation"]:
        what.append(_plural(n["violation"], "semantics violation") + " at head")
    if one_sided:
        what.append(
            _plural(one_sided, "point")
            + " measured on one side only"
            + (" (allowed by --allow-missing)" if allow_missing else "")
        )
    if not any(n[v] for v in stats.COMPARED_VERDICTS):
        what.append("no point compared on both sides")
    elif not (n["slower"] or code):
        what.insert(0, "nothing slower")
    status = "PASS" if code == 0 else "FAIL"
    return f"**{status}** (exit {code}): {', '.join(what)} out of {len(verdicts)} points{_sides(verdicts)}."


def _sides(verdicts: pd.DataFrame) -> str:
    base = verdicts["base_commit"].dropna().unique()
    head = verdicts["head_commit"].dropna().unique()
    if "base_subject" in verdicts and len(verdicts):
        where = f" at `{str(base[0])[:8]}`" if len(base) == 1 and len(head) == 1 and base[0] == head[0] else ""
        return f" (`{verdicts['base_subject'].iloc[0]}` → `{verdicts['head_subject'].iloc[0]}`{where})"
    if len(base) == 1 and len(head) == 1:
        if base[0] == head[0]:
            return f" (A/A: `{str(base[0])[:8]}` against itself)"
        return f" (base `{str(base[0])[:8]}` → head `{str(head[0])[:8]}`)"
    return ""


def _thresholds_line(verdicts: pd.DataFrame) -> str:
    t = verdicts.attrs.get("thresholds")
    if not t:
        return ""
    floor = t.get("min_abs_seconds") or 0.0
    also = f" and by more than {floor * 1e6:g} µs for times" if floor > 0 else ""
    delta = t.get("delta", t["min_effect"])
    return (
        f"A point is slower (a regression) or faster when the change is significant at p < {t['alpha']:g} "
        f"(Mann-Whitney U, or non-overlapping 99% CIs) and larger than {100 * t['min_effect']:g}%{also}; "
        f"same when two one-sided tests show it within ±{100 * delta:g}% "
        f"(p < {t.get('equivalence_alpha', verdict.EQUIVALENCE_ALPHA):g}); inconclusive otherwise. "
        f"A crashed or failed point, a semantics violation at head only, or a point measured "
        f"on one side only (unless allowed) fails the sign-off (exit 2)."
    )


# ---- what was not verified -------------------------------------------------------------------


def _commit_cells(verdicts: pd.DataFrame) -> tuple[list[str], list[str]]:
    """The commit column's header and alignment, for frames keyed on commit (--results)."""
    return (["commit"], ["---"]) if "commit" in verdicts else ([], [])


def _lead(row, with_commit: bool) -> list[str]:
    cells = [f"`{str(row.commit)[:8]}`"] if with_commit else []
    return cells + [f"`{row.benchmark}`", point_label(row)]


def _table(header: list[str], align: list[str], rows: list[list[str]], total: int, max_rows: int) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(cells) + " |" for cells in rows[:max_rows]]
    if total > max_rows:
        lines.append(f"\n… and {total - max_rows} more.")
    return lines


def _status_section(heading: str, verdicts: pd.DataFrame, verdict: str, max_rows: int, what: str) -> str:
    rows = verdicts[verdicts["verdict"] == verdict]
    if rows.empty:
        return ""
    commit_h, commit_a = _commit_cells(verdicts)
    cells = []
    for row in rows.head(max_rows).itertuples(index=False):
        sides = [side for side in ("base", "head") if getattr(row, f"{side}_status") == verdict]
        for side in sides:
            reason = getattr(row, f"{side}_reason")
            cells.append(_lead(row, bool(commit_h)) + [side, _cell(reason) or "(no reason recorded)"])
        if not sides:  # an ok status without a value, or a status outside the contract
            cells.append(
                _lead(row, bool(commit_h))
                + ["both", _cell(f"base {_side_cell(row, 'base')}; head {_side_cell(row, 'head')}")]
            )
    lines = [f"### {heading} ({len(rows)})", "", what, ""]
    lines += _table(
        [*commit_h, "benchmark", "point", "side", "reason"],
        [*commit_a, "---", "---", "---", "---"],
        cells,
        len(rows),
        max_rows,
    )
    return "\n".join(lines)


def _violations_section(verdicts: pd.DataFrame, max_rows: int) -> str:
    rows = verdicts[verdicts["verdict"] == "violation"]
    if rows.empty:
        return ""
    commit_h, commit_a = _commit_cells(verdicts)
    cells = [
        _lead(r, bool(commit_h)) + [_cell(r.base_semantics), _cell(r.head_reason), _change(r)]
        for r in rows.head(max_rows).itertuples(index=False)
    ]
    lines = [
        f"### Semantics violations at head ({len(rows)})",
        "",
        f"Head's output {stats.VIOLATES} where base's does not: a wrong result, whatever its speed.",
        "",
    ]
    lines += _table(
        [*commit_h, "benchmark", "point", "base semantics", "head: first broken rule", "change"],
        [*commit_a, "---", "---", "---", "---", "---:"],
        cells,
        len(rows),
        max_rows,
    )
    return "\n".join(lines)


def _one_sided_section(verdicts: pd.DataFrame, max_rows: int, allow_missing: bool) -> str:
    rows = verdicts[verdicts["verdict"].isin(stats.ONE_SIDED_VERDICTS)]
    if rows.empty:
        return ""
    commit_h, commit_a = _commit_cells(verdicts)
    cells = [
        _lead(r, bool(commit_h)) + [_side_cell(r, "base"), _side_cell(r, "head")]
        for r in rows.head(max_rows).itertuples(index=False)
    ]
    why = (
        "Allowed by --allow-missing: these points were not compared."
        if allow_missing
        else "Not verified, so the sign-off fails (exit 2); pass --allow-missing to accept them."
    )
    n_missing = int((rows["verdict"] == "missing").sum())
    lines = [
        f"### Measured on one side only ({len(rows)}: {n_missing} missing at head, "
        f"{len(rows) - n_missing} new at head)",
        "",
        why,
        "",
    ]
    lines += _table(
        [*commit_h, "benchmark", "point", "base", "head"],
        [*commit_a, "---", "---", "---", "---"],
        cells,
        len(rows),
        max_rows,
    )
    return "\n".join(lines)


def _side_cell(row, side: str) -> str:
    status = getattr(row, f"{side}_status")
    if not _present(status):
        return "no result"
    if status == "ok":
        return format_value(getattr(row, f"{side}_value"), row.unit)
    reason = getattr(row, f"{side}_reason")
    return _cell(f"{status}: {reason}" if _present(reason) else str(status))


# ---- compared points -------------------------------------------------------------------------


def _table_section(heading: str, verdicts: pd.DataFrame, verdict: str, max_rows: int, ascending: bool) -> str:
    rows = verdicts[verdicts["verdict"] == verdict].sort_values("ratio", ascending=ascending)
    if rows.empty:
        return ""
    commit_h, commit_a = _commit_cells(verdicts)
    cells = [
        _lead(r, bool(commit_h))
        + [
            format_value(r.base_value, r.unit),
            format_value(r.head_value, r.unit),
            _change(r),
            _format_p(r.p_value, r.test),
            _semantics_cell(r),
        ]
        for r in rows.head(max_rows).itertuples(index=False)
    ]
    lines = [f"### {heading} ({len(rows)})", ""]
    lines += _table(
        [*commit_h, "benchmark", "point", "base", "head", "change", "p", "semantics (base → head)"],
        [*commit_a, "---", "---", "---:", "---:", "---:", "---:", "---"],
        cells,
        len(rows),
        max_rows,
    )
    return "\n".join(lines)


def _change(row) -> str:
    return f"{100 * (row.ratio - 1):+.1f}%" if np.isfinite(row.ratio) else "n/a"


def _semantics_cell(row) -> str:
    base, head = row.base_semantics, row.head_semantics
    if not (_present(base) or _present(head)):
        return "not checked"
    base, head = (str(s) if _present(s) else "not checked" for s in (base, head))
    return base if base == head else f"{base} → {head}"


def _semantics_section(verdicts: pd.DataFrame) -> str:
    """How many points showed each (base, head) pair of semantics, over the points both sides
    ran (the semantics are checked once per side and point, on the first input copy)."""
    ran = verdicts[(verdicts["base_status"] == "ok") & (verdicts["head_status"] == "ok")]
    if ran.empty:
        return ""
    pairs = (
        ran[["base_semantics", "head_semantics"]]
        .astype(object)
        .where(ran[["base_semantics", "head_semantics"]].notna(), "not checked")
    )
    table = pairs.value_counts(sort=False).reset_index(name="points")
    order = {s: i for i, s in enumerate((*_SEMANTICS_ORDER, "not checked"))}
    table = table.sort_values(["base_semantics", "head_semantics"], key=lambda s: s.map(lambda v: order.get(v, 99)))
    lines = [
        "### Semantics",
        "",
        "Each side's output at every point both ran (`specsample.semantics`):",
        "",
        "| base | head | points |",
        "|---|---|---:|",
    ]
    lines += [f"| {r.base_semantics} | {r.head_semantics} | {r.points} |" for r in table.itertuples(index=False)]
    return "\n".join(lines)


_SEMANTICS_ORDER = ("same draws", "same semantics, other stream", stats.VIOLATES, "crashed")


def _counts_line(verdicts: pd.DataFrame) -> str:
    n = stats.counts(verdicts)
    four = ", ".join(f"{v}: {n[v]}" for v in stats.COMPARED_VERDICTS)
    return f"Compared points — {four}. Skipped: {n['skipped']} (not applicable to either side)."


def _noise_line(verdicts: pd.DataFrame) -> str:
    rel = verdicts["head_rel_iqr"]
    rel = rel[np.isfinite(rel)]
    if rel.empty:
        return "Noise: no point recorded a spread (track_* only)."
    return (
        f"Noise: median relative IQR of head {100 * rel.median():.1f}% "
        f"over {len(rel)} points with samples or quartiles."
    )


def _machine_line(machine_info: Mapping[str, object] | None) -> str:
    if not machine_info:
        return ""
    labels = {
        "machine": "machine",
        "gpu": "GPU",
        "driver": "driver",
        "cuda": "CUDA",
        "torch": "torch",
        "triton": "triton",
    }
    parts = [f"{label} `{machine_info[k]}`" for k, label in labels.items() if _present(machine_info.get(k))]
    return "Machine: " + " · ".join(parts) if parts else ""


# ---- formatting ------------------------------------------------------------------------------


def _present(value: object) -> bool:
    return value is not None and value is not pd.NA and not (isinstance(value, float) and math.isnan(value))


def _cell(value: object) -> str:
    """Text for one table cell: one line, no pipe."""
    if not _present(value):
        return ""
    text = " ".join(str(value).split())
    return text.replace("|", "\\|")


def point_label(point) -> str:
    """A point for humans, e.g. ``mrv2 block logits R=2 K=2 V=300 phi=0.5 trailing``, from a
    verdicts or results row (a namedtuple) or a point dict, axes in :data:`PARAM_COLUMNS` order."""
    get = point.get if isinstance(point, Mapping) else lambda k, default=None: getattr(point, k, default)
    parts = []
    for column in PARAM_COLUMNS:
        value = get(column, None)
        if column in PATH_DEFAULTS:
            # a path axis is named only off its default
            if _present(value) and value != PATH_DEFAULTS[column]:
                parts.append(f"{column}={value}")
            continue
        if _present(value):
            parts.append(f"{_PARAM_LABELS[column]}={value}" if column in _PARAM_LABELS else str(value))
    return " ".join(parts)


def format_value(value: float, unit: object) -> str:
    """A value with its unit for humans: seconds scaled to ns/µs/ms, others as-is."""
    if not np.isfinite(value):
        return "n/a"
    if unit == "seconds":
        for scale, suffix in ((1e-6, "ns"), (1e-3, "µs"), (1.0, "ms")):
            if abs(value) < scale:
                return f"{value / scale * 1e3:.3g} {suffix}"
        return f"{value:.3g} s"
    return f"{value:.4g} {unit}" if _present(unit) else f"{value:.4g}"


def _format_p(p: float, test: str) -> str:
    if test == "mann-whitney":
        return f"{p:.1e}"
    return {"ci-overlap": "CI", "ratio-only": "—"}.get(test, "")
