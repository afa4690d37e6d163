"""Dashboard tests: the static site built from the CPU fixture, and missing data."""

import dataclasses
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
from matplotlib.backends.backend_agg import FigureCanvasAgg

from specsample import dashboard
from specsample.dashboard import FIGURES, FigureSpec, MissingData, build_dashboard, render_figure
from specsample.track.results import load_asv_regressions, load_results

FIXTURES = Path(__file__).parent / "fixtures"
RESULTS = Path(__file__).resolve().parents[1] / "results"  # the committed H200 results
MODE_ORDER = ("greedy", "standard", "block")
MAX_SITE_BYTES = 3 * 1024 * 1024


@pytest.fixture(scope="module")
def df():
    return load_results(FIXTURES / "asv_results")[0]


@pytest.fixture(scope="module")
def site(df, tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    index = build_dashboard(df, out, regressions=FIXTURES / "asv_html")
    return out, index, index.read_text(encoding="utf-8")


def _sources(page: str) -> list[str]:
    return re.findall(r'<img src="([^"]+)"', page)


def _section(page: str, section_id: str) -> str:
    match = re.search(rf'<section id="{section_id}">(.*?)</section>', page, re.S)
    assert match, f"no section {section_id}"
    return match.group(1)


def test_index_and_every_referenced_image_exist(site):
    out, index, page = site
    assert index == out / "index.html" and index.exists()
    sources = _sources(page)
    assert len(sources) >= 6
    for src in sources:
        assert not src.startswith(("/", "file:", "http")), "links must be relative"
        assert (out / src).is_file(), src
    # and no PNG is left unreferenced
    assert {f"figures/{p.name}" for p in (out / "figures").glob("*.png")} == set(sources)


def test_placeholder_panel_has_a_figure_and_the_band_note(site):
    _, _, page = site
    panel = _section(page, "placeholder-panel")
    assert _sources(panel) and "20%–36%" in panel


def test_expected_figures_and_sections(site):
    out, _, page = site
    names = {p.stem for p in (out / "figures").glob("*.png")}
    assert names >= {
        "history-latency-bench_sampler.NightlyBatchLatency.time_sample",
        "history-latency-bench_sampler.QuickShapeLatency.time_sample",
        "history-stage-bench_stages.NightlyStages.track_stage_us",
        "placeholder-bench_sampler.NightlyBatchLatency.time_sample",
        "bandwidth-bench_sampler.NightlyBatchDerived.track_bandwidth_fraction",
        "speedup-torch-eager-num_reqs-vocab_size-bench_sampler.NightlyBatchLatency.time_sample",
        "speedup-mrv2-pre50939-K-phi-bench_sampler.NightlyBatchLatency.time_sample",
        "sweep-num_reqs-bench_sampler.NightlyBatchLatency.time_sample",
        "stages-bench_stages.NightlyStages.track_stage_us",
    }
    for section in ("history", "stages", "sweeps", "speedup", "bandwidth", "regressions",
                    "environment"):
        assert f'id="{section}"' in page
    # flashinfer only ran one QuickGrid point: both its heatmaps are skipped, each with a note
    speedup = _section(page, "speedup")
    assert "Skipped “Speedup of mrv2 over flashinfer by num_reqs × vocab_size”" in speedup
    assert "Skipped “Speedup of mrv2 over flashinfer by K × phi”" in speedup


def test_regressions_table_and_environment_panel(site):
    _, _, page = site
    regressions = _section(page, "regressions")
    assert "<table>" in regressions and "bench_stages.NightlyStages.track_stage_us" in regressions
    assert "µs" in regressions  # values shown with units, not raw seconds
    environment = _section(page, "environment")
    for header in ("gpu", "driver", "cuda", "torch", "triton"):
        assert f"<th>{header}</th>" in environment
    assert "575.51.03" in environment and "570.124.06" in environment


def test_site_is_small(site):
    out, _, _ = site
    total = sum(p.stat().st_size for p in out.rglob("*") if p.is_file())
    assert total < MAX_SITE_BYTES


def test_missing_data_skips_figures_with_notes_not_crashes(df, tmp_path):
    quick_only = df[df.tier == "quick"]  # no sweep, no pre-PR variant, no bandwidth, no stages
    index = build_dashboard(quick_only, tmp_path / "k", regressions=None)
    page = index.read_text(encoding="utf-8")
    assert "Skipped" in _section(page, "placeholder-panel")
    assert "Skipped" in _section(page, "bandwidth")
    assert "No asv regressions given" in page
    for src in _sources(page):
        assert (tmp_path / "k" / src).is_file()


def test_empty_frame_still_builds(df, tmp_path):
    index = build_dashboard(df.iloc[0:0], tmp_path / "empty")
    page = index.read_text(encoding="utf-8")
    assert 'id="placeholder-panel"' in page and _sources(page) == []


def test_regressions_frame_accepted_directly(df, tmp_path):
    steps, _ = load_asv_regressions(FIXTURES / "asv_html")
    spec = next(s for s in FIGURES if s.name == "history-latency")
    figures = render_figure(spec, df[df.tier == "quick"], regressions=steps)
    assert [name for name, _ in figures] == [
        "history-latency-bench_sampler.QuickShapeLatency.time_sample"]
    fig = figures[0][1]
    labels = {t.get_text() for t in fig.legends[0].get_texts()}
    assert "asv step" in labels
    for ax in fig.axes:
        assert ax.get_xlabel() and ax.get_ylabel() == "latency (µs)"
    assert fig.get_suptitle()


def test_figure_specs_are_frozen_data():
    spec = FIGURES[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.name = "other"
    assert all(s.kind in dashboard._RENDERERS for s in FIGURES)
    assert len({s.name for s in FIGURES}) == len(FIGURES)
    # titles tell the figures apart (the two heatmaps of one baseline differ by their axes)
    assert len({s.title for s in FIGURES}) == len(FIGURES)


def test_render_figure_raises_missing_data_for_absent_columns(df):
    spec = FigureSpec(name="x", title="t", kind="line", x="no_such_axis", y="value", unit="u")
    with pytest.raises(MissingData, match="no_such_axis"):
        render_figure(spec, df)


# ---------------------------------------------------------------------------------------------
# The committed H200 results (what ``python -m specsample dashboard`` builds dashboards/ from)
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def real_df():
    if not (RESULTS / "benchmarks.json").is_file():
        pytest.skip("no committed results/ in this checkout")
    return load_results(RESULTS)[0]


@pytest.fixture(scope="module")
def real_site(real_df, tmp_path_factory):
    out = tmp_path_factory.mktemp("real") / "site"
    index = build_dashboard(real_df, out)
    return out, index.read_text(encoding="utf-8")


def _spec(name: str) -> FigureSpec:
    return next(s for s in FIGURES if s.name == name)


def _panels(fig) -> list:
    return [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]


def _mode_titles(fig) -> list[str]:
    modes = []
    for ax in _panels(fig):
        match = re.search(r"mode = (\w+)", ax.get_title())
        if match:
            modes.append(match.group(1))
    return modes


def _drawn(fig):
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def test_real_site_shows_the_sweeps_and_the_stage_breakdown(real_site):
    out, page = real_site
    names = {p.stem for p in (out / "figures").glob("*.png")}
    assert names >= {
        "sweep-num_reqs-bench_sampler.NightlyBatchLatency.time_sample",
        "sweep-vocab_size-bench_sampler.NightlyVocabLatency.time_sample",
        "sweep-K-bench_sampler.NightlyStepsLatency.time_sample",
        "stages-bench_stages.NightlyStages.track_stage_us",
    }
    assert _sources(_section(page, "sweeps")) and _sources(_section(page, "stages"))
    assert sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) < MAX_SITE_BYTES


@pytest.mark.parametrize("name, log_x", [("sweep-num_reqs", True), ("sweep-vocab_size", True),
                                         ("sweep-K", False)])
def test_sweep_figures(real_df, name, log_x):
    spec = _spec(name)
    [(stem, fig)] = render_figure(spec, real_df)
    assert spec.x in stem and "Nightly" in stem
    assert _mode_titles(fig) == list(MODE_ORDER)
    for ax in _panels(fig):
        assert (ax.get_xscale() == "log") is log_x
        assert ax.get_xlabel().startswith(spec.x) and ax.get_ylabel() == "latency (µs)"
        assert {line.get_label() for line in ax.lines} == {"mrv2", "mrv2-pre50939", "fast"}
        assert len(ax.collections) == 3  # asv's CI, one band per variant
    assert "asv 99% CI" in fig.get_suptitle() and stem.split("-", 2)[2] in fig.get_suptitle()


def test_stage_breakdown_shows_where_the_saving_comes_from(real_df):
    [(_, fig)] = render_figure(_spec("stages"), real_df)
    panels = _panels(fig)
    assert [ax.get_title() for ax in panels] == [
        f"mode = {mode} · phi = {phi}" for phi in ("0", "0.5", "1") for mode in MODE_ORDER]
    block_phi1 = panels[-1]
    stages = [t.get_text() for t in block_phi1.get_xticklabels()]
    assert stages == ["stats", "cum_log_p", "residual_mass", "rejection", "resample", "insert"]
    heights = {c.get_label(): dict(zip(stages, (p.get_height() for p in c.patches)))
               for c in block_phi1.containers}
    mrv2, pre = heights["mrv2"], heights["mrv2-pre50939"]
    assert mrv2["residual_mass"] < 0.5 * pre["residual_mass"]
    assert mrv2["resample"] < 0.9 * pre["resample"]
    assert abs(mrv2["stats"] / pre["stats"] - 1) < 0.02  # stats does not change
    assert "−89%" in {t.get_text() for t in block_phi1.texts}
    # at phi = 0 there are no placeholders and nothing to save: no change labels
    assert not [t for t in panels[2].texts if "%" in t.get_text()]


def test_placeholder_labels_stay_clear_of_lines_and_inside_the_axes(real_df):
    figures = [fig for spec in FIGURES if spec.kind == "placeholder"
               for _, fig in render_figure(spec, real_df)]
    assert len(figures) >= 4
    for fig in figures:
        renderer = _drawn(fig)
        assert "labels: mrv2 vs mrv2-pre50939 latency change" in fig.get_suptitle()
        assert all(t.get_fontsize() >= 9 for t in fig.legends[0].get_texts())
        for ax in _panels(fig):
            assert ax.get_ylabel() == "latency (µs)"
            styles = {line.get_label(): line.get_linestyle() for line in ax.lines}
            assert styles["mrv2-pre50939"] == "--" and styles["mrv2"] == "-"
            data = [line.get_xydata() for line in ax.lines if line.get_label() in styles]
            data += [path.vertices for c in ax.collections for path in c.get_paths()]
            lowest = min(ax.transData.transform(np.vstack(data))[:, 1])
            box = ax.get_window_extent(renderer)
            for text in ax.texts:
                assert "−0%" not in text.get_text() and "-0%" not in text.get_text()
                extent = text.get_window_extent(renderer)
                assert extent.y1 < lowest, f"{text.get_text()} overlaps a line or the band"
                assert box.x0 <= extent.x0 and extent.x1 <= box.x1, f"{text.get_text()} runs out"


def test_change_labels_round_before_the_sign():
    label = lambda ratio: dashboard._format_change(dashboard._percent_change(ratio))  # noqa: E731
    assert [label(r) for r in (0.998, 1.004, 0.73, 1.06)] == ["0%", "0%", "−27%", "+6%"]


def test_heatmap_names_its_benchmark_and_has_a_symmetric_ticked_colour_bar(df):
    spec = _spec("speedup-torch-eager-num_reqs-vocab_size")
    [(stem, fig)] = render_figure(spec, df)
    assert "bench_sampler.NightlyBatchLatency.time_sample" in fig.get_suptitle()
    renderer = _drawn(fig)
    bar = next(ax for ax in fig.axes if ax.get_label() == "<colorbar>")
    labels = [t.get_text() for t in bar.get_yticklabels()]
    assert "1×" in labels and len(labels) >= 3
    ticks = bar.get_yticks()
    np.testing.assert_allclose(sorted(ticks), sorted(-ticks), atol=1e-9)  # symmetric log ratio
    low, high = bar.get_ylim()
    assert low == pytest.approx(-high)
    whole = fig.bbox
    for text in (bar.yaxis.label, fig._suptitle):
        extent = text.get_window_extent(renderer)
        assert whole.x0 <= extent.x0 and extent.x1 <= whole.x1 and extent.y1 <= whole.y1, text


def test_every_figure_has_a_title_axis_labels_a_readable_legend_and_mode_order(df, real_df):
    for frame in (df, real_df):
        for spec in FIGURES:
            try:
                figures = render_figure(spec, frame)
            except MissingData:
                continue
            for stem, fig in figures:
                assert fig.get_suptitle(), stem
                modes = _mode_titles(fig)  # greedy, standard, block in every figure
                row = [m for m in MODE_ORDER if m in modes]  # a grid repeats it per row
                assert modes == row * (len(modes) // max(len(row), 1)), (stem, modes)
                for ax in _panels(fig):
                    assert ax.get_xlabel() and ax.get_ylabel(), stem
                    assert "(" in ax.get_ylabel() or "fraction" in ax.get_ylabel(), stem
                for legend in fig.legends:
                    assert min(t.get_fontsize() for t in legend.get_texts()) >= 9, stem


def test_skip_notes_one_per_spec_each_reason_once(site, real_site):
    for page in (site[2], real_site[1]):
        notes = re.findall(r'<p class="note">Skipped “([^”]+)”: (.*?)</p>', page)
        assert notes
        titles = Counter(title for title, _ in notes)
        assert max(titles.values()) == 1, titles
        for _, text in notes:
            reasons = [r.split(" (")[0] for r in text.rstrip(".").split("; ")]
            assert len(reasons) == len(set(reasons)), text
    history = _section(real_site[1], "history")
    assert history.count("fewer than two commits") <= 2  # at most one note per spec, not per benchmark
    assert _sources(history)  # the committed results span several commits: history is drawn


def test_benchmarks_without_successful_points_are_noted(df, tmp_path, site):
    assert "bench_sampler.NightlyBatchDerived.track_bandwidth_fraction (30 of 720)" in site[2]
    gone = df.copy()
    mask = gone["benchmark"] == "bench_sampler.QuickShapeLatency.time_sample"
    gone.loc[mask, "status"] = "failed"
    page = build_dashboard(gone, tmp_path / "s", regressions=None).read_text(encoding="utf-8")
    note = re.search(r"every point skipped or failed: ([^<]*)", page)
    assert note and f"bench_sampler.QuickShapeLatency.time_sample ({mask.sum()} failed)" in note[1]


def test_asv_site_linked_only_when_it_exists(df, tmp_path):
    empty = df.iloc[0:0]
    page = build_dashboard(empty, tmp_path / "a" / "site").read_text(encoding="utf-8")
    assert "../html/index.html" not in page and "specsample nightly" in page
    (tmp_path / "b" / "html").mkdir(parents=True)
    (tmp_path / "b" / "html" / "index.html").write_text("<html></html>")
    page = build_dashboard(empty, tmp_path / "b" / "site").read_text(encoding="utf-8")
    assert '<a href="../html/index.html">asv site</a>' in page


def test_alt_texts_name_the_benchmark(site, real_site):
    for page in (site[2], real_site[1]):
        images = re.findall(r'<img src="figures/([^"]+)\.png" alt="([^"]+)"', page)
        assert images
        for stem, alt in images:
            benchmark = alt.rsplit(" — ", 1)[-1]
            assert benchmark.startswith("bench_") and stem.endswith(benchmark), (stem, alt)
