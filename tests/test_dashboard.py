"""Dashboard tests: the static site built from the CPU fixture, and missing data."""

import dataclasses
import re
from pathlib import Path

import pytest

from specsample import dashboard
from specsample.dashboard import FIGURES, FigureSpec, MissingData, build_dashboard, render_figure
from specsample.results import load_asv_regressions, load_results

FIXTURES = Path(__file__).parent / "fixtures"
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
    }
    for section in ("history", "speedup", "bandwidth", "regressions", "environment"):
        assert f'id="{section}"' in page
    # flashinfer only ran one QuickGrid point: its heatmaps are skipped with a note
    assert "Skipped “Speedup of mrv2 over flashinfer”" in _section(page, "speedup")


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
        assert ax.get_xlabel() and ax.get_ylabel() == "µs"
    assert fig.get_suptitle()


def test_figure_specs_are_frozen_data():
    spec = FIGURES[0]
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.name = "other"
    assert all(s.kind in dashboard._RENDERERS for s in FIGURES)
    assert len({s.name for s in FIGURES}) == len(FIGURES)


def test_render_figure_raises_missing_data_for_absent_columns(df):
    spec = FigureSpec(name="x", title="t", kind="line", x="no_such_axis", y="value", unit="u")
    with pytest.raises(MissingData, match="no_such_axis"):
        render_figure(spec, df)
