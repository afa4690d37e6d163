"""What the dashboard shows, declared as data: the figures, the sections, their captions, labels,
orders, colours and sizes.

A figure is a :class:`FigureSpec` (in the spirit of Triton's ``perf_report``): which column goes
on x, one line (or bar) per value of which column, which rows, which unit. :mod:`.select` turns a
spec into rows, :mod:`.render` into matplotlib figures, :mod:`.page` into HTML. Nothing here
computes anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..schema import BANDWIDTH_METRIC, BASE_POINT, DRAFTS, MODES, OUR_SUBJECTS, RATIO_METRIC, STAGES, SYMBOLS, TIERS


@dataclass(frozen=True)
class FigureSpec:
    """One figure (or one per value of ``split``) of the dashboard.

    Attributes
    ----------
    name : str
        PNG file stem.
    title : str
    kind : str
        ``"history"`` (y over commits, marked where change points were detected), ``"line"``
        (y against x at the newest commit), ``"bars"`` (grouped bars: one group per x value,
        one bar per ``line`` value, at the newest commit), ``"heatmap"`` (speedup of
        ``compare[1]`` over ``compare[0]`` on x by ``line``), ``"placeholder"`` (two subjects
        against phi, with the change measured between vLLM releases), ``"releases"`` (y over
        vLLM releases in version order, faults and semantics marked).
    x, y : str
        Columns on the axes; ``x="commit"`` means commit order, ``x="release"`` version order.
    unit : str
        Unit of y after ``scale``, shown on the axis or colour bar.
    quantity : str
        What y measures ("latency"); the y axis reads ``quantity (unit)``, or just ``unit``
        when empty (a unit that names the quantity, like "fraction of copy bandwidth").
    line : str or None
        One line (bar) per value of this column (the row axis of a heatmap).
    filter : tuple of (column, value) pairs
        Rows kept: column equals value, or is in it when value is a tuple.
    facet, facet_row : str or None
        One subplot per value of ``facet`` (the columns of the grid), and with ``facet_row``
        one row of subplots per value of that column.
    split : str or None
        One PNG per value of this column.
    scale : float
        y is multiplied by this before plotting (seconds to µs: 1e6).
    agg : str
        How points sharing (facet, line, x) are combined: ``"geomean"`` (asv's summary graphs
        do the same over parameters) or ``"median"``.
    compare : (str, str) or None
        (base subject, head subject) for heatmaps and the placeholder panel; for bars, the
        change of head over base is printed above each group.
    also : tuple of str
        Placeholder panel: more subjects drawn beside compare's two.
    ci : (str, str) or None
        Columns of the lower and upper confidence bound of y, drawn as a band where every
        plotted point is one measured point.
    bands : (str, str) or None
        Columns of the lower and upper quartile of the samples (``q25``, ``q75``), drawn as a
        band around each line (history: their geomean ratio to the median over the line's
        points).
    log_axes : tuple of str
        ``"x"`` and/or ``"y"``: drawn on a log scale (x ticked at the measured values).
    statuses : tuple of str
        Row statuses drawn; ``"releases"`` figures also mark crashed and failed points.
    section : str
        HTML section id the figure goes to; :data:`SECTIONS` says which page holds it.
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
    also: tuple[str, ...] = ()
    ci: tuple[str, str] | None = None
    bands: tuple[str, str] | None = None
    log_axes: tuple[str, ...] = ()
    statuses: tuple[str, ...] = ("ok",)
    section: str = "history"


US = 1e6  # asv stores time_* in seconds; kernels run in microseconds
BASELINE = "mrv2"  # the subject speedups are measured against, and ratios taken to
BASELINES = ("torch-eager", "flashinfer", "mrv2-pre50939")
FASTEST = "fast"  # the faster design, shown against mrv2 (issue 7)
# Ours, each against the newest vLLM release on the releases page: the replica, the sampler with
# mrv2's draws, and the sampler with its own random stream.
VERSUS_SUBJECTS = (BASELINE, FASTEST, "express")
PLACEHOLDER_SUBJECTS = ("mrv2-pre50939", "mrv2")  # our replica before PR #50939, and after
# The vLLM release PR #50939 (the placeholder change) first shipped in; the release before it
# is the newest one measured below it.
PLACEHOLDER_CHANGE_RELEASE = "0.28.0"
PLACEHOLDER_CHANGE = "PR #50939"
# What it changed, in one sentence (docs/placeholders.md, "What PR #50939 changed"), wherever the
# pages discuss it.
PLACEHOLDER_CHANGE_TEXT = (
    "PR #50939 (vLLM 0.28.0) made the standard, synthetic and block paths stop at a request's "
    "first -1 placeholder draft instead of working through the placeholder steps (a row "
    "rejected there resamples from the plain target), and gave block verification the -1 "
    "handling it lacked, without which it could accept drafts after a -1 and emit -1 as a "
    "token; greedy is unchanged."
)
# Subjects whose code is not what an engineer here changes for speed: the peers and the frozen
# replica before PR #50939, and the vLLM releases measured beside ours (``vllm==...``). The
# change tables rank the other subjects and list these apart, after them.
REFERENCE_SUBJECTS = (*BASELINES, "flashinfer-kernel")
REFERENCE_PREFIX = "vllm=="

# The index page shows our own tiers; the releases tier has a page of its own.
OUR_TIERS = tuple(t for t in TIERS if t != "releases")
INDEX_ROWS = (("tier", OUR_TIERS),)
TIME = (("unit", "seconds"),)
TIME_SAMPLE = (*TIME, ("metric", "time_sample"))
QUARTILES = ("q25", "q75")

# The nightly one-axis sweeps (specsample.tiers): sweep name, the axis it varies, log axes.
NIGHTLY_SWEEPS: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("Batch", "num_reqs", ("x", "y")),
    ("Vocab", "vocab_size", ("x",)),
    ("Steps", "num_speculative_steps", ()),
)
# The releases tier's sweeps (specsample.tiers): sweep name, the axis it varies.
RELEASE_SWEEPS: tuple[tuple[str, str], ...] = (
    ("Shape", "num_reqs"),
    ("Steps", "num_speculative_steps"),
    ("Vocab", "vocab_size"),
)
RELEASE_METRICS = ("time_sample", "track_latency_us")
# Replica fidelity: ours against the release whose draws they reproduce, measured beside it
# (issue 17: mrv2 within 3% of it at every nightly point, or a variant that is). Interleaved
# medians first: the subjects of a point were measured in one worker.
FIDELITY_SUBJECTS = ("mrv2", "mrv2-vllm")
FIDELITY_TOLERANCE = 0.03
FIDELITY_METRICS = ("track_latency_us", "time_sample")
_RELEASE_ROWS = (("tier", "releases"), ("metric", "time_sample"))
_RELEASE_STATUSES = ("ok", "crashed", "failed")
_HEATMAP_AXES = (("num_reqs", "vocab_size"), ("num_speculative_steps", "placeholder_density"))
# The speedup heatmaps, (slower, faster, figure name prefix): mrv2 over the peers and the
# replica before PR #50939, then fast over mrv2 (issue 7). Not express: the quick tier's 2-D
# sweeps, which the heatmaps need, do not run it (the nightly sweeps vary one axis each).
SPEEDUPS = (
    *((base, BASELINE, f"speedup-{base}") for base in BASELINES),
    (BASELINE, FASTEST, f"speedup-{FASTEST}-over-{BASELINE}"),
)

FIGURES: tuple[FigureSpec, ...] = (
    FigureSpec(
        name="history-latency",
        title="Latency over commits (geomean over other params)",
        kind="history",
        x="commit",
        y="value",
        unit="µs",
        quantity="latency",
        line="subject",
        facet="mode",
        split="benchmark",
        filter=(*INDEX_ROWS, *TIME),
        scale=US,
        bands=QUARTILES,
    ),
    FigureSpec(
        name="history-stage",
        title="Kernel stage time over commits (geomean over other params)",
        kind="history",
        x="commit",
        y="value",
        unit="µs",
        quantity="stage time",
        line="subject",
        facet="stage",
        split="benchmark",
        filter=(*INDEX_ROWS, ("metric", "track_stage_us")),
    ),
    FigureSpec(
        name="placeholder",
        title="Placeholder handling: mrv2 vs mrv2-pre50939 latency vs phi",
        kind="placeholder",
        x="placeholder_density",
        y="value",
        unit="µs",
        quantity="latency",
        line="subject",
        facet="mode",
        facet_row="draft",
        split="benchmark",
        filter=(*INDEX_ROWS, *TIME_SAMPLE),
        scale=US,
        compare=PLACEHOLDER_SUBJECTS,
        also=(FASTEST,),
        section="placeholder-panel",
    ),
    *(
        FigureSpec(
            name=f"placeholder-interleaved-{draft}",
            title=(f"Placeholder handling ({draft} drafts, subjects interleaved): mrv2 vs mrv2-pre50939 vs phi"),
            kind="placeholder",
            x="placeholder_density",
            y="value",
            unit="µs",
            quantity="latency",
            line="subject",
            facet="mode",
            split="benchmark",
            filter=(*INDEX_ROWS, ("metric", "track_latency_us"), ("draft", draft)),
            compare=PLACEHOLDER_SUBJECTS,
            also=(FASTEST,),
            section="placeholder-panel",
        )
        for draft in ("logits", "one-hot")
    ),
    FigureSpec(
        name="stages",
        title="Per-kernel breakdown (logits drafts): stage time per subject",
        kind="bars",
        x="stage",
        y="value",
        unit="µs",
        quantity="stage time",
        line="subject",
        facet="mode",
        facet_row="placeholder_density",
        split="benchmark",
        filter=(*INDEX_ROWS, ("metric", "track_stage_us"), ("draft", "logits")),
        compare=PLACEHOLDER_SUBJECTS,
        agg="median",
        section="stages",
    ),
    *(
        FigureSpec(
            name=f"sweep-{x}",
            title=f"Latency vs {x} (newest commit)",
            kind="line",
            x=x,
            y="value",
            unit="µs",
            quantity="latency",
            line="subject",
            facet="mode",
            split="benchmark",
            filter=(*TIME_SAMPLE, ("tier", "nightly"), ("sweep", sweep)),
            scale=US,
            ci=("ci_lo", "ci_hi"),
            log_axes=log_axes,
            section="sweeps",
        )
        for sweep, x, log_axes in NIGHTLY_SWEEPS
    ),
    *(
        FigureSpec(
            name=f"{name}-{x}-{rows}",
            title=f"Speedup of {faster} over {slower} by {x} × {rows}",
            kind="heatmap",
            x=x,
            y="speedup",
            unit="×",
            quantity="speedup",
            line=rows,
            filter=(*INDEX_ROWS, *TIME_SAMPLE),
            compare=(slower, faster),
            split="benchmark",
            section="speedup",
        )
        for slower, faster, name in SPEEDUPS
        for x, rows in _HEATMAP_AXES
    ),
    FigureSpec(
        name="bandwidth",
        title="Achieved bandwidth fraction (median over other params)",
        kind="line",
        x="num_reqs",
        y="value",
        unit="fraction of copy bandwidth",
        line="subject",
        facet="mode",
        split="benchmark",
        filter=(*INDEX_ROWS, ("metric", BANDWIDTH_METRIC)),
        agg="median",
        log_axes=("x",),
        section="bandwidth",
    ),
    FigureSpec(
        name="bandwidth-phi",
        title="Achieved bandwidth fraction vs placeholder density (median over other params)",
        kind="line",
        x="placeholder_density",
        y="value",
        unit="fraction of copy bandwidth",
        line="subject",
        facet="mode",
        split="benchmark",
        filter=(*INDEX_ROWS, ("metric", BANDWIDTH_METRIC)),
        agg="median",
        section="bandwidth",
    ),
    # ---- the vLLM releases page
    *(
        FigureSpec(
            name=f"releases-density-{pattern}",
            title=f"Latency over vLLM releases by placeholder density ({pattern} placeholders)",
            kind="releases",
            x="release",
            y="value",
            unit="µs",
            quantity="latency",
            line="placeholder_density",
            facet="mode",
            facet_row="draft",
            split="benchmark",
            filter=(*_RELEASE_ROWS, ("sweep", "Density"), ("placeholder_pattern", pattern)),
            scale=US,
            bands=QUARTILES,
            statuses=_RELEASE_STATUSES,
            section="release-latency",
        )
        for pattern in ("trailing", "random")
    ),
    *(
        FigureSpec(
            name=f"releases-{sweep.lower()}",
            title=f"Latency over vLLM releases by {axis} ({sweep} sweep)",
            kind="releases",
            x="release",
            y="value",
            unit="µs",
            quantity="latency",
            line=axis,
            facet="mode",
            split="benchmark",
            filter=(*_RELEASE_ROWS, ("sweep", sweep)),
            scale=US,
            bands=QUARTILES,
            statuses=_RELEASE_STATUSES,
            section="release-latency",
        )
        for sweep, axis in RELEASE_SWEEPS
    ),
)

# (section id, heading, page); pages: "index" (index.html) and "releases" (releases.html).
SECTIONS: tuple[tuple[str, str, str], ...] = (
    ("history", "History", "index"),
    ("placeholder-panel", "Placeholder panel", "index"),
    ("stages", "Per-kernel breakdown", "index"),
    ("sweeps", "Latency sweeps", "index"),
    ("speedup", "Speedup heatmaps", "index"),
    ("bandwidth", "Achieved bandwidth", "index"),
    ("release-latency", "Latency over releases", "releases"),
)
PAGES = {"index": "index.html", "releases": "releases.html"}

# A paragraph under a section's figures, formatted with CAPTION_VALUES and the build's numbers.
SECTION_TEXT: tuple[tuple[str, str], ...] = (
    (
        "history",
        "One line per subject, the geomean over the benchmark's other parameters. Band: the "
        "samples' interquartile range (q25–q75, their geomean ratio to the median over the "
        "line's points) where quartiles were stored. Red ▲ / green ▼: a regression / improvement "
        "detected at that commit (the number of points of the line that changed; see the tables "
        "above). The y axis spans at least ±{min_half_range:.0%} of the panel's median, so "
        "noise below the {floor:.0%} noise floor stays small.",
    ),
    (
        "placeholder-panel",
        "{change_text} mrv2-pre50939 is mrv2 as it was before it, so the two lines show what "
        "it saves against the placeholder density phi. {release_note} Labels along the bottom "
        "of each panel: the latency change of mrv2 vs mrv2-pre50939 (geomean over the other "
        "parameters); negative is faster.",
    ),
    (
        "stages",
        "Kernel time per pipeline stage at the newest commit, one row of panels per placeholder "
        "density phi. Labels: the mrv2 vs mrv2-pre50939 change of a stage where it is at "
        "least {min_change}% and {min_share:.0%} of the tallest bar. “n/a”: the stage does not "
        "run in that mode.",
    ),
    (
        "sweeps",
        "Latency against the one axis each nightly sweep varies, the others held at the base "
        "point ({base_point}). Shaded: asv's 99% confidence interval of the median (often "
        "narrower than the line).",
    ),
    (
        "bandwidth",
        "Achieved bandwidth: the bytes an ideal sampler must move (workloads.bytes_required: "
        "target rows up to the first placeholder, draft rows only for draft logits) per second, "
        "as a fraction of the measured device-to-device copy bandwidth (bytes read plus "
        "written). {above_one}",
    ),
    (
        "release-latency",
        "One line per value of the swept axis, the others at the base point ({base_point}); x: "
        "the releases in version order, all measured in one run at commit {commit}. Band: the "
        "samples' q25–q75. Hollow marker: same placeholder semantics as mrv2, other random "
        "draws; red ring: violates placeholder semantics; red ✕ at the bottom: the release "
        "crashed (or failed) at that point. Red ▲ / green ▼: a change between releases beyond "
        "the releases' noise floor ({release_floor:.0%}). Grey span: {change} (vLLM "
        "{change_release}), the placeholder change (its table above).",
    ),
)

# Explanations of bandwidth fractions above 1, by the kind of subject that shows one.
ABOVE_ONE_TEXT = (
    "Above 1 ({above}): the counted bytes moved faster than the copy kernel moves bytes, so "
    "not all of them came from DRAM, or the comparison is not like for like: inputs can still "
    "be in L2 from an earlier call (the cold-L2 rotation cycles copies totalling twice the L2, "
    "but small inputs and hot rows can stay), a kernel that only reads streams faster than a "
    "copy, which reads and writes, and the model counts work a subject may not do."
)
ABOVE_ONE_SUBJECT_TEXT: tuple[tuple[str, str], ...] = (
    (
        "flashinfer-kernel",
        "flashinfer-kernel starts from precomputed probabilities (the softmaxes are done before "
        "the timed call), so the bytes model, which counts reading logits, is not the same work.",
    ),
)
NOTHING_ABOVE_ONE = "No subject reaches a fraction of 1 here."

# Readable benchmark names (.names): asv's ``<module>.<Tier><Sweep><Family>.<metric>`` reads
# "<Sweep> sweep (<tier>) · <metric label>". Sweep names not listed are split at capitals.
METRIC_LABELS: tuple[tuple[str, str], ...] = (
    ("time_sample", "latency (asv samples)"),
    ("track_latency_us", "latency (µs)"),
    ("track_ratio_to_mrv2", "latency / mrv2's"),
    ("track_bandwidth_fraction", "bandwidth fraction"),
    ("track_stage_us", "stage time (µs)"),
)
SWEEP_LABELS: tuple[tuple[str, str], ...] = (("Vllm", "vLLM"),)
# Columns drawn on a log axis wherever a figure puts them on x: R spans 1 to 512.
LOG_X_COLUMNS = ("num_reqs",)

# Axis labels with units; a column not listed is labelled by its name.
AXIS_LABELS: tuple[tuple[str, str], ...] = (
    ("commit", "commit (oldest → newest)"),
    ("release", "vLLM release (version order)"),
    ("num_reqs", "num_reqs (requests per batch)"),
    ("vocab_size", "vocab_size (tokens)"),
    ("num_speculative_steps", "K (draft tokens per request)"),
    ("placeholder_density", "phi (placeholder fraction, dimensionless)"),
    ("stage", "kernel stage (pipeline order)"),
)
# Legend titles for line columns that are not subjects.
LINE_LABELS: tuple[tuple[str, str], ...] = (
    ("placeholder_density", "phi"),
    ("num_reqs", "R"),
    ("num_speculative_steps", "K"),
    ("vocab_size", "V"),
)

# Category order, the same in every figure (facets, lines, bars); values not listed follow in
# order of first appearance.
CATEGORY_ORDER: tuple[tuple[str, tuple], ...] = (
    ("mode", MODES),
    ("draft", DRAFTS),
    ("stage", STAGES),
    ("subject", OUR_SUBJECTS),
)

SUBJECT_COLORS: tuple[tuple[str, str], ...] = (
    ("mrv2", "C0"),
    ("mrv2-pre50939", "C1"),
    ("torch-eager", "C2"),
    ("flashinfer", "C3"),
    ("flashinfer-kernel", "C4"),
    ("fast", "C5"),
)
# Line style per subject: mrv2-pre50939 is dashed with hollow squares and drawn above mrv2, so
# it stays visible where the two are equal.
SUBJECT_STYLES: tuple[tuple[str, dict], ...] = (
    ("mrv2-pre50939", {"ls": "--", "marker": "s", "mfc": "none", "ms": 5, "zorder": 3}),
)
DEFAULT_STYLE = {"ls": "-", "marker": "o", "ms": 3, "zorder": 2}
SEQUENTIAL_CMAP = "viridis"  # lines of a numeric axis (phi, R, K, V), light to dark
REGRESSION_COLOR = "#c62828"
IMPROVEMENT_COLOR = "#2e7d32"
CHANGE_SPAN_COLOR = "0.88"

DPI = 90  # small PNGs: the whole site stays well under 3 MB for a nightly history
PANEL_SIZE = (4.2, 3.0)  # inches per subplot, margins included
# Fixed margins in inches instead of tight_layout, which measures every text by drawing it and
# roughly doubles the build time; labels here have bounded lengths, so fixed room suffices.
MARGINS = {"left": 0.75, "right": 0.2, "top": 0.75, "bottom": 0.55, "legend": 0.4, "wspace": 0.3, "hspace": 0.45}
TITLE_TOP = 0.06  # inches from the top edge to the figure title
LINE_HEIGHT = 0.2  # inches per extra line of title or legend
ROTATED_TICKS_ROOM = 0.45  # inches more below each row for rotated tick labels
MAX_FACETS_PER_ROW = 3
MAX_TABLE_ROWS = 100  # rows per changes table; the rest are counted
SHOWN_TABLE_ROWS = 12  # rows shown before the rest of a table folds into a <details>
# One change of a point usually shows in several metrics of its sweep (the latency, the ratio
# to mrv2 and the bandwidth are computed from one measurement): the tables list it once, under
# the first of these its sweep has, and name the others.
METRIC_PREFERENCE = (
    "time_sample",
    "track_latency_us",
    "track_stage_us",
    RATIO_METRIC,
    BANDWIDTH_METRIC,
)
MAX_FAULT_ROWS = 50
LEGEND_FONTSIZE = 9
LABEL_FONTSIZE = 8  # in-plot value labels
MIN_LABELLED_CHANGE = 5  # percent; smaller stage changes are not labelled
MIN_LABELLED_SHARE = 0.02  # nor changes below this fraction of the tallest bar (µs noise)
HEATMAP_MIN_RANGE = 1.10  # the colour bar spans at least 1/1.10 … 1.10×
# History and release panels span at least this fraction of their median either side, so a
# change below the noise floor (specsample.track.changepoints) does not fill the panel.
MIN_HALF_RANGE = 0.05

# Values the captions are formatted with.
CAPTION_VALUES = {
    "min_half_range": MIN_HALF_RANGE,
    "min_change": MIN_LABELLED_CHANGE,
    "min_share": MIN_LABELLED_SHARE,
    "base_point": ", ".join(f"{SYMBOLS.get(k, k)}={v}" for k, v in BASE_POINT.items() if k != "mode"),
    "change": PLACEHOLDER_CHANGE,
    "change_release": PLACEHOLDER_CHANGE_RELEASE,
    "change_text": PLACEHOLDER_CHANGE_TEXT,
}
