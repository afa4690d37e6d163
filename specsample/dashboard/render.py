"""Figures: one matplotlib renderer per :class:`~.specs.FigureSpec` kind, and the PNGs.

Matplotlib is used through ``matplotlib.figure.Figure`` (Agg rendering) rather than pyplot, so
importing this module changes no global backend state. Every renderer takes the spec, the rows
:func:`.select.select` chose for one PNG, the :class:`Context` (the change points and the
release comparison, computed once per build) and the split value, and returns a Figure or
raises :class:`~.select.MissingData`.
"""

from __future__ import annotations

import io
import math
import re
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
from matplotlib.transforms import blended_transform_factory
from PIL import Image

from ..track.changepoints import release_order
from ..track.results import commit_order
from . import select as sel
from .select import MissingData
from .specs import (
    AXIS_LABELS,
    CATEGORY_ORDER,
    CHANGE_SPAN_COLOR,
    DEFAULT_STYLE,
    DPI,
    HEATMAP_MIN_RANGE,
    IMPROVEMENT_COLOR,
    LABEL_FONTSIZE,
    LEGEND_FONTSIZE,
    LINE_HEIGHT,
    LINE_LABELS,
    MARGINS,
    MAX_FACETS_PER_ROW,
    MIN_HALF_RANGE,
    MIN_LABELLED_CHANGE,
    MIN_LABELLED_SHARE,
    PANEL_SIZE,
    PLACEHOLDER_CHANGE,
    REGRESSION_COLOR,
    ROTATED_TICKS_ROOM,
    SEQUENTIAL_CMAP,
    SUBJECT_COLORS,
    SUBJECT_STYLES,
    TITLE_TOP,
    FigureSpec,
)

CHANGE_MARKERS = {"regression": ("^", REGRESSION_COLOR), "improvement": ("v", IMPROVEMENT_COLOR)}
OTHER_STREAM = "same semantics, other stream"
VIOLATES = "violates placeholder semantics"


def _empty() -> pd.DataFrame:
    return pd.DataFrame()


@dataclass(frozen=True)
class Context:
    """What the renderers need beyond their rows, computed once per build.

    ``changes``: :func:`specsample.track.changepoints.detect` over commits;
    ``release_changes``: the same over releases; ``placeholder_change``:
    :func:`.select.placeholder_change` (the latency change between the release before PR
    #50939 and the release with it).
    """

    changes: pd.DataFrame = field(default_factory=_empty)
    release_changes: pd.DataFrame = field(default_factory=_empty)
    placeholder_change: pd.DataFrame = field(default_factory=_empty)


@dataclass(frozen=True)
class Rendered:
    spec: FigureSpec
    files: tuple[tuple[str, str], ...]  # (path relative to the site, alt text)
    note: str  # why nothing was drawn, when files is empty


# ---------------------------------------------------------------------------------------------
# Public API
# ---------------------------------------------------------------------------------------------


def render_figure(spec: FigureSpec, df: pd.DataFrame, context: Context | None = None) -> list[tuple[str, Figure]]:
    """Render one spec: a list of (file stem, Figure), one per ``split`` value.

    Raises :class:`MissingData` when no rows match the spec, a needed column is absent, or no
    ``split`` value could be drawn (the message gives each reason once, with its benchmarks).
    """
    drawn, skipped = _render_spec(spec, df, context or Context())
    if not drawn:
        raise MissingData(skip_reason(skipped))
    return [(stem, fig) for stem, _, fig in drawn]


def _save_png(fig: Figure, path: Path) -> None:
    """``fig`` as a PNG of at most 256 colours (Pillow's median cut), about a third of
    matplotlib's RGBA file: lines, markers and bands have few colours, and the committed site
    must stay under 3 MiB with a growing history."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI)
    buf.seek(0)
    with Image.open(buf) as image:
        image.convert("RGB").quantize(colors=256).save(path, optimize=True)


def render_all(
    figures: Sequence[FigureSpec],
    frames: dict[str, pd.DataFrame],
    context: Context,
    fig_dir: Path,
    pages: dict[str, str],
) -> list[Rendered]:
    """Render every spec from the frame of its page (``frames[pages[spec.section]]``) into
    ``fig_dir``; a spec without data becomes a :class:`Rendered` with a note."""
    fig_dir.mkdir(parents=True, exist_ok=True)
    for old in fig_dir.glob("*.png"):
        old.unlink()
    rendered = []
    for spec in figures:
        try:
            drawn, skipped = _render_spec(spec, frames[pages[spec.section]], context)
        except MissingData as exc:
            rendered.append(Rendered(spec, (), str(exc)))
            continue
        files = []
        for stem, split_value, fig in drawn:
            _save_png(fig, fig_dir / f"{stem}.png")
            alt = spec.title + (f" — {split_value}" if split_value else "")
            files.append((f"{fig_dir.name}/{stem}.png", alt))
        rendered.append(Rendered(spec, tuple(files), "" if files else skip_reason(skipped)))
    return rendered


def skip_reason(skipped: dict[str, list[str]]) -> str:
    """Each reason once, followed by the split values (benchmarks) it applies to."""
    if not skipped:
        return "no data"
    return "; ".join(f"{reason} ({_compact_names(values)})" for reason, values in skipped.items())


def percent_change(ratio: float) -> int:
    """head / base as a whole-percent change, rounded first so no "−0%" is printed."""
    return int(round(100 * (float(ratio) - 1)))


def format_change(percent: int) -> str:
    return "0%" if percent == 0 else f"{percent:+d}%".replace("-", "−")


# ---------------------------------------------------------------------------------------------
# Specs to figures
# ---------------------------------------------------------------------------------------------


def _render_spec(spec: FigureSpec, df: pd.DataFrame, context: Context):
    """([(file stem, split value, Figure)], {reason: [split values]}) for one spec."""
    selected = sel.select(df, spec)
    renderer = RENDERERS[spec.kind]
    if spec.split is None:
        return [(spec.name, "", renderer(spec, selected, context, ""))], {}
    drawn, skipped = [], {}
    for value, part in selected.groupby(spec.split, sort=True):
        try:
            fig = renderer(spec, part, context, str(value))
        except MissingData as exc:
            skipped.setdefault(str(exc), []).append(str(value))
            continue
        drawn.append((f"{spec.name}-{slug(value)}", str(value), fig))
    return drawn, skipped


def _compact_names(names: list[str]) -> str:
    """Benchmark names sharing module and method written once: ``mod.{A, B}.time_sample``."""
    parts = [n.split(".") for n in names]
    if len(names) > 1 and all(len(p) == 3 for p in parts) and len({(p[0], p[2]) for p in parts}) == 1:
        module, _, method = parts[0]
        return f"{module}.{{{', '.join(p[1] for p in parts)}}}.{method}"
    return ", ".join(names)


def slug(value: object) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]+", "-", str(value)).strip("-") or "none"


# ---------------------------------------------------------------------------------------------
# Renderers, one per kind
# ---------------------------------------------------------------------------------------------


def _render_history(spec, df, context, split_value) -> Figure:
    order = commit_order(df)
    position = dict(zip(order["commit"], order["position"]))
    if len(order) < 2:
        raise MissingData("fewer than two commits")
    df = df.assign(
        _x=df["commit"].map(position).astype("float64"), _y=df[spec.y] * spec.scale, **_quartile_ratios(spec, df)
    )
    marks = _change_marks(context.changes, split_value, spec, position)
    fig, panels = _facet_axes(spec, df, rotated_ticks=True)
    banded = False
    for ax, _, facet_value, part in panels:
        drawn = []
        for line_value, series in sel.groups(part, spec.line):
            points = sel.group(series, ["_x"], ["_y", "_lo", "_hi"], spec.agg)
            _plot_line(ax, points["_x"], points["_y"], line_value)
            banded |= _band(
                ax, points["_x"], points["_y"] * points["_lo"], points["_y"] * points["_hi"], _color(line_value)
            )
            _mark_changes(ax, points, marks.get((facet_value, None, line_value), {}))
            drawn.append(points["_y"])
        _commit_ticks(ax, order)
        _label(ax, spec)
        _keep_noise_small(ax, drawn)
    note = "band: samples' q25–q75" if banded else ("no quartiles stored: no band" if spec.bands else "")
    _finish(fig, spec, split_value, panels, note=note)
    return fig


def _render_line(spec, df, context, split_value) -> Figure:
    df = sel.newest_commit(df)
    df = df.assign(_y=df[spec.y] * spec.scale)
    sel.require_varying(df, spec.x)
    with_ci = spec.ci is not None and all(c in df for c in spec.ci)
    # A confidence band only where each plotted point is one measured point: the CI of a
    # geomean over several points is not the geomean of their CIs.
    single = with_ci and not df.duplicated([c for c in (spec.facet, spec.facet_row, spec.line, spec.x) if c]).any()
    fig, panels = _facet_axes(spec, df)
    for ax, _, _, part in panels:
        for line_value, series in sel.groups(part, spec.line):
            points = sel.group(series, [spec.x], "_y", spec.agg)
            x = points[spec.x].astype("float64")
            _plot_line(ax, x, points["_y"], line_value)
            if single:
                lo = series.set_index(spec.x)[spec.ci[0]].reindex(points[spec.x]) * spec.scale
                hi = series.set_index(spec.x)[spec.ci[1]].reindex(points[spec.x]) * spec.scale
                _band(ax, x, lo, hi, _color(line_value))
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


def _render_bars(spec, df, context, split_value) -> Figure:
    df = sel.newest_commit(df)
    df = df.assign(_y=df[spec.y] * spec.scale)
    categories = sel.ordered(df[spec.x], spec.x)
    bars = sel.ordered(df[spec.line], spec.line) if spec.line else [None]
    fig, panels = _facet_axes(spec, df, rotated_ticks=True, sharey=True)
    width = 0.8 / len(bars)
    where = np.arange(len(categories), dtype="float64")
    top = float(df["_y"].max())
    threshold = MIN_LABELLED_SHARE * top
    for ax, _, _, part in panels:
        heights = {}
        for i, bar in enumerate(bars):
            rows = part if bar is None else part[part[spec.line] == bar]
            points = sel.group(rows, [spec.x], "_y", spec.agg).set_index(spec.x)["_y"]
            heights[bar] = points.reindex(categories).to_numpy("float64")
            ax.bar(
                where + (i - (len(bars) - 1) / 2) * width,
                heights[bar],
                width * 0.95,
                color=_color(bar),
                label=str(bar),
                zorder=2,
                hatch="//" if _style(bar)["ls"] == "--" else None,
                edgecolor="white",
                lw=0,
            )
        for j, _category in enumerate(categories):
            column = [h[j] for h in heights.values()]
            if not np.isfinite(column).any():
                ax.text(where[j], 0.02 * top, "n/a", ha="center", va="bottom", fontsize=LABEL_FONTSIZE, color="0.45")
            elif spec.compare and all(v in heights for v in spec.compare):
                base, head = (heights[v][j] for v in spec.compare)
                change = percent_change(head / base) if base > 0 else 0
                if abs(change) >= MIN_LABELLED_CHANGE and abs(head - base) >= threshold:
                    ax.text(
                        where[j],
                        np.nanmax(column) + 0.02 * top,
                        format_change(change),
                        ha="center",
                        va="bottom",
                        fontsize=LABEL_FONTSIZE,
                        color=_color(spec.compare[1]),
                    )
        ax.set_xticks(
            where,
            [str(c) for c in categories],
            rotation=30,
            ha="right",
            rotation_mode="anchor",
            fontsize=LABEL_FONTSIZE,
        )
        ax.set_xlim(-0.6, len(categories) - 0.4)
        ax.set_ylim(0, 1.15 * top)
        ax.grid(True, axis="y", alpha=0.3)
        _label(ax, spec, grid="y")
    note = _commit_note(df)
    if spec.compare:
        note += (
            f"; labels: {spec.compare[1]} vs {spec.compare[0]} change where ≥ "
            f"{MIN_LABELLED_CHANGE}% and ≥ {threshold:.2g} {spec.unit}"
        )
    _finish(fig, spec, split_value, panels, note=note)
    return fig


def _render_placeholder(spec, df, context, split_value) -> Figure:
    base_subject, head_subject = spec.compare
    newest = sel.newest_commit(df)
    pairs = sel.pair_subjects(newest, base_subject, head_subject)
    sel.require_varying(pairs, spec.x)
    fig, panels = _facet_axes(spec, pairs)
    # Other subjects measured at the same points (e.g. fast), drawn without change labels.
    extras = {}
    for subject in spec.also:
        try:
            extras[subject] = sel.pair_subjects(newest, base_subject, subject)
        except MissingData:
            continue
    measured = context.placeholder_change
    release_label = None
    for ax, row_value, facet_value, part in panels:
        base = sel.group(part.assign(_y=part["base_value"] * spec.scale), [spec.x], "_y", "geomean")
        head = sel.group(part.assign(_y=part["head_value"] * spec.scale), [spec.x], "_y", "geomean")
        ratio = sel.group(part, [spec.x], "ratio", "geomean")
        x = base[spec.x].astype("float64")
        _plot_line(ax, x, head["_y"], head_subject)
        _plot_line(ax, x, base["_y"], base_subject)
        drawn = [head["_y"], base["_y"]]
        for subject, other in extras.items():
            for column, value in ((spec.facet, facet_value), (spec.facet_row, row_value)):
                if column and column in other:
                    other = other[other[column] == value]
            if other.empty:
                continue
            line = sel.group(other.assign(_y=other["head_value"] * spec.scale), [spec.x], "_y", "geomean")
            _plot_line(ax, line[spec.x].astype("float64"), line["_y"], subject)
            drawn.append(line["_y"])
        # Where vLLM's own releases were measured at these points: the change between the
        # release before PR #50939 and the release with it, applied to the replica's line.
        expected = _release_change_at(measured, part, x)
        if expected is not None:
            release_label = (
                f"{base_subject} × measured vLLM {measured['before'].iloc[0]}→{measured['after'].iloc[0]} change"
            )
            y = base["_y"].to_numpy() * expected
            ax.plot(x, y, color="0.35", ls=":", lw=1.4, marker="D", ms=3.5, zorder=4, label=release_label)
            drawn.append(pd.Series(y))
        # The change labels get a strip of their own below everything drawn, so they cannot
        # collide with a line; the outermost ones are aligned inwards so they stay inside.
        ymin = float(np.nanmin([np.nanmin(d) for d in drawn]))
        ymax = float(np.nanmax([np.nanmax(d) for d in drawn]))
        span = ymax - ymin or abs(ymax) or 1.0
        ax.set_ylim(ymin - 0.22 * span, ymax + 0.06 * span)
        ax.axhline(ymin - 0.04 * span, color="0.7", lw=0.6, zorder=1)
        xmin, xmax = float(x.min()), float(x.max())
        margin = 0.04 * (xmax - xmin)
        ax.set_xlim(xmin - margin, xmax + margin)
        for xi, r in zip(x, ratio["ratio"]):
            align = "left" if xi == xmin else "right" if xi == xmax else "center"
            ax.text(
                xi,
                ymin - 0.13 * span,
                format_change(percent_change(r)),
                ha=align,
                va="center",
                fontsize=LABEL_FONTSIZE,
                color=_color(head_subject),
            )
        _label(ax, spec)
    note = _commit_note(newest) + f"; labels: {head_subject} vs {base_subject} latency change"
    if release_label is None:
        note += "; no vLLM release pair measured at these points"
    _finish(fig, spec, split_value, panels, note=note)
    return fig


def _render_heatmap(spec, df, context, split_value) -> Figure:
    base_subject, head_subject = spec.compare
    newest = sel.newest_commit(df)
    pairs = sel.pair_subjects(newest, base_subject, head_subject).dropna(subset=[spec.x, spec.line])
    if pairs[spec.x].nunique() < 2 or pairs[spec.line].nunique() < 2:
        raise MissingData(
            f"{base_subject} vs {head_subject} not measured over two or more values of both {spec.x} and {spec.line}"
        )
    speedup = sel.group(pairs.assign(_s=1.0 / pairs["ratio"]), [spec.line, spec.x], "_s", "geomean")
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
    bar.set_ticks(np.log(ticks), labels=[f"{round(t, 2):g}×" for t in ticks], fontsize=LABEL_FONTSIZE)
    bar.ax.minorticks_off()
    bar.set_label(f"{spec.quantity} ({spec.unit}, log colour scale)")
    where = ", ".join(p for p in (split_value, _commit_note(newest)) if p)
    fig.suptitle(
        f"{spec.title}\n{where}\nspeedup = {base_subject} latency / {head_subject} latency (>1: {head_subject} faster)",
        fontsize=9,
    )
    fig.tight_layout()
    return fig


def _render_releases(spec, df, context, split_value) -> Figure:
    """y over vLLM releases: one line per ``spec.line`` value, faults and semantics marked,
    change points between releases marked, PR #50939's release span shaded."""
    rows = df[df["release"].notna()] if "release" in df else df.iloc[0:0]
    if rows.empty:
        raise MissingData("no vLLM release results")
    releases = release_order(rows["release"])
    if len(releases) < 2:
        raise MissingData("fewer than two vLLM releases")
    rank = {r: float(i) for i, r in enumerate(releases)}
    rows = rows.assign(_x=rows["release"].map(rank), _y=rows[spec.y] * spec.scale, **_quartile_ratios(spec, rows))
    ok = rows[rows["status"] == "ok"]
    if ok.empty:
        raise MissingData("no successful vLLM release results")
    line_values = sel.ordered(rows[spec.line].dropna(), spec.line) if spec.line else [None]
    colors = _sequential_colors(line_values)
    marks = _change_marks(context.release_changes, split_value, spec, rank)
    before, after = sel.placeholder_releases(rows)
    fig, panels = _facet_axes(spec, rows, rotated_ticks=True)
    kinds: set[str] = set()
    for ax, row_value, facet_value, part in panels:
        drawn = []
        for line_value in line_values:
            series = part if line_value is None else part[part[spec.line] == line_value]
            good = series[series["status"] == "ok"]
            if not good.empty:
                points = sel.group(good, ["_x"], ["_y", "_lo", "_hi"], "median")
                color = colors[line_value]
                ax.plot(
                    points["_x"], points["_y"], color=color, lw=1.2, zorder=2, label=_line_label(spec.line, line_value)
                )
                _band(ax, points["_x"], points["_y"] * points["_lo"], points["_y"] * points["_hi"], color)
                kinds |= _mark_semantics(ax, good, color)
                _mark_changes(ax, points, marks.get((facet_value, row_value, line_value), {}))
                drawn.append(points["_y"])
            kinds |= _mark_faults(ax, series)
        if before in rank and after in rank:
            ax.axvspan(rank[before], rank[after], color=CHANGE_SPAN_COLOR, lw=0, zorder=0)
            ax.text(
                (rank[before] + rank[after]) / 2,
                0.98,
                PLACEHOLDER_CHANGE,
                ha="center",
                va="top",
                fontsize=7,
                color="0.35",
                transform=ax.get_xaxis_transform(),
            )
        ax.set_xticks(list(rank.values()), releases, rotation=45, ha="right", fontsize=7)
        ax.set_xlim(-0.5, len(releases) - 0.5)
        _label(ax, spec)
        _keep_noise_small(ax, drawn)
    _marker_legend(panels[0][0], kinds)
    commits = rows["commit"].dropna().unique()
    note = f"measured at commit {str(commits[0])[:8]}" if len(commits) == 1 else ""
    _finish(fig, spec, split_value, panels, note=note, order_subjects=False)
    return fig


RENDERERS: dict[str, Callable[..., Figure]] = {
    "history": _render_history,
    "line": _render_line,
    "bars": _render_bars,
    "placeholder": _render_placeholder,
    "heatmap": _render_heatmap,
    "releases": _render_releases,
}


# ---------------------------------------------------------------------------------------------
# Marks: change points, semantics, faults, the measured release change
# ---------------------------------------------------------------------------------------------


def _change_marks(changes: pd.DataFrame, benchmark: str, spec: FigureSpec, position: dict) -> dict:
    """(facet value, row value, line value) -> {x: {direction: number of points that changed
    there}} for the changes of ``benchmark`` whose first commit (or release) at the new level,
    ``after``, is drawn."""
    if changes is None or changes.empty or not benchmark:
        return {}
    drawn = (changes["benchmark"] == benchmark) & changes["after"].isin(list(position)) & ~changes["shift"]
    rows = changes[drawn]
    marks: dict = {}
    for change in rows.to_dict("records"):
        ident = tuple(change.get(c) if c else None for c in (spec.facet, spec.facet_row, spec.line))
        counts = marks.setdefault(ident, {}).setdefault(float(position[change["after"]]), {})
        counts[change["direction"]] = counts.get(change["direction"], 0) + 1
    return marks


def _mark_changes(ax, points: pd.DataFrame, marks: dict) -> None:
    """▲ (regression) / ▼ (improvement) on the line where a change point was detected, with
    the number of points that changed there."""
    for x, counts in marks.items():
        y = points.loc[points["_x"] == x, "_y"]
        if y.empty:
            continue
        for direction, count in counts.items():
            marker, color = CHANGE_MARKERS[direction]
            ax.plot([x], [y.iloc[0]], marker=marker, ms=7, color=color, ls="none", zorder=5, label=direction)
            ax.annotate(
                str(count),
                (x, y.iloc[0]),
                textcoords="offset points",
                xytext=(5, 4 if direction == "regression" else -10),
                fontsize=7,
                color=color,
            )


def _mark_semantics(ax, rows: pd.DataFrame, color: str) -> set[str]:
    """Marker per point by semantics: filled (same draws or not checked), hollow (same
    semantics, other stream), a red ring around it (violates placeholder semantics)."""
    kinds = set()
    semantics = rows["semantics"].astype(object)
    other = rows[semantics == OTHER_STREAM]
    plain = rows[semantics != OTHER_STREAM]
    ax.plot(plain["_x"], plain["_y"], ls="none", marker="o", ms=3.5, color=color, zorder=3)
    if not other.empty:
        ax.plot(other["_x"], other["_y"], ls="none", marker="o", ms=5, mfc="white", color=color, zorder=3)
        kinds.add(OTHER_STREAM)
    bad = rows[semantics == VIOLATES]
    if not bad.empty:
        ax.plot(bad["_x"], bad["_y"], ls="none", marker="o", ms=11, mfc="none", mec=REGRESSION_COLOR, mew=1.6, zorder=4)
        kinds.add(VIOLATES)
    return kinds


def _mark_faults(ax, rows: pd.DataFrame) -> set[str]:
    """A red ✕ at the bottom of the panel where a release crashed or failed at the point."""
    bad = rows[rows["status"].isin(["crashed", "failed"])]
    if bad.empty:
        return set()
    where = blended_transform_factory(ax.transData, ax.transAxes)
    ax.plot(
        bad["_x"],
        np.full(len(bad), 0.04),
        ls="none",
        marker="x",
        ms=7,
        mew=1.8,
        color=REGRESSION_COLOR,
        transform=where,
        zorder=5,
        clip_on=False,
    )
    return {"crashed"}


def _marker_legend(ax, kinds: set[str]) -> None:
    """Proxy legend entries, on the first panel, for the marks that appear in the figure."""
    proxies = {
        OTHER_STREAM: dict(marker="o", mfc="white", color="0.3", ms=5),
        VIOLATES: dict(marker="o", mfc="none", mec=REGRESSION_COLOR, mew=1.6, ms=9),
        "crashed": dict(marker="x", color=REGRESSION_COLOR, mew=1.8, ms=7),
    }
    labels = {"crashed": "crashed / failed"}
    for kind in (k for k in proxies if k in kinds):
        ax.add_line(Line2D([], [], ls="none", label=labels.get(kind, kind), **proxies[kind]))


def _release_change_at(measured: pd.DataFrame, part: pd.DataFrame, x: pd.Series):
    """The release change (after / before latency) at each x of a placeholder panel, for the
    panel's mode, draft kind and placeholder patterns (geomean over patterns); None where the
    releases were not measured at every x."""
    if measured is None or measured.empty:
        return None
    rows = measured
    for column in ("mode", "draft", "placeholder_pattern"):
        values = set(part[column].dropna()) if column in part else set()
        if not values:
            return None
        rows = rows[rows[column].isin(values)]
    if rows.empty:
        return None
    ratio = sel.group(rows, ["placeholder_density"], "ratio", "geomean")
    ratio = ratio.set_index("placeholder_density")["ratio"].reindex(x.to_numpy())
    return None if ratio.isna().any() else ratio.to_numpy("float64")


# ---------------------------------------------------------------------------------------------
# Figure helpers
# ---------------------------------------------------------------------------------------------


def _quartile_ratios(spec: FigureSpec, df: pd.DataFrame) -> dict:
    """``_lo``/``_hi``: each row's quartiles as ratios to its value (NaN where not stored)."""
    if spec.bands and all(c in df for c in spec.bands):
        value = df[spec.y].astype("float64")
        return {"_lo": df[spec.bands[0]].astype("float64") / value, "_hi": df[spec.bands[1]].astype("float64") / value}
    return {"_lo": np.nan, "_hi": np.nan}


def _band(ax, x, lo, hi, color) -> bool:
    """A shaded band between lo and hi where both are finite; True when anything was drawn."""
    lo, hi = np.asarray(lo, dtype="float64"), np.asarray(hi, dtype="float64")
    finite = np.isfinite(lo) & np.isfinite(hi)
    if not finite.any():
        return False
    ax.fill_between(np.asarray(x, dtype="float64"), lo, hi, where=finite, color=color, alpha=0.22, lw=0, zorder=1)
    return True


def _keep_noise_small(ax, drawn: list) -> None:
    """The y axis spans at least ±MIN_HALF_RANGE of the median of what was drawn, so a change
    below the noise floor does not fill the panel; wider data keeps its own limits."""
    values = np.concatenate([np.asarray(d, dtype="float64") for d in drawn]) if drawn else []
    values = values[np.isfinite(values)] if len(values) else values
    if not len(values) or ax.get_yscale() != "linear":
        return
    median = float(np.median(values))
    low, high = ax.get_ylim()
    ax.set_ylim(min(low, median * (1 - MIN_HALF_RANGE)), max(high, median * (1 + MIN_HALF_RANGE)))


def _facet_axes(
    spec: FigureSpec, df: pd.DataFrame, *, rotated_ticks: bool = False, sharey: bool = False
) -> tuple[Figure, list[tuple]]:
    """The figure and its panels: [(ax, row value, facet value, rows), ...].

    With ``facet_row`` the panels form a grid (rows: facet_row, columns: facet); otherwise the
    facets wrap after :data:`MAX_FACETS_PER_ROW`.
    """
    columns = sel.groups(df, spec.facet)
    if spec.facet_row is not None and spec.facet_row in df:
        row_values = [v for v, _ in sel.groups(df, spec.facet_row)]
        cells = [(r, c, part[part[spec.facet_row] == r]) for r in row_values for c, part in columns]
        rows, cols = len(row_values), len(columns)
    else:
        cells = [(None, c, part) for c, part in columns]
        cols = min(len(cells), MAX_FACETS_PER_ROW)
        rows = math.ceil(len(cells) / cols)
    ticks = ROTATED_TICKS_ROOM if rotated_ticks else 0.0
    width, height = PANEL_SIZE[0] * cols, (PANEL_SIZE[1] + ticks) * rows + MARGINS["legend"]
    fig = Figure(figsize=(width, height), dpi=DPI)
    fig.subplots_adjust(
        left=MARGINS["left"] / width,
        right=1 - MARGINS["right"] / width,
        top=1 - MARGINS["top"] / height,
        bottom=(MARGINS["bottom"] + ticks + MARGINS["legend"]) / height,
        wspace=MARGINS["wspace"],
        hspace=MARGINS["hspace"] + ticks / (PANEL_SIZE[1] - 1.0),  # relative to axes height
    )
    axes = fig.subplots(rows, cols, squeeze=False, sharey=sharey).ravel().tolist()
    for ax in axes[len(cells) :]:
        ax.set_visible(False)
    panels = []
    for ax, (row_value, facet_value, part) in zip(axes, cells):
        title = " · ".join(
            f"{c} = {v:g}" if isinstance(v, float) else f"{c} = {v}"
            for c, v in ((spec.facet, facet_value), (spec.facet_row, row_value))
            if c is not None and v is not None
        )
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


def _finish(
    fig: Figure, spec: FigureSpec, split_value: str, panels: list, note: str = "", order_subjects: bool = True
) -> None:
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
    labels = list(legend)
    if order_subjects:
        rank = {v: i for i, v in enumerate(dict(CATEGORY_ORDER)["subject"])}
        labels.sort(key=lambda k: (k not in rank, rank.get(k, 0)))  # stable otherwise
    entry = max((0.45 + 0.075 * len(k) for k in labels), default=1.0)  # inches at 9 pt
    ncol = max(1, min(len(labels), 6, int((width - 0.2) / entry)))
    legend_rows = math.ceil(len(labels) / ncol) if labels else 1
    _grow(fig, top=LINE_HEIGHT * max(0, len(lines) - 2), bottom=LINE_HEIGHT * (legend_rows - 1))
    fig.suptitle("\n".join(lines), fontsize=10, y=1 - TITLE_TOP / fig.get_figheight(), va="top")
    if labels:
        fig.legend(
            [legend[k] for k in labels], labels, loc="lower center", ncol=ncol, fontsize=LEGEND_FONTSIZE, frameon=False
        )


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


def _plot_line(ax, x, y, subject: object) -> None:
    ax.plot(x, y, lw=1.2, color=_color(subject), label=str(subject), **_style(subject))


def _line_label(column: str | None, value: object) -> str:
    name = dict(LINE_LABELS).get(column, column)
    if value is None:
        return ""
    return f"{name} = {value:g}" if isinstance(value, (int, float, np.number)) else f"{name} = {value}"


def _sequential_colors(values: list) -> dict:
    """One colour per line value from a sequential colour map (light to dark: low to high)."""
    cmap = colormaps[SEQUENTIAL_CMAP]
    if len(values) == 1:
        return {values[0]: cmap(0.35)}
    return {v: cmap(0.85 * i / (len(values) - 1)) for i, v in enumerate(values)}


def _axis_label(column: str) -> str:
    return dict(AXIS_LABELS).get(column, column)


def _color(value: object) -> str:
    known = dict(SUBJECT_COLORS)
    if str(value) in known:
        return known[str(value)]
    return f"C{5 + sum(map(ord, str(value))) % 5}"  # stable for a given unknown name


def _style(value: object) -> dict:
    return {**DEFAULT_STYLE, **dict(SUBJECT_STYLES).get(str(value), {})}


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
    ax.set_xticks(
        shown["position"].astype("float64"), [c[:8] for c in shown["commit"]], rotation=45, ha="right", fontsize=7
    )


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
            ax.text(col, row, f"{value:.2f}×", ha="center", va="center", fontsize=LABEL_FONTSIZE, color=color)
