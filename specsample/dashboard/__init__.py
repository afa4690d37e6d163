"""A static dashboard (index.html + PNGs) from the results frame.

Figures are declared as data (:class:`FigureSpec`, in the spirit of Triton's ``perf_report``):
which column goes on x, one line (or bar) per value of which column, which unit, which rows.
One builder, :func:`render_figure`, turns a spec into matplotlib figures; :func:`build_dashboard`
renders every spec in :data:`FIGURES`, writes the PNGs and the page. A spec whose data is
missing is skipped with one note on the page (the reason, and the benchmarks it applies to)
instead of failing the build.

The page uses relative links only, so it works opened from disk and when served. Matplotlib is
used through ``matplotlib.figure.Figure`` (Agg rendering) rather than pyplot, so importing this
module changes no global backend state.
"""

from __future__ import annotations

import html
import math
import re
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

from ..schema import STAGES
from ..track import results as _results
from ..track.signoff import HIGHER_IS_BETTER, format_value

# ---------------------------------------------------------------------------------------------
# Figures declared as data
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FigureSpec:
    """One figure (or one per value of ``split``) of the dashboard.

    Attributes
    ----------
    name : str
        PNG file stem.
    title : str
    kind : str
        ``"history"`` (y over commits), ``"line"`` (y against x at the newest commit),
        ``"bars"`` (grouped bars: one group per x value, one bar per ``line`` value, at the
        newest commit), ``"heatmap"`` (speedup of ``compare[1]`` over ``compare[0]`` on x by
        ``line``), ``"placeholder"`` (two variants against x with the expected drop band).
    x, y : str
        Columns on the axes; ``x="commit"`` means commit order.
    unit : str
        Unit of y after ``scale``, shown on the axis or colour bar.
    quantity : str
        What y measures ("latency"); the y axis reads ``quantity (unit)``, or just ``unit``
        when empty (a unit that names the quantity, like "fraction of copy bandwidth").
    line : str or None
        One line (bar) per value of this column (the row axis of a heatmap).
    filter : tuple of (column, value) pairs
        Rows kept: column equals value, or is in it when value is a tuple.
    facet : str or None
        One subplot per value of this column (the columns of the grid).
    facet_row : str or None
        With ``facet``: one row of subplots per value of this column.
    split : str or None
        One PNG per value of this column.
    scale : float
        y is multiplied by this before plotting (seconds to µs: 1e6).
    agg : str
        How points sharing (facet, line, x) are combined: ``"geomean"`` (asv's summary
        graphs do the same over parameters) or ``"median"``.
    compare : (str, str) or None
        (base variant, head variant) for heatmaps and the placeholder panel; for bars, the
        change of head over base is printed above each group.
    ci : (str, str) or None
        Columns of the lower and upper confidence bound of y (asv's ``ci_lo``/``ci_hi``),
        drawn as a band where every plotted point is one measured point.
    log_axes : tuple of str
        ``"x"`` and/or ``"y"``: drawn on a log scale (x ticked at the measured values).
    section : str
        HTML section id the figure goes to.
    """

    name: str
    title: str
    kind: str
    x: str
    y: str
    unit: str
    quantity: str = ""
    line: str | None = None
    filter: tuple[tuple[str, object], ...] = ()
    facet: str | None = None
    facet_row: str | None = None
    split: str | None = None
    scale: float = 1.0
    agg: str = "geomean"
    compare: tuple[str, str] | None = None
    ci: tuple[str, str] | None = None
    log_axes: tuple[str, ...] = ()
    section: str = "history"
    also: tuple[str, ...] = ()  # placeholder panel: more variants drawn beside compare's two


US = 1e6  # asv stores time_* in seconds; kernels run in microseconds
TIME = (("unit", "seconds"),)
TIME_SAMPLE = (*TIME, ("metric", "time_sample"))
NEWEST = "mrv2"  # the variant speedups are measured for
BASELINES = ("torch-eager", "flashinfer", "mrv2-pre50939")
FASTEST = "fast"  # the faster design, shown against mrv2 (issue 7)

# The latency drop upstream PR 50939 reported for mrv2 over its predecessor; drawn as a band so
# the measured change can be read against it.
PLACEHOLDER_DROP_BAND = (0.20, 0.36)
PLACEHOLDER_VARIANTS = ("mrv2-pre50939", "mrv2")

# The nightly one-axis sweeps (specsample.grid): sweep name, the axis it varies, log axes.
NIGHTLY_SWEEPS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("Batch", "num_reqs", ("x", "y")),
    ("Vocab", "vocab_size", ("x",)),
    ("Steps", "num_speculative_steps", ()),
)

FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec(
        name="history-latency", title="Latency over commits (geomean over other params)",
        kind="history", x="commit", y="value", unit="µs", quantity="latency", line="subject",
        facet="mode", split="benchmark", filter=TIME, scale=US,
    ),
    FigureSpec(
        name="history-stage", title="Kernel stage time over commits (geomean over other params)",
        kind="history", x="commit", y="value", unit="µs", quantity="stage time",
        line="subject", facet="stage", split="benchmark",
        filter=(("metric", "track_stage_us"),),
    ),
    FigureSpec(
        name="placeholder", title="Placeholder handling: mrv2 vs mrv2-pre50939 latency vs phi",
        kind="placeholder", x="placeholder_density", y="value", unit="µs", quantity="latency", line="subject",
        facet="mode", split="benchmark", filter=TIME_SAMPLE, scale=US,
        compare=PLACEHOLDER_VARIANTS, also=(FASTEST,), section="placeholder-panel",
    ),
    *(
        FigureSpec(
            name=f"placeholder-interleaved-{draft}",
            title=(f"Placeholder handling ({draft} drafts, variants interleaved): "
                   "mrv2 vs mrv2-pre50939 vs phi"),
            kind="placeholder", x="placeholder_density", y="value", unit="µs", quantity="latency",
            line="subject", facet="mode", split="benchmark",
            filter=(("metric", "track_latency_us"), ("draft", draft)),
            compare=PLACEHOLDER_VARIANTS, also=(FASTEST,), section="placeholder-panel",
        )
        for draft in ("logits", "one-hot")
    ),
    FigureSpec(
        name="stages", title="Per-kernel breakdown (logits drafts): stage time per variant",
        kind="bars", x="stage", y="value", unit="µs", quantity="stage time", line="subject",
        facet="mode", facet_row="placeholder_density", split="benchmark",
        filter=(("metric", "track_stage_us"), ("draft", "logits")),
        compare=PLACEHOLDER_VARIANTS, agg="median", section="stages",
    ),
    *(
        FigureSpec(
            name=f"sweep-{x}", title=f"Latency vs {x} (nightly {sweep} sweep, newest commit)",
            kind="line", x=x, y="value", unit="µs", quantity="latency", line="subject",
            facet="mode", split="benchmark",
            filter=(*TIME_SAMPLE, ("tier", "nightly"), ("sweep", sweep)), scale=US,
            ci=("ci_lo", "ci_hi"), log_axes=log_axes, section="sweeps",
        )
        for sweep, x, log_axes in NIGHTLY_SWEEPS
    ),
    *(
        FigureSpec(
            name=f"speedup-{base}-{x}-{rows}",
            title=f"Speedup of {NEWEST} over {base} by {x} × {rows}",
            kind="heatmap", x=x, y="speedup", unit="×", quantity="speedup", line=rows,
            filter=TIME_SAMPLE, compare=(base, NEWEST), split="benchmark", section="speedup",
        )
        for base in BASELINES
        for x, rows in (("num_reqs", "vocab_size"), ("num_speculative_steps", "placeholder_density"))
    ),
    *(
        FigureSpec(
            name=f"speedup-{FASTEST}-over-{NEWEST}-{x}-{rows}",
            title=f"Speedup of {FASTEST} over {NEWEST} by {x} × {rows}",
            kind="heatmap", x=x, y="speedup", unit="×", quantity="speedup", line=rows,
            filter=TIME_SAMPLE, compare=(NEWEST, FASTEST), split="benchmark", section="speedup",
        )
        for x, rows in (("num_reqs", "vocab_size"), ("num_speculative_steps", "placeholder_density"))
    ),
    FigureSpec(
        name="bandwidth", title="Achieved bandwidth fraction (median over other params)",
        kind="line", x="num_reqs", y="value", unit="fraction of copy bandwidth",
        line="subject", facet="mode", split="benchmark",
        filter=(("metric", "track_bandwidth_fraction"),), agg="median",
        log_axes=("x",), section="bandwidth",
    ),
    FigureSpec(
        name="bandwidth-phi",
        title="Achieved bandwidth fraction vs placeholder density (median over other params)",
        kind="line", x="placeholder_density", y="value", unit="fraction of copy bandwidth",
        line="subject", facet="mode", split="benchmark",
        filter=(("metric", "track_bandwidth_fraction"),), agg="median", section="bandwidth",
    ),
)

SECTIONS: tuple[tuple[str, str], ...] = (
    ("history", "History"),
    ("placeholder-panel", "Placeholder panel"),
    ("stages", "Per-kernel breakdown"),
    ("sweeps", "Latency sweeps"),
    ("speedup", "Speedup heatmaps"),
    ("bandwidth", "Achieved bandwidth"),
)

# A paragraph under a section's figures.
SECTION_TEXT: tuple[tuple[str, str], ...] = (
    ("placeholder-panel",
     "Grey band: the {low:.0%}–{high:.0%} latency drop reported for the placeholder change "
     "(PR 50939), drawn below the mrv2-pre50939 line. Labels along the bottom of each panel: "
     "the latency change of mrv2 vs mrv2-pre50939 (geomean over the other parameters); "
     "negative is faster."),
    ("stages",
     "Kernel time per pipeline stage at the newest commit, one row of panels per placeholder "
     "density phi. Labels: the mrv2 vs mrv2-pre50939 change of a stage where it is at "
     "least {min_change}% and {min_share:.0%} of the tallest bar. “n/a”: the stage does not "
     "run in that mode."),
    ("sweeps",
     "Latency against the one axis each nightly sweep varies, the others held at the base "
     "point (num_reqs=128, K=4, vocab_size=151936, phi=0.5). Shaded: asv's 99% confidence "
     "interval of the median (often narrower than the line)."),
)

# Axis labels with units; a column not listed is labelled by its name.
AXIS_LABELS: tuple[tuple[str, str], ...] = (
    ("commit", "commit (oldest → newest)"),
    ("num_reqs", "num_reqs (requests per batch)"),
    ("vocab_size", "vocab_size (tokens)"),
    ("num_speculative_steps", "K (draft tokens per request)"),
    ("placeholder_density", "phi (placeholder fraction, dimensionless)"),
    ("stage", "kernel stage (pipeline order)"),
)

# Category order, the same in every figure (facets, lines, bars); values not listed follow in
# order of first appearance.
CATEGORY_ORDER: tuple[tuple[str, tuple], ...] = (
    ("mode", ("greedy", "standard", "block")),
    ("stage", STAGES),
    ("subject", ("mrv2", "fast", "mrv2-pre50939", "torch-eager", "flashinfer", "flashinfer-kernel")),
)

VARIANT_COLORS: tuple[tuple[str, str], ...] = (
    ("mrv2", "C0"), ("mrv2-pre50939", "C1"), ("torch-eager", "C2"), ("flashinfer", "C3"),
    ("flashinfer-kernel", "C4"), ("fast", "C5"),
)
# Line style per variant: mrv2-pre50939 is dashed with hollow squares and drawn above mrv2, so
# it stays visible where the two are equal.
VARIANT_STYLES: tuple[tuple[str, dict], ...] = (
    ("mrv2-pre50939", {"ls": "--", "marker": "s", "mfc": "none", "ms": 5, "zorder": 3}),
)
DEFAULT_STYLE = {"ls": "-", "marker": "o", "ms": 3, "zorder": 2}

DPI = 90  # small PNGs: the whole site stays well under 3 MB for a nightly history
PANEL_SIZE = (4.2, 3.0)  # inches per subplot, margins included
# Fixed margins in inches instead of tight_layout, which measures every text by drawing it and
# roughly doubles the build time; labels here have bounded lengths, so fixed room suffices.
MARGINS = {"left": 0.75, "right": 0.2, "top": 0.75, "bottom": 0.55, "legend": 0.4,
           "wspace": 0.3, "hspace": 0.45}
TITLE_TOP = 0.06  # inches from the top edge to the figure title
LINE_HEIGHT = 0.2  # inches per extra line of title or legend
ROTATED_TICKS_ROOM = 0.45  # inches more below each row for rotated tick labels
MAX_FACETS_PER_ROW = 3
MAX_TABLE_ROWS = 200
LEGEND_FONTSIZE = 9
LABEL_FONTSIZE = 8  # in-plot value labels
MIN_LABELLED_CHANGE = 5  # percent; smaller stage changes are not labelled
MIN_LABELLED_SHARE = 0.02  # nor changes below this fraction of the tallest bar (µs noise)
HEATMAP_MIN_RANGE = 1.10  # the colour bar spans at least 1/1.10 … 1.10×


class MissingData(Exception):
    """A figure's data is not in the frame; the page says why instead of showing it."""


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def build_dashboard(
    df: pd.DataFrame,
    out_dir: str | Path,
    *,
    regressions: pd.DataFrame | str | Path | None = None,
    asv_html_link: str = "../html/index.html",
    machine: str | None = None,
    figures: Sequence[FigureSpec] = FIGURES,
    results_dir: str | Path | None = None,
) -> Path:
    """Write ``out_dir/index.html`` and ``out_dir/figures/*.png``; return the index path.

    Parameters
    ----------
    df : DataFrame
        Results frame from :func:`specsample.results.load_results`.
    out_dir : str or Path
        Created if missing. ``figures/*.png`` of a previous build are removed first, so a
        rebuild leaves no stale figure behind; nothing else there is touched.
    regressions : DataFrame, path or None
        Steps detected by ``asv publish``: the frame from
        :func:`specsample.results.load_asv_regressions`, or asv's html directory (or its
        ``regressions.json``) to load it from. Marked on history plots and tabulated.
    asv_html_link : str
        Link to asv's own site, relative to ``out_dir``. Linked only when that file exists
        at build time (or the link is an http(s) URL); otherwise the page says how it is built.
    machine : str, optional
        Machine to show; default the machine with the newest result. Other machines are listed.
    figures : sequence of FigureSpec
        What to draw; default :data:`FIGURES`.
    """
    out_dir = Path(out_dir)
    _clear_figures(out_dir / "figures")
    notes: list[str] = []
    regressions = _regressions_frame(regressions, notes)
    machine = machine or _default_machine(df)
    data = df[df["machine"] == machine] if machine is not None else df
    if machine is not None and not regressions.empty:
        regressions = regressions[regressions["machine"].isin([machine, _sanitize(machine)])]
    notes.extend(_status_notes(data))
    rendered = _render_all(figures, data, regressions, out_dir / "figures")
    asv_link = asv_html_link if _asv_site_exists(out_dir, asv_html_link) else None
    page = _page(data, df, machine, rendered, regressions, asv_link, notes)
    index = out_dir / "index.html"
    index.write_text(page, encoding="utf-8")
    return index


def render_figure(
    spec: FigureSpec, df: pd.DataFrame, *, regressions: pd.DataFrame | None = None
) -> list[tuple[str, Figure]]:
    """Render one spec: a list of (file stem, Figure), one per ``split`` value.

    Raises :class:`MissingData` when no rows match the spec, a needed column is absent, or no
    ``split`` value could be drawn (the message gives each reason once, with its benchmarks).
    """
    drawn, skipped = _render_spec(spec, df, regressions)
    if not drawn:
        raise MissingData(_skip_reason(skipped))
    return [(stem, fig) for stem, _, fig in drawn]


# ---------------------------------------------------------------------------------------------
# Selecting data
# ---------------------------------------------------------------------------------------------


def _render_spec(spec: FigureSpec, df: pd.DataFrame, regressions: pd.DataFrame | None):
    """([(file stem, split value, Figure)], {reason: [split values]}) for one spec."""
    selected = _select(df, spec)
    renderer = _RENDERERS[spec.kind]
    if spec.split is None:
        return [(spec.name, "", renderer(spec, selected, regressions, ""))], {}
    drawn, skipped = [], {}
    for value, part in selected.groupby(spec.split, sort=True):
        try:
            fig = renderer(spec, part, regressions, str(value))
        except MissingData as exc:
            skipped.setdefault(str(exc), []).append(str(value))
            continue
        drawn.append((f"{spec.name}-{_slug(value)}", str(value), fig))
    return drawn, skipped


def _skip_reason(skipped: dict[str, list[str]]) -> str:
    """Each reason once, followed by the split values (benchmarks) it applies to."""
    if not skipped:
        return "no data"
    return "; ".join(f"{reason} ({_compact_names(values)})" for reason, values in skipped.items())


def _compact_names(names: list[str]) -> str:
    """Benchmark names sharing module and method written once: ``mod.{A, B}.time_sample``."""
    parts = [n.split(".") for n in names]
    if len(names) > 1 and all(len(p) == 3 for p in parts) \
            and len({(p[0], p[2]) for p in parts}) == 1:
        module, _, method = parts[0]
        return f"{module}.{{{', '.join(p[1] for p in parts)}}}.{method}"
    return ", ".join(names)


def _select(df: pd.DataFrame, spec: FigureSpec) -> pd.DataFrame:
    """Rows a spec draws: filter applied, status ok, needed columns present and non-missing."""
    needed = [c for c in (spec.x, spec.line, spec.facet, spec.facet_row, spec.split)
              if c and c != "commit"]
    missing = [c for c, _ in spec.filter if c not in df] + [c for c in needed if c not in df]
    if missing:
        raise MissingData(f"no column {', '.join(missing)} in the results")
    mask = df["status"] == "ok"
    for column, wanted in spec.filter:
        mask &= df[column].isin(wanted) if isinstance(wanted, tuple) else df[column] == wanted
    selected = df[mask.fillna(False)].dropna(subset=needed + ["value"])
    if selected.empty:
        where = ", ".join(f"{c}={v}" for c, v in spec.filter) or "any rows"
        raise MissingData(f"no successful results with {where} and {', '.join(needed)} set")
    return selected


def _require_varying(df: pd.DataFrame, column: str) -> None:
    """A sweep that holds x at one value has nothing to draw against it."""
    if df[column].nunique() < 2:
        raise MissingData(f"{column} takes fewer than two values")


def _newest_commit(df: pd.DataFrame) -> pd.DataFrame:
    """Rows of the newest commit present in df (a sweep may not run on every commit)."""
    order = _results.commit_order(df)
    return df[df["commit"] == order["commit"].iloc[-1]]


def _pair_variants(df: pd.DataFrame, base_variant: str, head_variant: str) -> pd.DataFrame:
    """Points measured for both variants in the same run: key columns, base_value, head_value,
    ratio (head / base). A plain join; the statistics of :func:`signoff.compare_variants` are
    not needed to draw and would dominate the build time."""
    present = set(df["subject"].dropna())
    absent = [v for v in (base_variant, head_variant) if v not in present]
    if absent:
        raise MissingData(f"no {' or '.join(absent)} results")
    key = [c for c in ("machine", "benchmark", "commit", *_results.PARAM_COLUMNS)
           if c in df and c != "subject"]
    sides = [df.loc[df["subject"] == v, key + ["value"]].rename(columns={"value": f"{n}_value"})
             for v, n in ((base_variant, "base"), (head_variant, "head"))]
    pairs = sides[0].merge(sides[1], on=key, how="inner")
    pairs["base_value"] = pairs["base_value"].astype("float64")
    pairs["head_value"] = pairs["head_value"].astype("float64")
    pairs["ratio"] = pairs["head_value"] / pairs["base_value"]
    pairs = pairs[np.isfinite(pairs["ratio"]) & (pairs["ratio"] > 0)]
    if pairs.empty:
        raise MissingData(f"no points measured for both {base_variant} and {head_variant}")
    return pairs


def _aggregate(values: pd.Series, how: str) -> float:
    values = values.astype("float64")
    values = values[np.isfinite(values)]
    if values.empty:
        return math.nan
    if how == "geomean":
        positive = values[values > 0]
        return float(np.exp(np.log(positive).mean())) if len(positive) else math.nan
    return float(values.median())


def _group(df: pd.DataFrame, by: list[str], column: str, how: str) -> pd.DataFrame:
    """Aggregate ``column`` over every row sharing ``by``; returns by + column."""
    by = [b for b in by if b]
    grouped = df.groupby(by, sort=True, dropna=False)[column]
    return grouped.agg(lambda s: _aggregate(s, how)).reset_index()


def _ordered(values, column: str | None) -> list:
    """Distinct values in :data:`CATEGORY_ORDER`, unknown ones after in first-seen order."""
    seen = list(dict.fromkeys(values))
    known = dict(CATEGORY_ORDER).get(column, ())
    rank = {v: i for i, v in enumerate(known)}
    return sorted(seen, key=lambda v: (rank.get(v, len(rank)), seen.index(v)))


def _groups(df: pd.DataFrame, column: str | None) -> list[tuple[object, pd.DataFrame]]:
    """(value, rows) per value of column in canonical order; one group when column is None."""
    if column is None or column not in df:
        return [(None, df)]
    parts = dict(list(df.groupby(column, sort=False, dropna=False)))
    return [(value, parts[value]) for value in _ordered(parts, column)]


# ---------------------------------------------------------------------------------------------
# Renderers, one per kind
# ---------------------------------------------------------------------------------------------


def _render_history(spec, df, regressions, split_value) -> Figure:
    order = _results.commit_order(df)
    position = dict(zip(order["commit"], order["position"]))
    if len(order) < 2:
        raise MissingData("fewer than two commits")
    df = df.assign(_x=df["commit"].map(position).astype("float64"), _y=df[spec.y] * spec.scale)
    steps = _steps_for(regressions, split_value, spec, position)
    fig, panels = _facet_axes(spec, df, rotated_ticks=True)
    for ax, _, facet_value, part in panels:
        for line_value, series in _groups(part, spec.line):
            points = _group(series, ["_x"], "_y", spec.agg)
            _plot_line(ax, points["_x"], points["_y"], line_value)
            _mark_steps(ax, points, steps.get((facet_value, line_value), {}))
        _commit_ticks(ax, order)
        _label(ax, spec)
    _finish(fig, spec, split_value, panels)
    return fig


def _render_line(spec, df, regressions, split_value) -> Figure:
    df = _newest_commit(df)
    df = df.assign(_y=df[spec.y] * spec.scale)
    _require_varying(df, spec.x)
    with_ci = spec.ci is not None and all(c in df for c in spec.ci)
    # A confidence band only where each plotted point is one measured point: the CI of a
    # geomean over several points is not the geomean of their CIs.
    single = with_ci and not df.duplicated([c for c in (spec.facet, spec.facet_row, spec.line,
                                                        spec.x) if c]).any()
    fig, panels = _facet_axes(spec, df)
    for ax, _, _, part in panels:
        for line_value, series in _groups(part, spec.line):
            points = _group(series, [spec.x], "_y", spec.agg)
            x = points[spec.x].astype("float64")
            _plot_line(ax, x, points["_y"], line_value)
            if single:
                lo = series.set_index(spec.x)[spec.ci[0]].reindex(points[spec.x]) * spec.scale
                hi = series.set_index(spec.x)[spec.ci[1]].reindex(points[spec.x]) * spec.scale
                ax.fill_between(x, lo.to_numpy("float64"), hi.to_numpy("float64"),
                                color=_color(line_value), alpha=0.25, lw=0, zorder=1)
        _scale_axes(ax, spec, part[spec.x])
        _label(ax, spec)
    note = _commit_note(df)
    if with_ci and single:
        half = ((df[spec.ci[1]] - df[spec.ci[0]]) / 2 / df[spec.y]).max()
        note += f"; shaded: asv 99% CI of the median (at most ±{100 * half:.2g}% here)"
    elif with_ci:
        note += "; no CI band: points aggregate several measurements"
    _finish(fig, spec, split_value, panels, note=note)
    return fig


def _render_bars(spec, df, regressions, split_value) -> Figure:
    df = _newest_commit(df)
    df = df.assign(_y=df[spec.y] * spec.scale)
    categories = _ordered(df[spec.x], spec.x)
    bars = _ordered(df[spec.line], spec.line) if spec.line else [None]
    fig, panels = _facet_axes(spec, df, rotated_ticks=True, sharey=True)
    width = 0.8 / len(bars)
    where = np.arange(len(categories), dtype="float64")
    top = float(df["_y"].max())
    threshold = MIN_LABELLED_SHARE * top
    for ax, _, _, part in panels:
        heights = {}
        for i, bar in enumerate(bars):
            rows = part if bar is None else part[part[spec.line] == bar]
            points = _group(rows, [spec.x], "_y", spec.agg).set_index(spec.x)["_y"]
            heights[bar] = points.reindex(categories).to_numpy("float64")
            ax.bar(where + (i - (len(bars) - 1) / 2) * width, heights[bar], width * 0.95,
                   color=_color(bar), label=str(bar), zorder=2,
                   hatch="//" if _style(bar)["ls"] == "--" else None, edgecolor="white", lw=0)
        for j, category in enumerate(categories):
            column = [h[j] for h in heights.values()]
            if not np.isfinite(column).any():
                ax.text(where[j], 0.02 * top, "n/a", ha="center", va="bottom",
                        fontsize=LABEL_FONTSIZE, color="0.45")
            elif spec.compare and all(v in heights for v in spec.compare):
                base, head = (heights[v][j] for v in spec.compare)
                change = _percent_change(head / base) if base > 0 else 0
                if abs(change) >= MIN_LABELLED_CHANGE and abs(head - base) >= threshold:
                    ax.text(where[j], np.nanmax(column) + 0.02 * top, _format_change(change),
                            ha="center", va="bottom", fontsize=LABEL_FONTSIZE,
                            color=_color(spec.compare[1]))
        ax.set_xticks(where, [str(c) for c in categories], rotation=30, ha="right",
                      rotation_mode="anchor", fontsize=LABEL_FONTSIZE)
        ax.set_xlim(-0.6, len(categories) - 0.4)
        ax.set_ylim(0, 1.15 * top)
        ax.grid(True, axis="y", alpha=0.3)
        _label(ax, spec, grid="y")
    note = _commit_note(df)
    if spec.compare:
        note += (f"; labels: {spec.compare[1]} vs {spec.compare[0]} change where ≥ "
                 f"{MIN_LABELLED_CHANGE}% and ≥ {threshold:.2g} {spec.unit}")
    _finish(fig, spec, split_value, panels, note=note)
    return fig


def _render_placeholder(spec, df, regressions, split_value) -> Figure:
    base_variant, head_variant = spec.compare
    newest = _newest_commit(df)
    pairs = _pair_variants(newest, base_variant, head_variant)
    _require_varying(pairs, spec.x)
    fig, panels = _facet_axes(spec, pairs)
    # Other variants measured at the same points (e.g. fast), drawn without change labels.
    extras = {}
    for variant in spec.also:
        try:
            extras[variant] = _pair_variants(newest, base_variant, variant)
        except MissingData:
            continue
    low, high = PLACEHOLDER_DROP_BAND
    for ax, _, facet_value, part in panels:
        base = _group(part.assign(_y=part["base_value"] * spec.scale), [spec.x], "_y", "geomean")
        head = _group(part.assign(_y=part["head_value"] * spec.scale), [spec.x], "_y", "geomean")
        ratio = _group(part, [spec.x], "ratio", "geomean")
        x = base[spec.x].astype("float64")
        band_lo, band_hi = base["_y"] * (1 - high), base["_y"] * (1 - low)
        ax.fill_between(x, band_lo, band_hi, color="0.85", lw=0, zorder=1,
                        label=f"PR 50939: {low:.0%}–{high:.0%} drop")
        _plot_line(ax, x, head["_y"], head_variant)
        _plot_line(ax, x, base["_y"], base_variant)
        drawn = [band_lo, band_hi, head["_y"], base["_y"]]
        for variant, other in extras.items():
            if spec.facet in other:
                other = other[other[spec.facet] == facet_value]
            if other.empty:
                continue
            line = _group(other.assign(_y=other["head_value"] * spec.scale), [spec.x], "_y", "geomean")
            _plot_line(ax, line[spec.x].astype("float64"), line["_y"], variant)
            drawn.append(line["_y"])
        # The change labels get a strip of their own below everything drawn, so they cannot
        # collide with a line or the band; the outermost ones are aligned inwards so they stay
        # inside the axes.
        ymin = float(np.nanmin([d.min() for d in drawn]))
        ymax = float(np.nanmax([d.max() for d in drawn]))
        span = ymax - ymin or abs(ymax) or 1.0
        ax.set_ylim(ymin - 0.22 * span, ymax + 0.06 * span)
        ax.axhline(ymin - 0.04 * span, color="0.7", lw=0.6, zorder=1)
        xmin, xmax = float(x.min()), float(x.max())
        margin = 0.04 * (xmax - xmin)
        ax.set_xlim(xmin - margin, xmax + margin)
        for xi, r in zip(x, ratio["ratio"]):
            align = "left" if xi == xmin else "right" if xi == xmax else "center"
            ax.text(xi, ymin - 0.13 * span, _format_change(_percent_change(r)), ha=align,
                    va="center", fontsize=LABEL_FONTSIZE, color=_color(head_variant))
        _label(ax, spec)
    note = (_commit_note(newest) + f"; labels: {head_variant} vs {base_variant} latency change")
    _finish(fig, spec, split_value, panels, note=note)
    return fig


def _render_heatmap(spec, df, regressions, split_value) -> Figure:
    base_variant, head_variant = spec.compare
    newest = _newest_commit(df)
    pairs = _pair_variants(newest, base_variant, head_variant).dropna(subset=[spec.x, spec.line])
    if pairs[spec.x].nunique() < 2 or pairs[spec.line].nunique() < 2:
        raise MissingData(f"{base_variant} vs {head_variant} not measured over two or more "
                          f"values of both {spec.x} and {spec.line}")
    speedup = _group(pairs.assign(_s=1.0 / pairs["ratio"]), [spec.line, spec.x], "_s", "geomean")
    grid = speedup.pivot(index=spec.line, columns=spec.x, values="_s")
    values = grid.to_numpy("float64")
    width = max(1.1 * grid.shape[1] + 3.2, 6.5)
    fig = Figure(figsize=(width, 0.5 * grid.shape[0] + 2.9), dpi=DPI)
    ax = fig.subplots()
    # Colour by log(speedup) on a norm symmetric around 0 (speedup 1): 0.8× and 1.25× are
    # equally saturated, and the colour bar is ticked in speedups.
    reach = _ratio_reach(values)
    norm = Normalize(vmin=-reach, vmax=reach)
    with np.errstate(divide="ignore", invalid="ignore"):
        image = ax.imshow(np.log(values), cmap="RdBu", norm=norm, aspect="auto", origin="lower")
    _annotate_cells(ax, values, norm)
    ax.set_xticks(range(grid.shape[1]), [f"{v:g}" for v in grid.columns])
    ax.set_yticks(range(grid.shape[0]), [f"{v:g}" for v in grid.index])
    ax.set_xlabel(_axis_label(spec.x))
    ax.set_ylabel(_axis_label(spec.line))
    bar = fig.colorbar(image, ax=ax, fraction=0.08, pad=0.03)
    ticks = _ratio_ticks(math.exp(reach))
    bar.set_ticks(np.log(ticks), labels=[f"{round(t, 2):g}×" for t in ticks],
                  fontsize=LABEL_FONTSIZE)
    bar.ax.minorticks_off()
    bar.set_label(f"{spec.quantity} ({spec.unit}, log colour scale)")
    where = ", ".join(p for p in (split_value, _commit_note(newest)) if p)
    fig.suptitle(f"{spec.title}\n{where}\nspeedup = {base_variant} latency / {head_variant} "
                 f"latency (>1: {head_variant} faster)", fontsize=9)
    fig.tight_layout()
    return fig


_RENDERERS: dict[str, Callable[..., Figure]] = {
    "history": _render_history,
    "line": _render_line,
    "bars": _render_bars,
    "placeholder": _render_placeholder,
    "heatmap": _render_heatmap,
}


# ---------------------------------------------------------------------------------------------
# Figure helpers
# ---------------------------------------------------------------------------------------------


def _facet_axes(
    spec: FigureSpec, df: pd.DataFrame, *, rotated_ticks: bool = False, sharey: bool = False
) -> tuple[Figure, list[tuple]]:
    """The figure and its panels: [(ax, row value, facet value, rows), ...].

    With ``facet_row`` the panels form a grid (rows: facet_row, columns: facet); otherwise the
    facets wrap after :data:`MAX_FACETS_PER_ROW`.
    """
    columns = _groups(df, spec.facet)
    if spec.facet_row is not None and spec.facet_row in df:
        row_values = [v for v, _ in _groups(df, spec.facet_row)]
        cells = [(r, c, part[part[spec.facet_row] == r])
                 for r in row_values for c, part in columns]
        rows, cols = len(row_values), len(columns)
    else:
        cells = [(None, c, part) for c, part in columns]
        cols = min(len(cells), MAX_FACETS_PER_ROW)
        rows = math.ceil(len(cells) / cols)
    ticks = ROTATED_TICKS_ROOM if rotated_ticks else 0.0
    width, height = PANEL_SIZE[0] * cols, (PANEL_SIZE[1] + ticks) * rows + MARGINS["legend"]
    fig = Figure(figsize=(width, height), dpi=DPI)
    fig.subplots_adjust(
        left=MARGINS["left"] / width, right=1 - MARGINS["right"] / width,
        top=1 - MARGINS["top"] / height,
        bottom=(MARGINS["bottom"] + ticks + MARGINS["legend"]) / height,
        wspace=MARGINS["wspace"],
        hspace=MARGINS["hspace"] + ticks / (PANEL_SIZE[1] - 1.0),  # relative to axes height
    )
    axes = fig.subplots(rows, cols, squeeze=False, sharey=sharey).ravel().tolist()
    for ax in axes[len(cells):]:
        ax.set_visible(False)
    panels = []
    for ax, (row_value, facet_value, part) in zip(axes, cells):
        title = " · ".join(f"{c} = {v:g}" if isinstance(v, float) else f"{c} = {v}"
                           for c, v in ((spec.facet, facet_value), (spec.facet_row, row_value))
                           if c is not None and v is not None)
        if title:
            ax.set_title(title, fontsize=9)
        if sharey:
            ax.yaxis.set_tick_params(labelleft=True)
        panels.append((ax, row_value, facet_value, part))
    return fig, panels


def _label(ax, spec: FigureSpec, grid: str = "both") -> None:
    ax.set_xlabel(_axis_label(spec.x))
    ax.set_ylabel(_y_label(spec))
    ax.grid(True, axis=grid, alpha=0.3)


def _y_label(spec: FigureSpec) -> str:
    quantity = spec.quantity or (spec.y if spec.y != "value" else "")
    return f"{quantity} ({spec.unit})" if quantity else spec.unit


def _finish(fig: Figure, spec: FigureSpec, split_value: str, panels: list, note: str = "") -> None:
    """Title (wrapped to the figure's width, with the note below it) and one legend for the
    figure, below the panels, so no panel's data is hidden under it. The figure grows by the
    room extra title or legend lines need; the panels keep their size."""
    width = fig.get_figwidth()
    chars = int(width * 72 / (0.6 * 10))  # a 10 pt character is about 6 pt wide
    lines = textwrap.wrap(spec.title + (f" — {split_value}" if split_value else ""), chars)
    lines += textwrap.wrap(note.strip("; "), chars)
    legend: dict[str, object] = {}
    for ax, *_ in panels:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    rank = {v: i for i, v in enumerate(dict(CATEGORY_ORDER)["subject"])}
    labels = sorted(legend, key=lambda k: (k not in rank, rank.get(k, 0)))  # stable otherwise
    entry = max((0.45 + 0.075 * len(k) for k in labels), default=1.0)  # inches at 9 pt
    ncol = max(1, min(len(labels), 6, int((width - 0.2) / entry)))
    legend_rows = math.ceil(len(labels) / ncol) if labels else 1
    _grow(fig, top=LINE_HEIGHT * max(0, len(lines) - 2), bottom=LINE_HEIGHT * (legend_rows - 1))
    fig.suptitle("\n".join(lines), fontsize=10, y=1 - TITLE_TOP / fig.get_figheight(),
                 va="top")
    if labels:
        fig.legend([legend[k] for k in labels], labels, loc="lower center", ncol=ncol,
                   fontsize=LEGEND_FONTSIZE, frameon=False)


def _grow(fig: Figure, top: float = 0.0, bottom: float = 0.0) -> None:
    """Add ``top`` and ``bottom`` inches to a figure laid out by subplots_adjust, keeping the
    panels' size in inches."""
    if not top and not bottom:
        return
    height = fig.get_figheight()
    params = fig.subplotpars
    top_in, bottom_in = (1 - params.top) * height + top, params.bottom * height + bottom
    height += top + bottom
    fig.set_figheight(height)
    fig.subplots_adjust(top=1 - top_in / height, bottom=bottom_in / height)


def _plot_line(ax, x, y, variant: object) -> None:
    ax.plot(x, y, lw=1.2, color=_color(variant), label=str(variant), **_style(variant))


def _axis_label(column: str) -> str:
    return dict(AXIS_LABELS).get(column, column)


def _color(value: object) -> str:
    known = dict(VARIANT_COLORS)
    if str(value) in known:
        return known[str(value)]
    return f"C{5 + sum(map(ord, str(value))) % 5}"  # stable for a given unknown name


def _style(value: object) -> dict:
    return {**DEFAULT_STYLE, **dict(VARIANT_STYLES).get(str(value), {})}


def _percent_change(ratio: float) -> int:
    """head / base as a whole-percent change, rounded first so no "−0%" is printed."""
    return int(round(100 * (float(ratio) - 1)))


def _format_change(percent: int) -> str:
    return "0%" if percent == 0 else f"{percent:+d}%".replace("-", "−")


def _scale_axes(ax, spec: FigureSpec, x: pd.Series) -> None:
    """Log axes where the spec asks, ticked in plain numbers; x ticked at the measured values
    on a log axis (thinned so labels do not overlap) or when they are a few integers."""
    if "y" in spec.log_axes:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    values = np.sort(pd.to_numeric(x, errors="coerce").dropna().unique())
    if not len(values):
        return
    if "x" in spec.log_axes and values.min() > 0:
        ax.set_xscale("log", base=2)
        ax.set_xticks(values, minor=True)
        ax.set_xticks(_thinned(values), [_short_number(v) for v in _thinned(values)])
        ax.tick_params(axis="x", which="minor", labelbottom=False)
    elif len(values) <= 8 and np.all(values == np.round(values)):
        ax.set_xticks(values, [f"{v:g}" for v in values])


def _thinned(values: np.ndarray, min_gap: float = 0.11) -> list[float]:
    """Values kept as labelled ticks: at least ``min_gap`` of the log span apart, ends kept."""
    logs = np.log2(values)
    span = logs[-1] - logs[0] or 1.0
    kept = [0]
    for i in range(1, len(values)):
        if (logs[i] - logs[kept[-1]]) / span >= min_gap:
            kept.append(i)
    if kept[-1] != len(values) - 1:  # keep the last value rather than its close neighbour
        if len(kept) > 1:
            kept[-1] = len(values) - 1
        else:
            kept.append(len(values) - 1)
    return [float(values[i]) for i in kept]


def _short_number(value: float) -> str:
    return f"{value / 1000:.0f}k" if value >= 10_000 else f"{value:g}"


def _commit_ticks(ax, order: pd.DataFrame, max_ticks: int = 12) -> None:
    step = max(1, math.ceil(len(order) / max_ticks))
    shown = order.iloc[::step]
    ax.set_xticks(shown["position"].astype("float64"),
                  [c[:8] for c in shown["commit"]], rotation=45, ha="right", fontsize=7)


def _commit_note(df: pd.DataFrame) -> str:
    commits = df["commit"].dropna().unique() if "commit" in df else []
    return f"commit {str(commits[0])[:8]}" if len(commits) == 1 else ""


def _ratio_reach(values: np.ndarray) -> float:
    """Half-range of the heatmap colours in log(speedup): the largest |log| measured, but at
    least log(HEATMAP_MIN_RANGE), so tiny differences stay pale."""
    finite = values[np.isfinite(values) & (values > 0)]
    largest = float(np.abs(np.log(finite)).max()) if finite.size else 0.0
    return max(largest, math.log(HEATMAP_MIN_RANGE))


def _ratio_ticks(vmax: float, per_side: int = 3) -> list[float]:
    """Round speedups for the colour bar: 1, up to ``per_side`` above it spaced in log, and
    their reciprocals below it (the colours are symmetric in log, so they mark equal steps)."""
    candidates = (1.02, 1.05, 1.1, 1.2, 1.5, 2, 3, 5, 10, 20, 50, 100)
    reach = math.log(vmax)
    ups: list[float] = []
    for c in reversed(candidates):
        if c > vmax * 1.0001 or math.log(c) < 0.3 * reach or len(ups) == per_side:
            continue
        if not ups or math.log(ups[-1]) - math.log(c) >= 0.25 * reach:
            ups.append(c)
    return sorted({*(1 / u for u in ups), 1.0, *ups})


def _annotate_cells(ax, values: np.ndarray, norm: Normalize) -> None:
    for (row, col), value in np.ndenumerate(values):
        if np.isfinite(value):
            # White text on the saturated ends of the colour map, black in the pale middle.
            color = "white" if abs(float(norm(math.log(value))) - 0.5) > 0.3 else "black"
            ax.text(col, row, f"{value:.2f}×", ha="center", va="center", fontsize=LABEL_FONTSIZE,
                    color=color)


def _steps_for(
    regressions: pd.DataFrame | None, benchmark: str, spec: FigureSpec, position: dict
) -> dict[tuple[object, object], dict[float, int]]:
    """(facet value, line value) -> {x position of commit_after: number of points that stepped}."""
    if regressions is None or regressions.empty or not benchmark:
        return {}
    rows = regressions[(regressions["benchmark"] == benchmark)
                       & regressions["commit_after"].isin(list(position))]
    steps: dict[tuple[object, object], dict[float, int]] = {}
    for row in rows.itertuples(index=False):
        key = (getattr(row, spec.facet, None) if spec.facet else None,
               getattr(row, spec.line, None) if spec.line else None)
        x = float(position[row.commit_after])
        steps.setdefault(key, {}).setdefault(x, 0)
        steps[key][x] += 1
    return steps


def _mark_steps(ax, points: pd.DataFrame, steps: dict[float, int]) -> None:
    """Red triangles where asv publish detected a step, with the number of stepped points."""
    for x, count in steps.items():
        y = points.loc[points["_x"] == x, "_y"]
        if y.empty:
            continue
        ax.plot([x], [y.iloc[0]], marker="v", ms=7, color="red", ls="none", zorder=4,
                label="asv step" if "asv step" not in ax.get_legend_handles_labels()[1] else None)
        ax.annotate(str(count), (x, y.iloc[0]), textcoords="offset points", xytext=(4, 4),
                    fontsize=7, color="red")


# ---------------------------------------------------------------------------------------------
# Rendering everything
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Rendered:
    spec: FigureSpec
    files: tuple[tuple[str, str], ...]  # (path relative to out_dir, alt text)
    note: str  # why nothing was drawn, when files is empty


def _render_all(
    figures: Sequence[FigureSpec], df: pd.DataFrame, regressions: pd.DataFrame, fig_dir: Path
) -> list[_Rendered]:
    rendered = []
    for spec in figures:
        try:
            drawn, skipped = _render_spec(spec, df, regressions)
        except MissingData as exc:
            rendered.append(_Rendered(spec, (), str(exc)))
            continue
        files = []
        for stem, split_value, fig in drawn:
            fig.savefig(fig_dir / f"{stem}.png", dpi=DPI)
            alt = spec.title + (f" — {split_value}" if split_value else "")
            files.append((f"figures/{stem}.png", alt))
        rendered.append(_Rendered(spec, tuple(files), "" if files else _skip_reason(skipped)))
    return rendered


def _clear_figures(fig_dir: Path) -> None:
    fig_dir.mkdir(parents=True, exist_ok=True)
    for old in fig_dir.glob("*.png"):
        old.unlink()


def _regressions_frame(regressions, notes: list[str]) -> pd.DataFrame:
    """Accept a frame, an asv html dir or its regressions.json; None -> empty frame."""
    if regressions is None:
        notes.append("No asv regressions given: history plots carry no step markers.")
        return pd.DataFrame(columns=["benchmark", "machine", "commit_after"])
    if isinstance(regressions, pd.DataFrame):
        return regressions
    path = Path(regressions)
    frame, problems = _results.load_asv_regressions(path.parent if path.is_file() else path)
    notes.extend(f"{p.path.name}: {p.reason}" for p in problems)
    return frame


def _status_notes(data: pd.DataFrame) -> list[str]:
    """Benchmarks with no successful point (left out of every figure), and failed points."""
    if data.empty:
        return []
    counts = data.groupby(["benchmark", "status"]).size().unstack(fill_value=0)
    notes = []
    empty = counts.index[counts.get("ok", 0) == 0] if "ok" in counts else counts.index
    if len(empty):
        listed = ", ".join(
            f"{b} ({', '.join(f'{n} {s}' for s, n in counts.loc[b].items() if n)})" for b in empty)
        notes.append(f"Not drawn, every point skipped or failed: {listed}.")
    if "failed" in counts:
        partial = [b for b in counts.index[counts["failed"] > 0] if b not in set(empty)]
        if partial:
            listed = ", ".join(f"{b} ({counts.loc[b, 'failed']} of {counts.loc[b].sum()})"
                               for b in partial)
            notes.append(f"Points that failed (left out of the figures): {listed}.")
    return notes


def _asv_site_exists(out_dir: Path, link: str) -> bool:
    if re.match(r"https?://", link):
        return True
    return (out_dir / link).is_file()


def _default_machine(df: pd.DataFrame) -> str | None:
    if df.empty:
        return None
    return str(df.sort_values("date", kind="stable")["machine"].iloc[-1])


def _sanitize(name: str) -> str:
    """asv's graph paths sanitize machine names; match either spelling."""
    return re.sub(r"[<>:\"/\\^|?*\x00-\x1f]", "_", name)


def _slug(value: object) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", str(value)).strip("-") or "none"


# ---------------------------------------------------------------------------------------------
# HTML
# ---------------------------------------------------------------------------------------------

_CSS = """
body { font-family: system-ui, sans-serif; margin: 1.5em auto; max-width: 1400px; color: #222; }
h1 { font-size: 1.4em; } h2 { border-bottom: 1px solid #ccc; padding-bottom: .2em; }
img { max-width: 100%; border: 1px solid #eee; margin: .3em 0; }
table { border-collapse: collapse; font-size: .85em; margin: .5em 0; }
td, th { border: 1px solid #ddd; padding: .2em .5em; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
.note { color: #8a6d3b; background: #fcf8e3; padding: .3em .6em; margin: .3em 0; }
nav a { margin-right: 1em; }
"""


def _page(data, all_data, machine, rendered, regressions, asv_link, notes) -> str:
    body = [
        f"<h1>specsample benchmarks — {html.escape(str(machine))}</h1>",
        _header(data, all_data, machine, asv_link),
        _nav(),
        *(_note(n) for n in notes),
    ]
    for section_id, heading in SECTIONS:
        body.append(_figure_section(section_id, heading, rendered))
    units = dict(zip(data["benchmark"], data["unit"])) if not data.empty else {}
    body.append(_regressions_section(regressions, units))
    body.append(_environment_section(data))
    return (
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<title>specsample benchmarks</title>"
        f"<style>{_CSS}</style></head><body>\n" + "\n".join(body) + "\n</body></html>\n"
    )


def _header(data, all_data, machine, asv_link) -> str:
    order = _results.commit_order(data) if not data.empty else pd.DataFrame()
    others = sorted(set(all_data["machine"].dropna()) - {machine}) if not all_data.empty else []
    parts = [f"{len(order)} commits"]
    if len(order):
        parts.append(f"{order['date'].min():%Y-%m-%d} → {order['date'].max():%Y-%m-%d}")
        parts.append(f"newest <code>{html.escape(str(order['commit'].iloc[-1])[:8])}</code>")
    if others:
        parts.append("other machines: " + ", ".join(html.escape(m) for m in others))
    if asv_link:
        parts.append(f'<a href="{html.escape(asv_link)}">asv site</a>')
    else:
        parts.append("asv site: built by <code>specsample nightly</code> (asv publish) into "
                     "<code>html/</code>, which is not committed")
    return "<p>" + " · ".join(parts) + "</p>"


def _nav() -> str:
    links = [*SECTIONS, ("regressions", "Regressions"), ("environment", "Environment")]
    return "<nav>" + "".join(f'<a href="#{i}">{html.escape(t)}</a>' for i, t in links) + "</nav>"


def _note(text: str) -> str:
    return f'<p class="note">{html.escape(text)}</p>'


def _figure_section(section_id: str, heading: str, rendered: list[_Rendered]) -> str:
    parts = [f'<section id="{section_id}"><h2>{html.escape(heading)}</h2>']
    for item in (r for r in rendered if r.spec.section == section_id):
        if not item.files:
            parts.append(_note(f"Skipped “{item.spec.title}”: {item.note}."))
        for path, alt in item.files:
            parts.append(f'<img src="{html.escape(path)}" alt="{html.escape(alt)}"'
                         f' loading="lazy">')
    text = dict(SECTION_TEXT).get(section_id)
    if text:
        low, high = PLACEHOLDER_DROP_BAND
        text = text.format(low=low, high=high, min_change=MIN_LABELLED_CHANGE,
                           min_share=MIN_LABELLED_SHARE)
        parts.append(f"<p>{html.escape(text)}</p>")
    parts.append("</section>")
    return "\n".join(parts)


def _regressions_section(regressions: pd.DataFrame, units: dict) -> str:
    parts = ['<section id="regressions"><h2>Regressions detected by asv publish</h2>']
    if regressions is None or regressions.empty or "change" not in regressions:
        parts.append(_note("No steps detected, or no regressions.json given."))
        return "\n".join(parts + ["</section>"])
    rows = regressions.sort_values("change", ascending=False)
    parts.append(f"<p>{len(rows)} steps. asv treats every metric as lower-is-better; metrics "
                 f"where higher is better ({', '.join(HIGHER_IS_BETTER)}) are marked.</p>")
    parts.append(_regressions_table(rows.head(MAX_TABLE_ROWS), units))
    if len(rows) > MAX_TABLE_ROWS:
        parts.append(_note(f"{len(rows) - MAX_TABLE_ROWS} more steps not shown."))
    return "\n".join(parts + ["</section>"])


def _regressions_table(rows: pd.DataFrame, units: dict) -> str:
    head = ["benchmark", "point", "commits", "before", "after", "change", "note"]
    lines = ["<table><tr>" + "".join(f"<th>{h}</th>" for h in head) + "</tr>"]
    for row in rows.itertuples(index=False):
        commits = (f"{row.commit_before[:8]}…" if isinstance(row.commit_before, str) else "") + \
            str(row.commit_after)[:8]
        note = "higher is better: an improvement" if row.metric in HIGHER_IS_BETTER else ""
        unit = units.get(row.benchmark)
        cells = [
            f"<td><code>{html.escape(str(row.benchmark))}</code></td>",
            f"<td>{html.escape(_point(row))}</td>",
            f"<td><code>{html.escape(commits)}</code></td>",
            f'<td class="num">{html.escape(format_value(row.value_before, unit))}</td>',
            f'<td class="num">{html.escape(format_value(row.value_after, unit))}</td>',
            f'<td class="num">{100 * row.change:+.1f}%</td>',
            f"<td>{note}</td>",
        ]
        lines.append("<tr>" + "".join(cells) + "</tr>")
    return "\n".join(lines + ["</table>"])


def _point(row) -> str:
    values = [getattr(row, c, None) for c in _results.PARAM_COLUMNS]
    return " ".join(f"{c}={v}" for c, v in zip(_results.PARAM_COLUMNS, values)
                    if v is not None and not (isinstance(v, float) and math.isnan(v))
                    and v is not pd.NA)


def _environment_section(data: pd.DataFrame) -> str:
    parts = ['<section id="environment"><h2>Machine and environment</h2>']
    columns = ["commit", "date", "env", *_results.ENV_COLUMNS]
    if data.empty:
        parts.append(_note("No results."))
        return "\n".join(parts + ["</section>"])
    runs = _environment_changes(data[columns])
    if data[list(_results.ENV_COLUMNS)].isna().all().all():
        parts.append(_note("No <sha8>.gpuinfo recorded for these results."))
    parts.append("<p>Commits where the environment changed, and the newest.</p>")
    lines = ["<table><tr>" + "".join(f"<th>{c}</th>" for c in columns) + "</tr>"]
    for row in runs.itertuples(index=False):
        cells = [str(row.commit)[:8], f"{row.date:%Y-%m-%d %H:%M}",
                 *(str(getattr(row, c)) if isinstance(getattr(row, c), str) else "—"
                   for c in columns[2:])]
        lines.append("<tr>" + "".join(f"<td>{html.escape(c)}</td>" for c in cells) + "</tr>")
    parts.append("\n".join(lines + ["</table>"]))
    return "\n".join(parts + ["</section>"])


def _environment_changes(env: pd.DataFrame) -> pd.DataFrame:
    """One row per commit, kept where any environment column differs from the previous one."""
    runs = env.drop_duplicates("commit").sort_values("date", kind="stable")
    signature = runs.drop(columns=["commit", "date"]).fillna("").agg("|".join, axis=1)
    changed = signature.ne(signature.shift())
    changed.iloc[-1] = True
    return runs[changed.to_numpy()]
