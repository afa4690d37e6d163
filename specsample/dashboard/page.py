"""The two HTML pages, from jinja2 templates (``templates/``): ``index.html`` (history, change
points, figures) and ``releases.html`` (vLLM releases).

This module and :mod:`.tables` (the tables' contexts) only format: every number arrives computed
(:mod:`.select`, :mod:`specsample.track.changepoints`) and leaves as text in a template context;
here the pages' headers, navigation, figure sections and their captions. The templates
hold the markup and the style sheet (``templates/style.css``, inlined so a page opened from
disk needs nothing else). Links are relative, so the site works from disk and when served.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
from jinja2 import Environment, PackageLoader, StrictUndefined, select_autoescape

from ..schema import subject_sort_key
from ..tiers import MRV2_RELEASES
from ..track import changepoints
from ..track.results import commit_order
from . import select as sel
from .paths import path_tables
from .render import Rendered
from .specs import (
    ABOVE_ONE_SUBJECT_TEXT,
    ABOVE_ONE_TEXT,
    CAPTION_VALUES,
    NOTHING_ABOVE_ONE,
    PAGES,
    PLACEHOLDER_CHANGE,
    PLACEHOLDER_CHANGE_RELEASE,
    PLACEHOLDER_CHANGE_TEXT,
    PLACEHOLDER_SUBJECTS,
    SECTION_TEXT,
    SECTIONS,
)
from .tables import (
    changes_caption,
    changes_table,
    drop_context,
    environment_context,
    fastest_context,
    fidelity_context,
    newest_context,
    outcomes_context,
    provenance_context,
    versus_context,
)

_ENV = Environment(
    loader=PackageLoader("specsample.dashboard", "templates"),
    autoescape=select_autoescape(["html"]),
    undefined=StrictUndefined,
    trim_blocks=True,
    lstrip_blocks=True,
)


# ---------------------------------------------------------------------------------------------
# Pages
# ---------------------------------------------------------------------------------------------


PROVENANCE_EMPTY = "No provenance recorded (runs write it to results/<machine>/<sha8>.outcomes)."


def write_index(
    out_dir: Path,
    *,
    machine,
    data: pd.DataFrame,
    all_data: pd.DataFrame,
    rendered: list[Rendered],
    notes: list[str],
    changes: pd.DataFrame,
    newest: pd.DataFrame,
    captions: dict,
    provenance: dict | None = None,
    machine_links: dict[str, str] | None = None,
) -> Path:
    """``out_dir/index.html``: header, newest vs previous, the ranked regressions and
    improvements over commits, the figure sections, provenance (which code each subject was,
    FlashInfer's version among them), the environment. ``machine_links``: the other machines'
    sites (name -> folder), linked from the header; without it the other machines are named."""
    order = commit_order(data) if not data.empty else pd.DataFrame()
    header = [f"{len(order)} commits"]
    if len(order):
        header.append(f"{order['date'].min():%Y-%m-%d} → {order['date'].max():%Y-%m-%d}")
        header.append(f"newest {str(order['commit'].iloc[-1])[:8]}")
    others = sorted(set(all_data["machine"].dropna()) - {machine}) if not all_data.empty else []
    if others and machine_links is None:
        header.append("other machines: " + ", ".join(others))
    sections = _sections(rendered, "index", captions)
    links = [
        ("#newest", "Newest vs previous"),
        ("#regressions", "Regressions"),
        ("#improvements", "Improvements"),
        ("#shifts", "Stage shifts"),
        *((f"#{s['id']}", s["heading"]) for s in sections),
        ("#provenance", "Provenance"),
        ("#environment", "Environment"),
    ]
    commits = list(order["commit"]) if len(order) else []
    provenance_rows = provenance_context(provenance or {}, machine, commits)
    context = {
        "machine": str(machine),
        "header": header,
        "machines": _machine_links(machine_links, PAGES["index"]),
        "releases_href": PAGES["releases"],
        "nav": links,
        "notes": notes,
        "newest": newest_context(newest),
        "changes_caption": changes_caption("commits"),
        "regressions": changes_table(changepoints.regressions(changes), "commits", "No regression over commits."),
        "improvements": changes_table(changepoints.improvements(changes), "commits", "No improvement over commits."),
        "shifts": changes_table(changepoints.shifts(changes), "commits", "No stage shift over commits."),
        "shifts_caption": "Steps of one stage " + changepoints.SHIFTS_TEXT + ".",
        "sections": sections,
        "environment": environment_context(data),
        "provenance": provenance_rows,
        "provenance_empty": PROVENANCE_EMPTY,
    }
    return _write(out_dir / PAGES["index"], "index.html", context)


def _machine_links(folders: dict[str, str] | None, page_name: str) -> list[dict]:
    """The same page of each other machine's site (name -> its folder, relative to this one)."""
    return [{"name": name, "href": folder + page_name} for name, folder in sorted((folders or {}).items())]


def write_releases(
    out_dir: Path,
    *,
    machine,
    rows: pd.DataFrame,
    rendered: list[Rendered],
    changes: pd.DataFrame,
    provenance: dict,
    captions: dict,
    notes: list[str],
    fidelity: pd.DataFrame | None = None,
    exactness: list[dict] | None = None,
    machine_links: dict[str, str] | None = None,
) -> Path:
    """``out_dir/releases.html``: the fastest release per mode, the placeholder change between
    releases, the newest release against ours, replica fidelity, faults and semantics, latency
    over releases, paths per release, changes between releases, exactness, provenance.
    ``machine_links`` as for the index."""
    releases = changepoints.release_order(rows["release"].dropna()) if not rows.empty else []
    dated = list(commit_order(rows.dropna(subset=["commit"]))["commit"]) if not rows.empty else []  # oldest first
    commits = sorted(dated)
    header, notes = [], list(notes)
    if releases:
        header.append(f"measured at commit {', '.join(c[:8] for c in commits)}")
        header.append(f"{len(releases)} releases: {', '.join(releases)}")
        ours = sorted(set(rows.loc[rows["release"].isna(), "subject"].dropna()), key=subject_sort_key)
        if ours:
            header.append("beside them: " + ", ".join(ours))
        unmeasured = [r for r in MRV2_RELEASES if r not in releases]
        if unmeasured:
            notes.append(
                f"Not measured here yet: {', '.join('vllm==' + r for r in unmeasured)} (in "
                f"specsample.tiers.MRV2_RELEASES); `specsample backfill "
                f"{' '.join('vllm==' + r for r in unmeasured)}` on the GPU box measures them."
            )
    else:
        notes.append(
            "No vLLM release results in these results yet: `specsample bench --tier "
            "releases` on the GPU box measures every release of "
            "specsample.tiers.MRV2_RELEASES beside mrv2, mrv2-pre50939 and fast."
        )
    sections = _sections(rendered, "releases", captions)
    path_rows = path_tables(rows)
    links = (
        [
            ("#fastest-release", "Fastest release"),
            ("#placeholder-drop", "Placeholder change"),
            ("#newest-release", "Newest vs ours"),
            ("#fidelity", "Replica fidelity"),
            ("#release-outcomes", "Faults and semantics"),
            *((f"#{s['id']}", s["heading"]) for s in sections),
            *([("#release-paths", "Paths per release")] if path_rows else []),
            ("#release-regressions", "Changes between releases"),
        ]
        if releases
        else []
    )
    links += [("#exactness", "Exactness"), ("#provenance", "Provenance")]
    provenance_rows = provenance_context(provenance, machine, dated)
    context = {
        "machine": str(machine),
        "header": header,
        "machines": _machine_links(machine_links, PAGES["releases"]),
        "index_href": PAGES["index"],
        "nav": links,
        "notes": notes,
        "has_releases": bool(releases),
        "change": PLACEHOLDER_CHANGE,
        "change_release": PLACEHOLDER_CHANGE_RELEASE,
        "change_text": PLACEHOLDER_CHANGE_TEXT,
        "fastest": fastest_context(rows),
        "drop": drop_context(rows),
        "versus": versus_context(rows),
        "fidelity": fidelity_context(fidelity if fidelity is not None else pd.DataFrame()),
        "outcomes": outcomes_context(rows),
        "sections": sections,
        "changes_caption": changes_caption("releases"),
        "regressions": changes_table(changepoints.regressions(changes), "releases", "No regression between releases."),
        "improvements": changes_table(
            changepoints.improvements(changes), "releases", "No improvement between releases."
        ),
        "provenance": provenance_rows,
        "provenance_empty": PROVENANCE_EMPTY,
        "exactness": exactness or [],
        "paths": path_rows,
    }
    return _write(out_dir / PAGES["releases"], "releases.html", context)


def section_captions(
    *, data: pd.DataFrame, placeholder_change: pd.DataFrame, release_rows: pd.DataFrame
) -> dict[str, str]:
    """The text under each figure section, with this build's numbers."""
    values = dict(CAPTION_VALUES)
    values["floor"] = changepoints.NOISE_FLOOR["commits"]
    values["release_floor"] = changepoints.NOISE_FLOOR["releases"]
    commits = sorted(set(release_rows["commit"].dropna())) if not release_rows.empty else []
    values["commit"] = ", ".join(c[:8] for c in commits) or "—"
    values["release_note"] = _placeholder_note(placeholder_change)
    values["above_one"] = _above_one_note(data)
    return {section: text.format(**values) for section, text in SECTION_TEXT}


# ---------------------------------------------------------------------------------------------
# Sections, captions and rendering
# ---------------------------------------------------------------------------------------------


def _write(path: Path, template: str, context: dict) -> Path:
    path.write_text(_ENV.get_template(template).render(**context), encoding="utf-8")
    return path


def _sections(rendered: list[Rendered], page: str, captions: dict) -> list[dict]:
    out = []
    for section_id, heading, on_page in SECTIONS:
        if on_page != page:
            continue
        items = [
            {
                "note": f"Skipped “{item.spec.title}”: {item.note}." if not item.files else "",
                "images": [{"src": src, "alt": alt, "title": title} for src, alt, title in item.files],
            }
            for item in rendered
            if item.spec.section == section_id
        ]
        out.append({"id": section_id, "heading": heading, "entries": items, "caption": captions.get(section_id, "")})
    return out


def _placeholder_note(change: pd.DataFrame) -> str:
    before, after = PLACEHOLDER_SUBJECTS
    if change.empty:
        return (
            f"No reference drawn: vLLM {PLACEHOLDER_CHANGE_RELEASE} (where "
            f"{PLACEHOLDER_CHANGE} landed) and the release before it have not both been "
            f"measured (the releases tier does, on the GPU box), so the panels show our "
            f"replica pair alone. Once they are, a dotted grey line marks {before}'s "
            f"latency times the change measured between the two releases."
        )
    return (
        f"Dotted grey line: {before}'s latency times the latency change measured between "
        f"vLLM {change['before'].iloc[0]} and {change['after'].iloc[0]} ({PLACEHOLDER_CHANGE}) "
        f"at the same mode, draft kind, pattern and phi (releases page); {after} lies on it "
        f"where our replica pair reproduces the real change."
    )


def _above_one_note(data: pd.DataFrame) -> str:
    above = sel.bandwidth_above_one(data)
    if above.empty:
        return NOTHING_ABOVE_ONE
    listed = "; ".join(
        f"{r['subject']} up to {r['max']:.2f} ({r['points']} points, {', '.join(r['benchmarks'])})"
        for r in above.to_dict("records")
    )
    extra = [text for subject, text in ABOVE_ONE_SUBJECT_TEXT if subject in set(above["subject"])]
    return " ".join([ABOVE_ONE_TEXT.format(above=listed), *extra])
