"""Consistency of the committed H200 results (``results/``) with the dashboard and the change
points built from them: what ``specsample dashboard`` (README's main job) and ``specsample
regressions`` read.

These tests check structure and invariants that new results keep (figures drawn, labels clear of
the data, no false alarms in a window of unchanged code), never numbers that a new run would
change. Behaviour on known data is tested on frames the tests build (test_dashboard.py,
test_changepoints.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg
from site_pages import ASV_NAME, drawn_figures, rows, visible_text
from site_pages import section as _section

from specsample.cli import main
from specsample.dashboard import FIGURES, MissingData, build_sites, render_figure
from specsample.dashboard.names import benchmark_label
from specsample.dashboard.specs import PLACEHOLDER_CHANGE_TEXT
from specsample.track import changepoints
from specsample.track.results import commit_order, load_results

RESULTS = Path(__file__).resolve().parents[1] / "results"
MODE_ORDER = ("greedy", "standard", "block")
MAX_SITE_BYTES = 3 * 1024 * 1024
# mrv2's and mrv2-pre50939's kernels and their measurement did not change from b340c9d (after
# 9e9d5f2 changed how the Latency classes measure) to c1b5b1c: an A/A window of 7 separate
# nightly runs on the H200 (specsample.track.changepoints cites this test for its noise floor).
AA_WINDOW = ("b340c9d4", "c1b5b1ca")
AA_SUBJECTS = ("mrv2", "mrv2-pre50939")


@pytest.fixture(scope="module")
def real_df():
    if not (RESULTS / "benchmarks.json").is_file():
        pytest.skip("no committed results/ in this checkout")
    frame, problems = load_results(RESULTS)
    assert not problems, problems
    return frame


@pytest.fixture(scope="module")
def real_site(real_df, tmp_path_factory):
    out = tmp_path_factory.mktemp("real") / "site"
    # as README's main job builds it: the default machine (h200, whose history is the longest)
    # in out, every other GPU machine in out/<machine>/
    index = build_sites(real_df, out, results_dir=RESULTS)[0]
    assert "h200</title>" in index.read_text(encoding="utf-8")
    return out, index.read_text(encoding="utf-8")


def _spec(name: str):
    return next(s for s in FIGURES if s.name == name)


def _panels(fig) -> list:
    return [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]


def test_no_change_is_flagged_where_the_code_did_not_change(real_df):
    order = commit_order(real_df)
    shas = [c[:8] for c in order["commit"]]
    if not all(s in shas for s in AA_WINDOW):
        pytest.skip(f"the A/A window {AA_WINDOW} is not in results/")
    first, last = (shas.index(s) for s in AA_WINDOW)
    window = order["commit"].iloc[first : last + 1]
    frame = real_df[real_df["commit"].isin(set(window))]
    quiet = frame[frame["subject"].isin(AA_SUBJECTS)]
    assert quiet["commit"].nunique() >= 5
    changes = changepoints.detect(quiet)
    assert changes.empty, changes[["benchmark", "subject", "mode", "change", "before", "after"]]


def test_no_vllm_release_is_flagged_between_our_commits(real_df):
    # a release's kernels are the same at every commit of ours: the control group of the
    # nightly history (before the bandwidth fraction stopped being a series, the copy
    # bandwidth measured 4.4% higher at abe6f31 flagged vllm==0.33.0 among 39 "slower" points)
    newest = changepoints.newest_vs_previous(real_df)
    releases = newest[newest["subject"].astype(str).str.startswith("vllm==")]
    assert len(releases) >= 100
    assert set(releases["verdict"]) == {"unchanged"}, releases[releases["verdict"] != "unchanged"]
    changes = changepoints.detect(real_df, "commits")
    assert not changes["subject"].astype(str).str.startswith("vllm==").any()


def test_work_moved_between_express_kernels_is_a_shift(real_df):
    # 093c776 moved row 0's read from express's resample kernel into its stats kernel: stats
    # doubled at phi=1 while every such call got faster
    changes = changepoints.detect(real_df[real_df["machine"] == "h200"], "commits")
    moved = changes[
        (changes["subject"] == "express")
        & (changes["stage"] == "stats")
        & (changes["direction"] == "regression")
        & (changes["after"].astype(str).str.startswith("093c776e"))
    ]
    if moved.empty:
        pytest.skip("093c776e's stage results are not in results/")
    assert len(moved) >= 4 and moved["shift"].all()
    assert (moved["change"] > 0.5).all() and (moved["call_change"] < 0).all()
    assert not ((changes["stage"] == "stats") & (changes["direction"] == "regression") & ~changes["shift"]).any()


def test_the_site_shows_the_sweeps_history_and_stage_breakdown(real_site):
    out, page = real_site
    names = {p.stem for p in (out / "figures").glob("*.png")}
    assert names >= {
        "sweep-num_reqs-bench_sampler.NightlyBatchLatency.time_sample",
        "sweep-vocab_size-bench_sampler.NightlyVocabLatency.time_sample",
        "sweep-num_speculative_steps-bench_sampler.NightlyStepsLatency.time_sample",
        "stages-bench_stages.NightlyStages.track_stage_us",
        "history-latency-bench_sampler.NightlyBatchLatency.time_sample",
    }
    for section in ("newest", "regressions", "improvements", "shifts", "history", "sweeps", "stages"):
        assert f'<section id="{section}">' in page
    assert sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) < MAX_SITE_BYTES
    assert (out / "releases.html").is_file()


def test_self_ratios_are_not_reported_as_failures(real_site):
    _, page = real_site
    assert not re.search(r"Points that failed[^<]*track_ratio_to_mrv2", page)


def test_the_page_lists_what_changepoints_finds(real_df, real_site):
    _, page = real_site
    machine = "h200"  # the machine real_site is built for
    changes = changepoints.detect(real_df[real_df["machine"] == machine])
    for section, found, empty in (
        ("regressions", changepoints.regressions(changes), "No regression over commits."),
        ("shifts", changepoints.shifts(changes), "No stage shift over commits."),
    ):
        table = _section(page, section)
        count = re.search(r"(\d+) changes in (\d+) points", table)
        if found.empty:
            assert empty in table
        else:
            assert count and int(count[1]) == len(found), section


def test_specsample_regressions_runs_on_the_committed_results(real_df, tmp_path, capsys):
    out = tmp_path / "changes.json"
    code = main(["regressions", "--results-dir", str(RESULTS), "--json", str(out)])
    assert code in (0, 1)
    data = json.loads(out.read_text())
    assert (code == 1) == bool(data["regressions"])
    assert "newest vs previous" in capsys.readouterr().out


@pytest.mark.parametrize(
    "name, log_x", [("sweep-num_reqs", True), ("sweep-vocab_size", True), ("sweep-num_speculative_steps", False)]
)
def test_sweep_figures(real_df, name, log_x):
    spec = _spec(name)
    [(stem, fig)] = render_figure(spec, real_df)
    assert "Nightly" in stem
    assert [re.search(r"mode = (\w+)", ax.get_title())[1] for ax in _panels(fig)] == list(MODE_ORDER)
    for ax in _panels(fig):
        assert (ax.get_xscale() == "log") is log_x
        assert ax.get_xlabel().startswith(spec.x.replace("num_speculative_steps", "K"))
        assert ax.get_ylabel() == "latency (µs)"
        assert {line.get_label() for line in ax.lines} >= {"mrv2", "mrv2-pre50939", "fast"}
        assert len(ax.collections) == len(ax.lines)  # asv's CI, one band per subject
    assert "asv 99% CI" in fig.get_suptitle()


def test_placeholder_labels_stay_clear_of_lines_and_inside_the_axes(real_df):
    figures = [fig for spec in FIGURES if spec.kind == "placeholder" for _, fig in render_figure(spec, real_df)]
    assert figures
    for fig in figures:
        FigureCanvasAgg(fig).draw()
        renderer = fig.canvas.get_renderer()
        assert "labels: mrv2 vs mrv2-pre50939 latency change" in fig.get_suptitle()
        for ax in _panels(fig):
            styles = {line.get_label(): line.get_linestyle() for line in ax.lines}
            assert styles["mrv2-pre50939"] == "--" and styles["mrv2"] == "-"
            data = [line.get_xydata() for line in ax.lines]
            lowest = min(ax.transData.transform(np.vstack(data))[:, 1])
            box = ax.get_window_extent(renderer)
            for text in ax.texts:
                assert "−0%" not in text.get_text() and "-0%" not in text.get_text()
                extent = text.get_window_extent(renderer)
                assert extent.y1 < lowest, f"{text.get_text()} overlaps a line"
                assert box.x0 <= extent.x0 and extent.x1 <= box.x1, f"{text.get_text()} runs out"


def test_every_figure_has_a_title_axis_labels_and_mode_order(real_df):
    drawn = 0
    for spec in FIGURES:
        try:
            figures = render_figure(spec, real_df)
        except MissingData:
            continue
        for stem, fig in figures:
            drawn += 1
            assert fig.get_suptitle(), stem
            modes = [m[1] for ax in _panels(fig) if (m := re.search(r"mode = (\w+)", ax.get_title()))]
            row = [m for m in MODE_ORDER if m in modes]
            assert modes == row * (len(modes) // max(len(row), 1)), (stem, modes)
            for ax in _panels(fig):
                assert ax.get_xlabel() and ax.get_ylabel(), stem
            for legend in fig.legends:
                assert min(t.get_fontsize() for t in legend.get_texts()) >= 9, stem
    assert drawn >= 10


def test_alt_texts_name_the_benchmark(real_site):
    _, page = real_site
    images = re.findall(r'<img src="figures/([^"]+)\.png" alt="([^"]+)" title="([^"]+)"', page)
    assert images
    for stem, alt, benchmark in images:  # readable in the alt text, asv's name in the tooltip
        assert benchmark.startswith("bench_") and stem.endswith(benchmark), (stem, benchmark)
        assert alt.rsplit(" — ", 1)[-1] == benchmark_label(benchmark), (alt, benchmark)


def test_the_committed_site_is_what_the_build_writes(real_site):
    """dashboards/ is rebuilt and committed with every change to results/ or to the dashboard
    (``specsample dashboard``, README's main job): its pages are what the build writes now,
    and it holds the same figures."""
    out, _ = real_site
    committed = RESULTS.parent / "dashboards"
    if not (committed / "index.html").is_file():
        pytest.skip("no committed dashboards/ in this checkout")
    pages = sorted(p.relative_to(out) for p in out.rglob("*.html"))
    assert len(pages) >= 4, pages  # h200's site and h100's
    assert pages == sorted(p.relative_to(committed) for p in committed.rglob("*.html"))
    for page in pages:
        built = (out / page).read_text(encoding="utf-8")
        assert (committed / page).read_text(encoding="utf-8") == built, f"dashboards/{page} is stale: rebuild it"
    assert {p.relative_to(committed) for p in committed.rglob("*.png")} == {
        p.relative_to(out) for p in out.rglob("*.png")
    }


def test_first_run_traps_on_the_committed_site(real_site):
    """Issue 40's first-run traps (tests/test_dashboard_first_run.py checks each on known data)."""
    out, index = real_site
    releases = (out / "releases.html").read_text(encoding="utf-8")
    # the fastest release per mode, at the base point
    fastest = {r[0]: r for r in rows(_section(releases, "fastest-release"))}
    for mode in MODE_ORDER:
        assert fastest[mode][1].startswith("vllm=="), fastest[mode]
    # reference peers do not top the ranked tables
    for section in ("regressions", "improvements", "shifts"):
        ranked = _section(index, section).split('<details class="references">', 1)[0]
        assert not {r[3] for r in rows(ranked)} & {"torch-eager", "flashinfer", "flashinfer-kernel"}, section
    # readable benchmark names only
    for page in (index, releases):
        assert not ASV_NAME.search(visible_text(page))
    # what PR #50939 changed, in one sentence, where the pages discuss it
    assert PLACEHOLDER_CHANGE_TEXT in visible_text(_section(releases, "placeholder-drop"))
    assert PLACEHOLDER_CHANGE_TEXT in visible_text(_section(index, "placeholder-panel"))


def test_figures_over_r_have_a_log_x_axis(real_df):
    over_r = [s for s in FIGURES if s.x == "num_reqs" and s.kind != "heatmap"]  # a heatmap's cells are no axis
    drawn = list(drawn_figures(over_r, lambda spec: real_df))
    assert len(drawn) >= 2
    for _, stem, fig in drawn:
        for ax in _panels(fig):
            assert ax.get_xscale() == "log", stem
