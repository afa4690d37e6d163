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
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from PIL import Image

from ..track.changepoints import release_order
from ..track.results import commit_order
from . import select as sel
from .marks import (
    _annotate_cells,
    _axis_label,
    _band,
    _change_marks,
    _color,
    _commit_note,
    _commit_ticks,
    _facet_axes,
    _finish,
    _keep_noise_small,
    _label,
    _line_label,
    _mark_changes,
    _mark_faults,
    _mark_semantics,
    _marker_legend,
    _plot_line,
    _quartile_ratios,
    _ratio_reach,
    _ratio_ticks,
    _release_change_at,
    _scale_axes,
    _sequential_colors,
    _style,
    split_label,
)
from .names import benchmark_labels
from .select import MissingData
from .specs import (
    CHANGE_SPAN_COLOR,
    DPI,
    LABEL_FONTSIZE,
    MIN_LABELLED_CHANGE,
    MIN_LABELLED_SHARE,
    PLACEHOLDER_CHANGE,
    FigureSpec,
)


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
    files: tuple[tuple[str, str, str], ...]  # (path relative to the site, alt text, tooltip: the asv name)
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
            alt = spec.title + (f" — {split_label(spec, split_value)}" if split_value else "")
            files.append((f"{fig_dir.name}/{stem}.png", alt, split_value))
        rendered.append(Rendered(spec, tuple(files), "" if files else skip_reason(skipped)))
    return rendered


def skip_reason(skipped: dict[str, list[str]]) -> str:
    """Each reason once, followed by the split values (benchmarks, by their readable names) it
    applies to."""
    if not skipped:
        return "no data"
    return "; ".join(f"{reason} ({benchmark_labels(values)})" for reason, values in skipped.items())


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
    where = ", ".join(p for p in (split_label(spec, split_value), _commit_note(newest)) if p)
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
