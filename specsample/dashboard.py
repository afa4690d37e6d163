"""A static dashboard (index.html + PNGs) from the results frame.

Figures are declared as data (:class:`FigureSpec`, in the spirit of Triton's ``perf_report``):
which column goes on x, one line per value of which column, which unit, which rows. One builder,
:func:`render_figure`, turns a spec into matplotlib figures; :func:`build_dashboard` renders every
spec in :data:`FIGURES`, writes the PNGs and the page. A spec whose data is missing is skipped
with a note on the page instead of failing the build.

The page uses relative links only, so it works opened from disk and when served. Matplotlib is
used through ``matplotlib.figure.Figure`` (Agg rendering) rather than pyplot, so importing this
module changes no global backend state.
"""

from __future__ import annotations

import html
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.colors import TwoSlopeNorm
from matplotlib.figure import Figure

from specsample import results as _results
from specsample.signoff import HIGHER_IS_BETTER, compare_variants, format_value

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
        ``"heatmap"`` (speedup of ``compare[1]`` over ``compare[0]`` on x by ``line``),
        ``"placeholder"`` (two variants against x with the expected drop band).
    x, y : str
        Columns on the axes; ``x="commit"`` means commit order.
    unit : str
        Unit of y after ``scale``, shown on the axis or colour bar.
    line : str or None
        One line per value of this column (the row axis of a heatmap).
    filter : tuple of (column, value) pairs
        Rows kept: column equals value, or is in it when value is a tuple.
    facet : str or None
        One subplot per value of this column.
    split : str or None
        One PNG per value of this column.
    scale : float
        y is multiplied by this before plotting (seconds to µs: 1e6).
    agg : str
        How points sharing (facet, line, x) are combined: ``"geomean"`` (asv's summary
        graphs do the same over parameters) or ``"median"``.
    compare : (str, str) or None
        (base variant, head variant) for heatmaps and the placeholder panel.
    section : str
        HTML section id the figure goes to.
    """

    name: str
    title: str
    kind: str
    x: str
    y: str
    unit: str
    line: str | None = None
    filter: tuple[tuple[str, object], ...] = ()
    facet: str | None = None
    split: str | None = None
    scale: float = 1.0
    agg: str = "geomean"
    compare: tuple[str, str] | None = None
    section: str = "history"


US = 1e6  # asv stores time_* in seconds; kernels run in microseconds
TIME = (("unit", "seconds"),)
NEWEST = "mrv2"  # the variant speedups are measured for
BASELINES = ("torch-eager", "flashinfer", "mrv2-pre50939")

# The latency drop upstream PR 50939 reported for mrv2 over its predecessor; drawn as a band so
# the measured drop can be read against it.
PLACEHOLDER_DROP_BAND = (0.20, 0.36)
PLACEHOLDER_VARIANTS = ("mrv2-pre50939", "mrv2")

FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec(
        name="history-latency", title="Latency over commits (geomean over other params)",
        kind="history", x="commit", y="value", unit="µs", line="variant", facet="mode",
        split="benchmark", filter=TIME, scale=US,
    ),
    FigureSpec(
        name="history-stage", title="Kernel stage time over commits (geomean over other params)",
        kind="history", x="commit", y="value", unit="µs", line="variant", facet="stage",
        split="benchmark", filter=(("metric", "track_stage_us"),),
    ),
    FigureSpec(
        name="placeholder", title="Placeholder handling: mrv2 vs mrv2-pre50939 latency vs phi",
        kind="placeholder", x="phi", y="value", unit="µs", line="variant", facet="mode",
        split="benchmark", filter=(*TIME, ("metric", "time_sample")), scale=US,
        compare=PLACEHOLDER_VARIANTS, section="placeholder-panel",
    ),
    *(
        FigureSpec(
            name=f"placeholder-interleaved-{draft}",
            title=f"Placeholder handling ({draft} drafts, variants interleaved): mrv2 vs mrv2-pre50939 vs phi",
            kind="placeholder", x="phi", y="value", unit="µs", line="variant", facet="mode",
            split="benchmark", filter=(("metric", "track_latency_us"), ("draft", draft)),
            compare=PLACEHOLDER_VARIANTS, section="placeholder-panel",
        )
        for draft in ("logits", "one-hot")
    ),
    *(
        FigureSpec(
            name=f"speedup-{base}-{x}-{rows}", title=f"Speedup of {NEWEST} over {base}",
            kind="heatmap", x=x, y="speedup", unit="×, base latency / head latency", line=rows,
            filter=(*TIME, ("metric", "time_sample")), compare=(base, NEWEST), split="benchmark",
            section="speedup",
        )
        for base in BASELINES
        for x, rows in (("num_reqs", "vocab_size"), ("K", "phi"))
    ),
    FigureSpec(
        name="bandwidth", title="Achieved bandwidth fraction (median over other params)",
        kind="line", x="num_reqs", y="value", unit="fraction of copy bandwidth",
        line="variant", facet="mode", split="benchmark",
        filter=(("metric", "track_bandwidth_fraction"),), agg="median", section="bandwidth",
    ),
    FigureSpec(
        name="bandwidth-phi", title="Achieved bandwidth fraction vs placeholder density (median over other params)",
        kind="line", x="phi", y="value", unit="fraction of copy bandwidth",
        line="variant", facet="mode", split="benchmark",
        filter=(("metric", "track_bandwidth_fraction"),), agg="median", section="bandwidth",
    ),
)

SECTIONS: tuple[tuple[str, str], ...] = (
    ("history", "History"),
    ("placeholder-panel", "Placeholder panel"),
    ("speedup", "Speedup heatmaps"),
    ("bandwidth", "Achieved bandwidth"),
)

# Axis labels with units; a column not listed is labelled by its name.
AXIS_LABELS: tuple[tuple[str, str], ...] = (
    ("commit", "commit (oldest → newest)"),
    ("num_reqs", "num_reqs (requests per batch)"),
    ("vocab_size", "vocab_size (tokens)"),
    ("K", "K (draft tokens per request)"),
    ("phi", "phi (fraction, dimensionless)"),
    ("stage", "kernel stage"),
)

VARIANT_COLORS: tuple[tuple[str, str], ...] = (
    ("mrv2", "C0"), ("mrv2-pre50939", "C1"), ("torch-eager", "C2"), ("flashinfer", "C3"),
    ("flashinfer-kernel", "C4"),
)

DPI = 90  # small PNGs: the whole site stays well under 3 MB for a nightly history
PANEL_SIZE = (4.2, 3.0)  # inches per subplot, margins included
# Fixed margins in inches instead of tight_layout, which measures every text by drawing it and
# roughly doubles the build time; labels here have bounded lengths, so fixed room suffices.
MARGINS = {"left": 0.75, "right": 0.2, "top": 0.75, "bottom": 0.55, "legend": 0.35,
           "wspace": 0.3, "hspace": 0.45}
COMMIT_TICKS_ROOM = 0.45  # inches more below each row for rotated commit hashes
MAX_FACETS_PER_ROW = 3
MAX_TABLE_ROWS = 200


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
        Relative link to asv's own site.
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
    rendered = _render_all(figures, data, regressions, out_dir / "figures")
    page = _page(data, df, machine, rendered, regressions, asv_html_link, notes)
    index = out_dir / "index.html"
    index.write_text(page, encoding="utf-8")
    return index


def render_figure(
    spec: FigureSpec, df: pd.DataFrame, *, regressions: pd.DataFrame | None = None
) -> list[tuple[str, Figure]]:
    """Render one spec: a list of (file stem, Figure), one per ``split`` value.

    Raises :class:`MissingData` when no rows match the spec or a needed column is absent.
    """
    selected = _select(df, spec)
    renderer = _RENDERERS[spec.kind]
    if spec.split is None:
        return [(spec.name, renderer(spec, selected, regressions, ""))]
    figures, reasons = [], []
    for value, part in selected.groupby(spec.split, sort=True):
        try:
            figures.append((f"{spec.name}-{_slug(value)}", renderer(spec, part, regressions,
                                                                   str(value))))
        except MissingData as exc:
            reasons.append(f"{value}: {exc}")
    if not figures:
        raise MissingData("; ".join(reasons) or "no data")
    return figures


# ---------------------------------------------------------------------------------------------
# Selecting data
# ---------------------------------------------------------------------------------------------


def _select(df: pd.DataFrame, spec: FigureSpec) -> pd.DataFrame:
    """Rows a spec draws: filter applied, status ok, needed columns present and non-missing."""
    needed = [c for c in (spec.x, spec.line, spec.facet, spec.split) if c and c != "commit"]
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
    fig, axes = _facet_axes(spec, df)
    for ax, (facet_value, part) in zip(axes, _facets(spec, df)):
        for i, (line_value, series) in enumerate(_lines(spec, part)):
            points = _group(series, ["_x"], "_y", spec.agg)
            ax.plot(points["_x"], points["_y"], marker="o", ms=3, lw=1.2,
                    color=_color(line_value, i), label=str(line_value))
            _mark_steps(ax, points, steps.get((facet_value, line_value), {}))
        _commit_ticks(ax, order)
        _label(ax, spec, facet_value)
    _finish(fig, spec, split_value, axes)
    return fig


def _render_line(spec, df, regressions, split_value) -> Figure:
    df = _newest_commit(df).assign(_y=lambda d: d[spec.y] * spec.scale)
    _require_varying(df, spec.x)
    fig, axes = _facet_axes(spec, df)
    for ax, (facet_value, part) in zip(axes, _facets(spec, df)):
        for i, (line_value, series) in enumerate(_lines(spec, part)):
            points = _group(series, [spec.x], "_y", spec.agg)
            ax.plot(points[spec.x].astype("float64"), points["_y"], marker="o", ms=3,
                    color=_color(line_value, i), label=str(line_value))
        _log_x_if_wide(ax, part[spec.x])
        _label(ax, spec, facet_value)
    _finish(fig, spec, split_value, axes, note=_commit_note(df))
    return fig


def _render_placeholder(spec, df, regressions, split_value) -> Figure:
    base_variant, head_variant = spec.compare
    pairs = compare_variants(_newest_commit(df), base_variant, head_variant)
    pairs = pairs[np.isfinite(pairs["ratio"])]
    if pairs.empty:
        raise MissingData(f"no points measured for both {base_variant} and {head_variant}")
    _require_varying(pairs, spec.x)
    fig, axes = _facet_axes(spec, pairs)
    low, high = PLACEHOLDER_DROP_BAND
    for ax, (facet_value, part) in zip(axes, _facets(spec, pairs)):
        base = _group(part.assign(_y=part["base_value"] * spec.scale), [spec.x], "_y", "geomean")
        head = _group(part.assign(_y=part["head_value"] * spec.scale), [spec.x], "_y", "geomean")
        ratio = _group(part, [spec.x], "ratio", "geomean")
        x = base[spec.x].astype("float64")
        ax.fill_between(x, base["_y"] * (1 - high), base["_y"] * (1 - low), color="0.85",
                        label=f"PR 50939: {low:.0%}–{high:.0%} drop")
        ax.plot(x, base["_y"], marker="o", ms=3, color=_color(base_variant, 0),
                label=base_variant)
        ax.plot(x, head["_y"], marker="o", ms=3, color=_color(head_variant, 1),
                label=head_variant)
        for xi, yi, r in zip(x, head["_y"], ratio["ratio"]):
            ax.annotate(f"−{1 - r:.0%}" if r <= 1 else f"+{r - 1:.0%}", (xi, yi),
                        textcoords="offset points", xytext=(0, -12), ha="center", fontsize=7)
        _label(ax, spec, facet_value)
    note = _commit_note(_newest_commit(df)) + "; labels: measured drop"
    _finish(fig, spec, split_value, axes, note=note)
    return fig


def _render_heatmap(spec, df, regressions, split_value) -> Figure:
    base_variant, head_variant = spec.compare
    pairs = compare_variants(_newest_commit(df), base_variant, head_variant)
    pairs = pairs[np.isfinite(pairs["ratio"]) & (pairs["ratio"] > 0)]
    pairs = pairs.dropna(subset=[spec.x, spec.line])
    if pairs[spec.x].nunique() < 2 or pairs[spec.line].nunique() < 2:
        raise MissingData(f"{base_variant} vs {head_variant} not measured over two or more "
                          f"values of both {spec.x} and {spec.line}")
    speedup = _group(pairs.assign(_s=1.0 / pairs["ratio"]), [spec.line, spec.x], "_s", "geomean")
    grid = speedup.pivot(index=spec.line, columns=spec.x, values="_s")
    fig = Figure(figsize=(1.1 * grid.shape[1] + 2.8, 0.5 * grid.shape[0] + 2.2), dpi=DPI)
    ax = fig.subplots()
    vmin, vmax = np.nanmin(grid.values), np.nanmax(grid.values)
    norm = TwoSlopeNorm(vcenter=1.0, vmin=min(vmin, 0.99), vmax=max(vmax, 1.01))
    image = ax.imshow(grid.values, cmap="RdBu", norm=norm, aspect="auto", origin="lower")
    _annotate_cells(ax, grid.values, norm)
    ax.set_xticks(range(grid.shape[1]), [str(v) for v in grid.columns])
    ax.set_yticks(range(grid.shape[0]), [str(v) for v in grid.index])
    ax.set_xlabel(_axis_label(spec.x))
    ax.set_ylabel(_axis_label(spec.line))
    fig.colorbar(image, ax=ax, label=f"speedup ({spec.unit})")
    note = _commit_note(_newest_commit(df))
    ax.set_title(f"{spec.title}\n(>1: {head_variant} faster; {note})", fontsize=9)
    fig.tight_layout()
    return fig


_RENDERERS: dict[str, Callable[..., Figure]] = {
    "history": _render_history,
    "line": _render_line,
    "placeholder": _render_placeholder,
    "heatmap": _render_heatmap,
}


# ---------------------------------------------------------------------------------------------
# Figure helpers
# ---------------------------------------------------------------------------------------------


def _facets(spec: FigureSpec, df: pd.DataFrame) -> list[tuple[object, pd.DataFrame]]:
    if spec.facet is None or spec.facet not in df:
        return [(None, df)]
    # First-appearance order follows asv's params order (stages in pipeline order).
    return list(df.groupby(spec.facet, sort=False, dropna=False))


def _lines(spec: FigureSpec, df: pd.DataFrame) -> list[tuple[object, pd.DataFrame]]:
    if spec.line is None:
        return [(None, df)]
    return list(df.groupby(spec.line, sort=False, dropna=False))


def _facet_axes(spec: FigureSpec, df: pd.DataFrame) -> tuple[Figure, list]:
    n = len(_facets(spec, df))
    cols = min(n, MAX_FACETS_PER_ROW)
    rows = math.ceil(n / cols)
    ticks = COMMIT_TICKS_ROOM if spec.x == "commit" else 0.0
    width, height = PANEL_SIZE[0] * cols, (PANEL_SIZE[1] + ticks) * rows + MARGINS["legend"]
    fig = Figure(figsize=(width, height), dpi=DPI)
    fig.subplots_adjust(
        left=MARGINS["left"] / width, right=1 - MARGINS["right"] / width,
        top=1 - MARGINS["top"] / height,
        bottom=(MARGINS["bottom"] + ticks + MARGINS["legend"]) / height,
        wspace=MARGINS["wspace"],
        hspace=MARGINS["hspace"] + ticks / (PANEL_SIZE[1] - 1.0),  # relative to axes height
    )
    axes = fig.subplots(rows, cols, squeeze=False).ravel().tolist()
    for ax in axes[n:]:
        ax.set_visible(False)
    return fig, axes[:n]


def _label(ax, spec: FigureSpec, facet_value: object) -> None:
    ax.set_xlabel(_axis_label(spec.x))
    ax.set_ylabel(f"{spec.y} ({spec.unit})" if spec.y != "value" else spec.unit)
    if spec.facet is not None:
        ax.set_title(f"{spec.facet} = {facet_value}", fontsize=9)
    ax.grid(True, alpha=0.3)


def _finish(fig: Figure, spec: FigureSpec, split_value: str, axes: list, note: str = "") -> None:
    title = spec.title + (f" — {split_value}" if split_value else "")
    fig.suptitle(title + (f"\n{note}" if note else ""), fontsize=10)
    # One legend for the figure, below the panels, so no panel's data is hidden under it.
    legend = {}
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    if legend:
        fig.legend(legend.values(), legend.keys(), loc="lower center", ncol=min(len(legend), 6),
                   fontsize=7, frameon=False)


def _axis_label(column: str) -> str:
    return dict(AXIS_LABELS).get(column, column)


def _color(value: object, index: int) -> str:
    return dict(VARIANT_COLORS).get(str(value), f"C{(index + 4) % 10}")


def _log_x_if_wide(ax, x: pd.Series) -> None:
    """Batch sizes span decades: log axis, ticked at the measured values in plain numbers."""
    values = np.sort(pd.to_numeric(x, errors="coerce").dropna().unique())
    if len(values) and values.min() > 0 and values.max() / values.min() >= 16:
        ax.set_xscale("log", base=2)
        ax.set_xticks(values, [f"{v:g}" for v in values])
        ax.minorticks_off()


def _commit_ticks(ax, order: pd.DataFrame, max_ticks: int = 12) -> None:
    step = max(1, math.ceil(len(order) / max_ticks))
    shown = order.iloc[::step]
    ax.set_xticks(shown["position"].astype("float64"),
                  [c[:8] for c in shown["commit"]], rotation=45, ha="right", fontsize=7)


def _commit_note(df: pd.DataFrame) -> str:
    commits = df["commit"].dropna().unique() if "commit" in df else []
    return f"commit {str(commits[0])[:8]}" if len(commits) == 1 else ""


def _annotate_cells(ax, values: np.ndarray, norm: TwoSlopeNorm) -> None:
    for (row, col), value in np.ndenumerate(values):
        if np.isfinite(value):
            # White text on the saturated ends of the colour map, black in the pale middle.
            color = "white" if abs(float(norm(value)) - 0.5) > 0.3 else "black"
            ax.text(col, row, f"{value:.2f}×", ha="center", va="center", fontsize=7, color=color)


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
        ax.plot([x], [y.iloc[0]], marker="v", ms=7, color="red", ls="none",
                label="asv step" if "asv step" not in ax.get_legend_handles_labels()[1] else None)
        ax.annotate(str(count), (x, y.iloc[0]), textcoords="offset points", xytext=(4, 4),
                    fontsize=6, color="red")


# ---------------------------------------------------------------------------------------------
# Rendering everything
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Rendered:
    spec: FigureSpec
    files: tuple[str, ...]  # relative to out_dir
    note: str  # why nothing was drawn, when files is empty


def _render_all(
    figures: Sequence[FigureSpec], df: pd.DataFrame, regressions: pd.DataFrame, fig_dir: Path
) -> list[_Rendered]:
    rendered = []
    for spec in figures:
        try:
            drawn = render_figure(spec, df, regressions=regressions)
        except MissingData as exc:
            rendered.append(_Rendered(spec, (), str(exc)))
            continue
        files = []
        for stem, fig in drawn:
            fig.savefig(fig_dir / f"{stem}.png", dpi=DPI)
            files.append(f"figures/{stem}.png")
        rendered.append(_Rendered(spec, tuple(files), ""))
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


def _page(data, all_data, machine, rendered, regressions, asv_html_link, notes) -> str:
    body = [
        f"<h1>specsample benchmarks — {html.escape(str(machine))}</h1>",
        _header(data, all_data, machine, asv_html_link),
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


def _header(data, all_data, machine, asv_html_link) -> str:
    order = _results.commit_order(data) if not data.empty else pd.DataFrame()
    others = sorted(set(all_data["machine"].dropna()) - {machine}) if not all_data.empty else []
    parts = [f"{len(order)} commits"]
    if len(order):
        parts.append(f"{order['date'].min():%Y-%m-%d} → {order['date'].max():%Y-%m-%d}")
        parts.append(f"newest <code>{html.escape(str(order['commit'].iloc[-1])[:8])}</code>")
    if others:
        parts.append("other machines: " + ", ".join(html.escape(m) for m in others))
    parts.append(f'<a href="{html.escape(asv_html_link)}">asv site</a>')
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
        for path in item.files:
            parts.append(f'<img src="{html.escape(path)}" alt="{html.escape(item.spec.title)}"'
                         f' loading="lazy">')
    if section_id == "placeholder-panel":
        low, high = PLACEHOLDER_DROP_BAND
        parts.append(f"<p>Grey band: the {low:.0%}–{high:.0%} latency drop reported for the "
                     f"placeholder change (PR 50939), drawn below the pre-PR line; labels give "
                     f"the measured drop, geomean over the other parameters.</p>")
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
