"""The dashboard figures' marks (change points, semantics, faults, the measured release change)
and the axes helpers every renderer in :mod:`.render` shares (facets, bands, labels, scales,
ticks, colors)."""

from __future__ import annotations

import math
import textwrap

import numpy as np
import pandas as pd
from matplotlib import colormaps
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter
from matplotlib.transforms import blended_transform_factory

from . import select as sel
from .names import benchmark_label
from .specs import (
    AXIS_LABELS,
    CATEGORY_ORDER,
    DEFAULT_STYLE,
    DPI,
    HEATMAP_MIN_RANGE,
    IMPROVEMENT_COLOR,
    LABEL_FONTSIZE,
    LEGEND_FONTSIZE,
    LINE_HEIGHT,
    LINE_LABELS,
    LOG_X_COLUMNS,
    MARGINS,
    MAX_FACETS_PER_ROW,
    MIN_HALF_RANGE,
    PANEL_SIZE,
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
    lines = textwrap.wrap(spec.title + (f" — {split_label(spec, split_value)}" if split_value else ""), chars)
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


def split_label(spec: FigureSpec, split_value: str) -> str:
    """What a figure's title and alt text name its split value by: a benchmark by its readable
    name (:mod:`.names`), any other value as it is."""
    return benchmark_label(split_value) if spec.split == "benchmark" else str(split_value)


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
    """Log axes where the spec asks, and x wherever it is one of :data:`LOG_X_COLUMNS`, ticked
    in plain numbers; x ticked at the measured values on a log axis (thinned so labels do not
    overlap) or when they are a few integers."""
    if "y" in spec.log_axes:
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(LogLocator(base=10, subs=(1, 2, 5)))
        ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))
        ax.yaxis.set_minor_formatter(NullFormatter())
    values = np.sort(pd.to_numeric(x, errors="coerce").dropna().unique())
    if not len(values):
        return
    if ("x" in spec.log_axes or spec.x in LOG_X_COLUMNS) and values.min() > 0:
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
