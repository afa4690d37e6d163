"""A static site (``index.html``, ``releases.html``, ``figures/*.png``) from the results frame.

The data flow reads top to bottom, one module per step:

1. :mod:`.specs`: what is shown, as data (:class:`FigureSpec` declarations, sections, captions).
2. :mod:`.select`: which rows each figure and table shows, and the numbers the pages print.
3. :mod:`specsample.track.changepoints`: the steps in every history series, over commits and
   over vLLM releases, regressions apart from improvements, each above the measured noise.
4. :mod:`.render`: matplotlib figures (``matplotlib.figure.Figure``, Agg) per spec.
5. :mod:`.page`: the HTML pages from jinja2 templates (``templates/``), their tables from
   :mod:`.tables`.

:func:`build_dashboard` runs them in that order. A spec whose data is missing is skipped with
one note on the page (the reason, and the benchmarks it applies to) instead of failing the
build. No torch and no Triton are imported: the site builds on any machine with the results.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from ..tiers import REPLICATED_RELEASE
from ..track import changepoints
from ..track.results import load_provenance
from . import page, select
from .exactness import exactness_rows
from .render import Context, Rendered, render_all, render_figure
from .select import MissingData
from .specs import FIGURES, OUR_TIERS, SECTIONS, FigureSpec

__all__ = ["FIGURES", "FigureSpec", "MissingData", "build_dashboard", "build_sites", "render_figure"]


def build_dashboard(
    df: pd.DataFrame,
    out_dir: str | Path,
    *,
    machine: str | None = None,
    figures: Sequence[FigureSpec] = FIGURES,
    results_dir: str | Path | None = None,
    machine_links: dict[str, str] | None = None,
) -> Path:
    """Write ``out_dir/index.html``, ``out_dir/releases.html`` and ``out_dir/figures/*.png``;
    return the index path.

    Parameters
    ----------
    df : DataFrame
        Results frame from :func:`specsample.track.results.load_results`.
    out_dir : str or Path
        Created if missing. ``figures/*.png`` of a previous build are removed first, so a
        rebuild leaves no stale figure behind; nothing else there is touched.
    machine : str, optional
        Machine to show; default the machine with the newest result that is not a CPU-interpreter
        machine (:func:`select.interpreter_machines`). Other machines are listed. ``ValueError``
        when it has no results, or when only CPU-interpreter machines have and none is named.
    figures : sequence of FigureSpec
        What to draw; default :data:`FIGURES` (the section of each says its page).
    results_dir : str or Path, optional
        The results directory ``df`` was loaded from: the releases page shows the provenance
        its runs recorded (:func:`specsample.track.results.load_provenance`).
    machine_links : dict, optional
        The other machines' sites, name -> their folder relative to ``out_dir`` ("" or ending in
        "/"; :func:`build_sites`): each page links the same page of theirs. Without it the other
        machines are only named.
    """
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    known = sorted(set(df["machine"].dropna())) if not df.empty else []
    if machine is None and known:
        machine = select.default_machine(df)
        if machine is None:
            raise ValueError(
                f"only CPU-interpreter results ({', '.join(known)}); their timings say nothing about a GPU: "
                f"name one with --machine to draw it anyway"
            )
    elif machine is not None and machine not in known:
        raise ValueError(f"no results for machine {machine!r}; machines there: {', '.join(known) or 'none'}")
    data = df[df["machine"] == machine] if machine is not None else df
    data = select.without_self_ratios(data)
    releases = select.release_rows(data)
    placeholder_change = select.placeholder_change(releases)
    context = Context(
        changes=_with_culprits(changepoints.detect(data, "commits"), results_dir),
        release_changes=changepoints.detect(releases, "releases"),
        placeholder_change=placeholder_change,
    )
    pages = {section: on_page for section, _, on_page in SECTIONS}
    rendered: list[Rendered] = render_all(
        figures, {"index": data, "releases": releases}, context, out_dir / "figures", pages
    )
    captions = page.section_captions(data=data, placeholder_change=placeholder_change, release_rows=releases)
    provenance = load_provenance(results_dir) if results_dir is not None else {}
    ours = data["tier"].isin(OUR_TIERS) if not data.empty else data.index == data.index
    page.write_releases(
        out_dir,
        machine=machine,
        rows=releases,
        rendered=rendered,
        changes=context.release_changes,
        provenance=provenance,
        captions=captions,
        notes=select.status_notes(data[~ours]),
        fidelity=select.replica_fidelity(data, REPLICATED_RELEASE),
        exactness=exactness_rows(results_dir, machine),
        machine_links=machine_links,
    )
    return page.write_index(
        out_dir,
        machine=machine,
        data=data,
        all_data=df,
        rendered=rendered,
        notes=select.status_notes(data[ours]),
        changes=context.changes,
        newest=changepoints.newest_vs_previous(data),
        captions=captions,
        provenance=provenance,
        machine_links=machine_links,
    )


def build_sites(
    df: pd.DataFrame,
    out_dir: str | Path,
    *,
    figures: Sequence[FigureSpec] = FIGURES,
    results_dir: str | Path | None = None,
) -> list[Path]:
    """One site per GPU machine, linked to each other: the default machine's
    (:func:`select.default_machine`, the longest history) in ``out_dir``, every other machine's
    in ``out_dir/<machine>/`` (CPU-interpreter machines left out). Timings of two GPUs never
    share an axis; each site is :func:`build_dashboard` of one machine. Returns the index paths,
    the default machine's first. With no GPU machine, :func:`build_dashboard`'s choice and errors."""
    out_dir = Path(out_dir)
    default = select.default_machine(df) if not df.empty else None
    if default is None:  # no GPU machine: build_dashboard says why (an empty frame: an empty site)
        return [build_dashboard(df, out_dir, figures=figures, results_dir=results_dir)]
    others = sorted(set(df["machine"].dropna()) - select.interpreter_machines(df) - {default})
    for name in others:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", name):
            raise ValueError(f"machine name {name!r} cannot name a site directory")
    sites = {default: out_dir, **{name: out_dir / name for name in others}}

    def links(here: str) -> dict[str, str]:
        up = "" if here == default else "../"
        return {name: up + ("" if name == default else f"{name}/") for name in sites if name != here}

    return [
        build_dashboard(df, where, machine=name, figures=figures, results_dir=results_dir, machine_links=links(name))
        for name, where in sites.items()
    ]


def _with_culprits(changes, results_dir):
    """``changes`` with a ``culprit`` column: what the nightly's bisection of each found
    (:mod:`specsample.bisect.nightly`), empty where none ran."""
    from ..bisect.nightly import culprit_text, load_culprits

    found = load_culprits(results_dir)
    ids = changes["id"] if "id" in changes else [None] * len(changes)
    return changes.assign(culprit=[culprit_text(found.get(i)) for i in ids])
