"""Dashboard tests: the site built from frames the tests make (tests/synthetic_results.py says
what is planted), through an asv results directory, as ``specsample dashboard`` builds it.

The committed H200 results are checked apart, in tests/test_committed_results.py.
"""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from collections import Counter
from importlib import resources
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import synthetic_results as sr
from matplotlib.backends.backend_agg import FigureCanvasAgg
from site_pages import rows as _rows
from site_pages import section as _section

from specsample.dashboard import (
    FIGURES,
    FigureSpec,
    MissingData,
    build_dashboard,
    build_sites,
    names,
    page,
    render,
    render_figure,
    select,
    specs,
    tables,
)
from specsample.track import changepoints
from specsample.track.results import load_results

REPO = Path(__file__).resolve().parents[1]
MODE_ORDER = ("greedy", "standard", "block")
MAX_SITE_BYTES = 3 * 1024 * 1024
PROVENANCE = {
    "vllm==0.28.0": {
        "kind": "vllm-release",
        "release": "0.28.0",
        "wheel": "vllm-0.28.0-cp38-abi3.whl",
        "wheel_sha256": "ab" * 32,
        "files": {"vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py": "cd" * 32},
    },
    "mrv2": {"kind": "ours", "module": "specsample.kernels.mrv2"},
    "flashinfer-kernel": {"kind": "peer", "package": "flashinfer-python", "version": "0.7.2"},
}


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> Path:
    return sr.write_asv_results(sr.site_frame(), tmp_path_factory.mktemp("results") / "results", provenance=PROVENANCE)


@pytest.fixture(scope="module")
def df(results):
    frame, problems = load_results(results)
    assert not problems
    return frame


@pytest.fixture(scope="module")
def site(df, results, tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    index = build_dashboard(df, out, results_dir=results)
    return out, index.read_text(encoding="utf-8"), (out / "releases.html").read_text(encoding="utf-8")


def _sources(text: str) -> list[str]:
    return re.findall(r'<img src="([^"]+)"', text)


def _spec(name: str) -> FigureSpec:
    return next(s for s in FIGURES if s.name == name)


def _panels(fig) -> list:
    return [ax for ax in fig.axes if ax.get_visible() and ax.get_label() != "<colorbar>"]


def _context(frame: pd.DataFrame) -> render.Context:
    rows = select.release_rows(frame)
    return render.Context(
        changes=changepoints.detect(frame),
        release_changes=changepoints.detect(rows, "releases"),
        placeholder_change=select.placeholder_change(rows),
    )


# ---------------------------------------------------------------------------------------------
# The package
# ---------------------------------------------------------------------------------------------


def test_importing_the_dashboard_loads_no_torch_and_no_triton():
    code = (
        "import sys, specsample.dashboard, specsample.track.changepoints; "
        "print(sorted(m for m in ('torch', 'triton') if m in sys.modules))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120, check=True
    )
    assert done.stdout.strip() == "[]", done.stdout + done.stderr


def test_the_templates_are_package_data():
    templates = resources.files("specsample.dashboard") / "templates"
    for name in ("base.html", "index.html", "releases.html", "macros.html", "style.css"):
        assert (templates / name).is_file(), name
    pyproject = (REPO / "pyproject.toml").read_text()
    assert re.search(r'\[tool\.setuptools\.package-data\][^\[]*"specsample\.dashboard" = \["templates/\*"\]', pyproject)


def test_figure_specs_are_frozen_data_with_a_renderer_and_a_page():
    with pytest.raises(dataclasses.FrozenInstanceError):
        FIGURES[0].name = "other"
    assert all(s.kind in render.RENDERERS for s in FIGURES)
    assert len({s.name for s in FIGURES}) == len(FIGURES)
    assert len({s.title for s in FIGURES}) == len(FIGURES)
    sections = {section: on_page for section, _, on_page in specs.SECTIONS}
    assert {s.section for s in FIGURES} <= set(sections)
    assert set(sections.values()) == set(specs.PAGES)


# ---------------------------------------------------------------------------------------------
# The index page
# ---------------------------------------------------------------------------------------------


def test_pages_and_every_referenced_image_exist(site):
    out, index, releases = site
    for text in (index, releases):
        for src in _sources(text):
            assert not src.startswith(("/", "file:", "http")), "links must be relative"
            assert (out / src).is_file(), src
    referenced = set(_sources(index)) | set(_sources(releases))
    assert {f"figures/{p.name}" for p in (out / "figures").glob("*.png")} == referenced
    assert 'href="releases.html"' in index and 'href="index.html"' in releases
    assert sum(p.stat().st_size for p in out.rglob("*") if p.is_file()) < MAX_SITE_BYTES


def test_the_newest_vs_previous_summary_comes_first(site):
    _, index, _ = site
    assert re.findall(r'<section id="([^"]+)"', index)[:3] == ["newest", "regressions", "improvements"]
    newest = _section(index, "newest")
    # history_frame: the last commit changes nothing; its Batch benchmarks are the ones compared
    assert sr.commit_hash("commit-5")[:8] in newest
    rows = _rows(newest)
    benchmarks = {r[0] for r in rows}
    assert "Batch sweep (nightly) · latency (asv samples)" in benchmarks
    assert all(r[-2] == "0" for r in rows if r[0].startswith("Batch sweep (nightly)"))


def test_the_regressions_and_improvements_tables_rank_the_planted_changes(site):
    _, index, _ = site
    regressions = _rows(_section(index, "regressions"))
    # mrv2's +12% at commit-4, one row per point (time_sample; track_latency_us also changed)
    assert len(regressions) == 6 and {r[3] for r in regressions} == {"mrv2"}
    before, after = sr.commit_hash("commit-3")[:8], sr.commit_hash("commit-4")[:8]
    assert all(r[5] == f"{before} … {after}" for r in regressions)
    changes = [float(r[1].split("%")[0].replace("+", "")) for r in regressions]
    assert changes == sorted(changes, reverse=True) and all(10 < c < 14 for c in changes)
    assert all("latency (µs)" in r[-1] for r in regressions)
    improvements = _rows(_section(index, "improvements"))
    assert {r[3] for r in improvements} == {"fast"} and len(improvements) == 6
    assert all(r[1].startswith("−") for r in improvements)
    assert "mrv2-pre50939" not in _section(index, "regressions") + _section(index, "improvements")


def test_history_plots_mark_the_detected_steps_with_quartile_bands(df):
    [(stem, fig)] = [
        f for f in render_figure(_spec("history-latency"), df, _context(df)) if "NightlyBatchLatency" in f[0]
    ]
    labels = {t.get_text() for t in fig.legends[0].get_texts()}
    assert {"regression", "improvement", "mrv2", "fast", "mrv2-pre50939"} <= labels
    assert "band: samples' q25–q75" in fig.get_suptitle()
    for ax in _panels(fig):
        assert len(ax.collections) == 3  # one q25-q75 band per subject
        marks = [line for line in ax.lines if line.get_label() in ("regression", "improvement")]
        assert {m.get_label() for m in marks} == {"regression", "improvement"}


def test_history_y_limits_keep_small_noise_small():
    quiet = sr.history_frame(fast_change=0.0, mrv2_change=0.0)
    spec = dataclasses.replace(
        _spec("history-latency"), filter=(("metric", "time_sample"),), line="subject", facet="num_reqs"
    )
    one = quiet[(quiet["subject"] == "mrv2-pre50939") & (quiet["mode"] == "standard")]
    [(_, fig)] = render_figure(spec, one)
    for ax in _panels(fig):
        y = np.concatenate([line.get_ydata() for line in ax.lines])
        low, high = ax.get_ylim()
        median = np.median(y)
        assert low <= 0.95 * median and high >= 1.05 * median  # noise of 0.3% stays a flat line


def test_self_ratios_are_not_reported_as_failures(site, df):
    _, index, _ = site
    # history_frame records mrv2's ratio to itself as failed, as older runs did
    assert (df[(df["metric"] == "track_ratio_to_mrv2") & (df["subject"] == "mrv2")]["status"] == "failed").any()
    assert "Points that failed" not in index and "every point skipped" not in index
    broken = df.copy()
    fast_ratio = (broken["metric"] == "track_ratio_to_mrv2") & (broken["subject"] == "fast")
    broken.loc[fast_ratio[fast_ratio].index[:3], "status"] = "failed"
    notes = " ".join(select.status_notes(select.without_self_ratios(broken)))
    note = re.search(r"Points that failed \(left out of the figures\): (.*)", notes)
    assert note and "Batch sweep (nightly) · latency / mrv2's (3 of" in note[1]


def test_benchmarks_without_successful_points_are_noted(df):
    gone = df.copy()
    mask = gone["benchmark"] == "bench_sampler.QuickShapeLatency.time_sample"
    gone.loc[mask, "status"] = "failed"
    notes = " ".join(select.status_notes(gone))
    note = re.search(r"every point skipped, failed or crashed: (.*)", notes)
    assert note and f"Shape sweep (quick) · latency (asv samples) ({mask.sum()} failed)" in note[1]


def test_no_claimed_band_and_the_measured_release_change_in_the_placeholder_panel(site, df):
    _, index, _ = site
    assert "20%–36%" not in index and "PR 50939:" not in index
    panel = _section(index, "placeholder-panel")
    assert _sources(panel) and "Dotted grey line" in panel and "0.27.1 and 0.28.0" in panel
    [(_, fig)] = render_figure(_spec("placeholder"), df, _context(df))
    label = "mrv2-pre50939 × measured vLLM 0.27.1→0.28.0 change"
    change = select.placeholder_change(select.release_rows(df))
    for ax in _panels(fig):
        mode, draft = re.match(r"mode = (\w+) · draft = ([\w-]+)", ax.get_title()).groups()
        lines = {line.get_label(): line for line in ax.lines}
        measured, pre = lines[label], lines["mrv2-pre50939"]
        expected = change[
            (change["mode"] == mode) & (change["draft"] == draft) & (change["placeholder_pattern"] == "trailing")
        ].sort_values("placeholder_density")
        np.testing.assert_allclose(measured.get_ydata(), pre.get_ydata() * expected["ratio"].to_numpy())
        ratio_at_phi1 = expected["ratio"].iloc[-1]
        if mode != "greedy" and draft == "logits":  # where the placeholder fix applies
            assert ratio_at_phi1 == pytest.approx(1.22 / 1.40, abs=0.015)
            # our replica pair reproduces it: mrv2 lies on the measured line
            np.testing.assert_allclose(lines["mrv2"].get_ydata(), measured.get_ydata(), rtol=0.02)
        else:
            assert ratio_at_phi1 == pytest.approx(1.0, abs=0.015)


def test_without_release_results_the_panel_draws_no_reference(df):
    ours = df[~df["subject"].str.startswith("vllm")]
    captions = page.section_captions(
        data=ours,
        placeholder_change=select.placeholder_change(select.release_rows(ours)),
        release_rows=select.release_rows(ours),
    )
    assert "No reference drawn" in captions["placeholder-panel"]
    [(_, fig)] = render_figure(_spec("placeholder"), ours)
    assert all("measured vLLM" not in line.get_label() for ax in fig.axes for line in ax.lines)
    assert "no vLLM release pair measured" in fig.get_suptitle()


def test_the_bandwidth_caption_explains_fractions_above_one(site, df):
    _, index, _ = site
    caption = _section(index, "bandwidth")
    assert "flashinfer-kernel up to 1.30" in caption and "precomputed probabilities" in caption
    below = df.copy()
    fraction = below["metric"] == "track_bandwidth_fraction"
    below.loc[fraction, "value"] = below.loc[fraction, "value"].clip(upper=0.9)
    empty = below.iloc[0:0]
    captions = page.section_captions(data=below, placeholder_change=empty, release_rows=empty)
    assert specs.NOTHING_ABOVE_ONE in captions["bandwidth"] and "flashinfer-kernel" not in captions["bandwidth"]


def test_stage_breakdown_labels_the_planted_saving(df):
    [(_, fig)] = render_figure(_spec("stages"), df)
    panels = _panels(fig)
    assert [ax.get_title() for ax in panels] == [
        f"mode = {mode} · placeholder_density = {phi}" for phi in ("0", "0.5", "1") for mode in MODE_ORDER
    ]
    block_phi1 = panels[-1]
    stages = [t.get_text() for t in block_phi1.get_xticklabels()]
    assert stages == list(sr.STAGE_US)
    assert "−50%" in {t.get_text() for t in block_phi1.texts}  # mrv2's residual mass, planted
    assert not [t for t in panels[2].texts if "%" in t.get_text()]  # phi = 0: nothing saved
    assert {t.get_text() for t in panels[0].texts} == {"n/a"}  # greedy skips two stages


def test_heatmap_names_its_benchmark_and_has_a_symmetric_ticked_colour_bar(df):
    [(_, fig)] = render_figure(_spec("speedup-torch-eager-num_reqs-vocab_size"), df)
    assert "Shape sweep (quick) · latency (asv samples)" in fig.get_suptitle()
    assert "bench_sampler" not in fig.get_suptitle()
    FigureCanvasAgg(fig).draw()
    bar = next(ax for ax in fig.axes if ax.get_label() == "<colorbar>")
    labels = [t.get_text() for t in bar.get_yticklabels()]
    assert "1×" in labels and len(labels) >= 3
    ticks = bar.get_yticks()
    np.testing.assert_allclose(sorted(ticks), sorted(-ticks), atol=1e-9)
    cells = [float(t.get_text().rstrip("×")) for t in fig.axes[0].texts]
    assert len(cells) == 4  # 2 x 2 points; torch-eager is planted at 20x mrv2 (0.3% noise)
    np.testing.assert_allclose(cells, 20.0, rtol=0.02)


def test_every_figure_has_a_title_axis_labels_a_readable_legend_and_mode_order(df):
    context = _context(df)
    drawn = 0
    for spec in FIGURES:
        frame = select.release_rows(df) if spec.section == "release-latency" else df
        try:
            figures = render_figure(spec, frame, context)
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


def test_skip_notes_one_per_spec_each_reason_once(site):
    _, index, releases = site
    notes = re.findall(r'<p class="note">Skipped “([^”]+)”: (.*?)</p>', index + releases)
    assert notes
    assert max(Counter(title for title, _ in notes).values()) == 1
    for _, text in notes:
        reasons = [r.split(" (")[0] for r in text.rstrip(".").split("; ")]
        assert len(reasons) == len(set(reasons)), text


def test_alt_texts_name_the_benchmark(site):
    _, index, releases = site
    images = re.findall(r'<img src="figures/([^"]+)\.png" alt="([^"]+)" title="([^"]+)"', index + releases)
    assert images
    for stem, alt, benchmark in images:  # readable in the alt text, asv's name in the tooltip
        assert benchmark.startswith("bench_") and stem.endswith(benchmark), (stem, benchmark)
        assert alt.rsplit(" — ", 1)[-1] == names.benchmark_label(benchmark), (alt, benchmark)


def test_environment_panel(site):
    _, index, _ = site
    environment = _section(index, "environment")
    for header in ("gpu", "driver", "cuda", "torch", "triton"):
        assert f"<th>{header}</th>" in environment
    assert "NVIDIA H200" in environment


def test_the_index_shows_which_code_each_subject_was(site):
    """The main page's provenance: ours by module, a peer by its package's version (which
    FlashInfer the Peers sweep ran), each subject from the newest commit that recorded it."""
    _, index, _ = site
    provenance = _section(index, "provenance")
    rows = {row[0]: row for row in _rows(provenance)}
    assert rows["flashinfer-kernel"][2:4] == ["peer", "flashinfer-python 0.7.2"]
    assert rows["mrv2"][2:4] == ["ours", "specsample.kernels.mrv2"]
    assert all(re.fullmatch(r"[0-9a-f]{8}", row[1]) for row in rows.values())
    assert 'href="#provenance"' in index


def test_missing_data_skips_figures_with_notes_not_crashes(df, tmp_path):
    quick_only = df[df["tier"] == "quick"]
    index = build_dashboard(quick_only, tmp_path / "k")
    text = index.read_text(encoding="utf-8")
    assert "Skipped" in _section(text, "placeholder-panel") and "Skipped" in _section(text, "bandwidth")
    assert "No regression over commits." in _section(text, "regressions")
    for src in _sources(text):
        assert (tmp_path / "k" / src).is_file()
    empty = build_dashboard(df.iloc[0:0], tmp_path / "empty").read_text(encoding="utf-8")
    assert 'id="placeholder-panel"' in empty and _sources(empty) == []
    releases = (tmp_path / "empty" / "releases.html").read_text(encoding="utf-8")
    assert "No vLLM release results" in releases and _sources(releases) == []


def test_a_cpu_interpreter_machine_is_shown_only_when_named(tmp_path):
    """A CPU smoke run is newer than the GPU results, yet the default page shows the GPU machine;
    with only CPU-interpreter results the build asks for --machine; a named machine is drawn."""
    from specsample.schema import CPU_INTERPRETER_MACHINE

    gpu = sr.peers_frame()
    cpu = gpu.assign(
        machine=CPU_INTERPRETER_MACHINE, tier="smoke", gpu=None, date=gpu["date"].max() + pd.Timedelta(days=1)
    )
    both = pd.concat([gpu, cpu], ignore_index=True)
    assert select.interpreter_machines(both) == {CPU_INTERPRETER_MACHINE}
    assert select.default_machine(both) == sr.MACHINE
    # a second GPU's first run, newer than every result: the machine with the longer history stays
    history = pd.concat([gpu, sr.peers_frame(commit_label="earlier", date="2026-11-01")], ignore_index=True)
    fresh = gpu.assign(machine="h100", date=cpu["date"].max())
    assert select.default_machine(pd.concat([history, fresh], ignore_index=True)) == sr.MACHINE
    assert select.default_machine(pd.concat([gpu, fresh], ignore_index=True)) == "h100"  # a tie: the newest
    text = build_dashboard(both, tmp_path / "both").read_text(encoding="utf-8")
    assert f"other machines: {CPU_INTERPRETER_MACHINE}" in text
    with pytest.raises(ValueError, match="only CPU-interpreter results.*--machine"):
        build_dashboard(cpu, tmp_path / "cpu")
    with pytest.raises(ValueError, match="no results for machine 'nope'"):
        build_dashboard(both, tmp_path / "nope", machine="nope")
    named = build_dashboard(both, tmp_path / "named", machine=CPU_INTERPRETER_MACHINE).read_text(encoding="utf-8")
    assert f"other machines: {sr.MACHINE}" in named


def test_a_rebuild_leaves_no_stale_figure(tmp_path):
    out = tmp_path / "r"
    peers = sr.peers_frame()
    build_dashboard(peers, out)
    heatmap = "speedup-torch-eager-num_reqs-vocab_size-bench_sampler.QuickShapeLatency.time_sample.png"
    assert (out / "figures" / heatmap).is_file()
    (out / "figures" / "stale.png").write_bytes(b"")
    build_dashboard(peers[peers["tier"] == "nightly"], out)
    assert not (out / "figures" / "stale.png").exists() and not (out / "figures" / heatmap).exists()


def test_change_labels_round_before_the_sign():
    label = lambda ratio: render.format_change(render.percent_change(ratio))  # noqa: E731
    assert [label(r) for r in (0.998, 1.004, 0.73, 1.06)] == ["0%", "0%", "−27%", "+6%"]
    assert tables._pct(-0.0004) == "0.0%" and tables._pct(-0.049) == "−4.9%"


def test_render_figure_raises_missing_data_for_absent_columns(df):
    spec = FigureSpec(name="x", title="t", kind="line", x="no_such_axis", y="value", unit="u")
    with pytest.raises(MissingData, match="no_such_axis"):
        render_figure(spec, df)


# ---------------------------------------------------------------------------------------------
# The releases page
# ---------------------------------------------------------------------------------------------


def test_the_releases_page_tabulates_the_placeholder_change(site):
    _, _, releases = site
    rows = {(r[0], r[1]): r for r in _rows(_section(releases, "placeholder-drop"))}
    assert set(rows) == {(m, d) for m in MODE_ORDER for d in ("logits", "one-hot")}
    # columns: mode, draft, pattern, the change at each density (phi = 0 first, phi = 1 last),
    # then phi=1 / phi=0 before and after
    for mode in ("standard", "block"):
        change = float(rows[(mode, "logits")][-3].replace("−", "-").rstrip("%"))
        assert change == pytest.approx(100 * (1.22 / 1.40 - 1), abs=1.5)
        assert abs(float(rows[(mode, "logits")][3].replace("−", "-").rstrip("%"))) < 1.5  # phi = 0
    assert abs(float(rows[("greedy", "logits")][-3].replace("−", "-").rstrip("%"))) < 1.5
    section = _section(releases, "placeholder-drop")
    for mode in ("standard", "block"):  # planted: -7.5% at phi=0.5
        change = float(rows[(mode, "logits")][4].replace("−", "-").rstrip("%"))
        assert change == pytest.approx(-7.5, abs=1.5)
    # beyond the noise floor: phi=0.5 and phi=1 of standard and block with draft logits, only
    assert section.count('class="improvement"') == 4
    assert 'class="regression"' not in section


def test_the_releases_page_marks_faults_and_semantics(site):
    _, _, releases = site
    section = _section(releases, "release-outcomes")
    summary, faults = section.split("<h3>", 1)
    outcomes = {r[0]: r for r in _rows(summary)}
    assert list(outcomes) == list(sr.RELEASES)  # version order
    columns = [
        "release",
        "points",
        "ok",
        "failed",
        "skipped",
        "crashed",
        "same draws",
        "same semantics, other stream",
        "violates placeholder semantics",
    ]
    crashed, violates, other = (
        columns.index(c) for c in ("crashed", "violates placeholder semantics", "same semantics, other stream")
    )
    assert outcomes["0.29.0"][crashed] == "1" and outcomes["0.26.0"][violates] == "1"
    assert int(outcomes["0.26.0"][other]) > 0 and outcomes["0.27.1"][crashed] == "0"
    assert [(r[0], r[3]) for r in _rows(faults)] == [("0.26.0", "ok"), ("0.29.0", "crashed")]
    assert "worker died: signal 11" in faults


def test_release_figures_mark_crashes_semantics_and_the_pr_release(df):
    rows = select.release_rows(df)
    [(stem, fig)] = render_figure(_spec("releases-density-trailing"), rows, _context(df))
    assert "ReleasesDensityLatency" in stem
    panels = {ax.get_title(): ax for ax in _panels(fig)}
    block = panels["mode = block · draft = logits"]
    assert [t.get_text() for t in block.get_xticklabels()] == list(sr.RELEASES)
    assert any(line.get_marker() == "x" for line in block.lines)  # 0.29.0 crashed at phi=1
    spans = [p for p in block.patches if p.get_width() > 0]
    assert [(p.get_x(), p.get_x() + p.get_width()) for p in spans] == [(2.0, 3.0)]  # 0.27.1..0.28.0
    assert any(line.get_label() == "improvement" for line in block.lines)
    standard_one_hot = panels["mode = standard · draft = one-hot"]
    assert any(line.get_markersize() >= 10 for line in standard_one_hot.lines)  # violates: red ring
    labels = {t.get_text() for t in fig.legends[0].get_texts()}
    assert {
        "phi = 0",
        "phi = 1",
        "crashed / failed",
        "violates placeholder semantics",
        "same semantics, other stream",
    } <= labels


def test_the_releases_page_compares_the_newest_release_with_ours(site):
    _, _, releases = site
    section = _section(releases, "newest-release")
    assert "vllm==0.29.0 / mrv2" in section and "vllm==0.29.0 / fast" in section
    for row in _rows(section):
        assert float(row[4]) == pytest.approx(1.0, abs=0.02)  # 0.29.0 has the fix, as mrv2
        assert float(row[6]) == pytest.approx(1 / 0.6, abs=0.03)  # fast is 0.6x


def test_the_releases_page_lists_changes_between_releases_and_provenance(site):
    out, _, releases = site
    changes = _section(releases, "release-regressions")
    assert "No regression between releases." in changes
    rows = _rows(changes)
    assert rows and all(r[5] == "0.27.1 … 0.28.0" for r in rows)
    assert _sources(_section(releases, "release-latency"))
    provenance = _section(releases, "provenance")
    assert "vllm==0.28.0" in provenance and "vllm-0.28.0-cp38-abi3.whl" in provenance
    assert "rejection_sampler_utils.py" in provenance and "cd" * 6 in provenance


def test_replica_fidelity_is_each_point_against_the_replicated_release(df):
    """mrv2 has the placeholder fix, as 0.29.0 has: every point within 3% (the planted noise is
    0.3%); the pre-#50939 replica is slower at the placeholder-heavy points."""
    table = select.replica_fidelity(df, "vllm==0.29.0", subjects=("mrv2", "mrv2-pre50939"))
    assert set(table["tier"]) == {"releases"} and set(table["sweep"]) == {"Density", "Shape"}
    mrv2 = table[table["subject"] == "mrv2"]
    assert (mrv2["within"] == mrv2["points"]).all() and (mrv2["points"] > 0).all()
    assert mrv2["geomean"].between(0.99, 1.01).all()
    density = table[(table["subject"] == "mrv2-pre50939") & (table["sweep"] == "Density")].iloc[0]
    assert density["within"] < density["points"] and density["max"] > 1.1
    assert "phi=1" in density["worst"]
    assert select.replica_fidelity(df, "vllm==9.9.9").empty


def test_the_releases_page_says_when_the_replicated_release_was_not_measured(site):
    _, _, releases = site
    assert "was not measured beside mrv2 or mrv2-vllm" in _section(releases, "fidelity")


def test_the_releases_page_names_the_tiers_releases_it_has_no_results_for(site):
    """A release of specsample.tiers.MRV2_RELEASES without results (one just added to the tiers,
    say) is named on the releases page, with the command that measures it."""
    from specsample.tiers import MRV2_RELEASES

    _, _, releases = site
    unmeasured = [r for r in MRV2_RELEASES if r not in sr.RELEASES]
    assert unmeasured
    names = ", ".join(f"vllm=={r}" for r in unmeasured)
    assert f"Not measured here yet: {names} (in specsample.tiers.MRV2_RELEASES)" in releases
    assert f"specsample backfill {' '.join('vllm==' + r for r in unmeasured)}" in releases


def test_every_gpu_machine_gets_its_own_linked_site(tmp_path):
    """build_sites (README's main job): the default machine's site at the top, each other GPU
    machine's in a folder of its name, every page linking the others' (index to index, releases
    to releases); a CPU-interpreter machine gets none; with only one, build_dashboard's error."""
    from specsample.schema import CPU_INTERPRETER_MACHINE

    history = pd.concat(
        [sr.peers_frame(), sr.peers_frame(commit_label="earlier", date="2026-11-01")], ignore_index=True
    )
    other = sr.peers_frame().assign(machine="h100")
    cpu = sr.peers_frame().assign(machine=CPU_INTERPRETER_MACHINE, tier="smoke", gpu=None)
    out = tmp_path / "site"
    indexes = build_sites(pd.concat([history, other, cpu], ignore_index=True), out)
    assert indexes == [out / "index.html", out / "h100" / "index.html"]
    assert sorted(p.relative_to(out).as_posix() for p in out.rglob("*.html")) == [
        "h100/index.html",
        "h100/releases.html",
        "index.html",
        "releases.html",
    ]
    top, sub = (i.read_text(encoding="utf-8") for i in indexes)
    assert (
        f"<h1>specsample benchmarks — {sr.MACHINE}</h1>" in top
        and 'other machines: <a href="h100/index.html">h100</a>' in top
    )
    assert (
        "<h1>specsample benchmarks — h100</h1>" in sub
        and f'other machines: <a href="../index.html">{sr.MACHINE}</a>' in sub
    )
    assert 'other machines: <a href="h100/releases.html">h100</a>' in (out / "releases.html").read_text(
        encoding="utf-8"
    )
    assert f'<a href="../releases.html">{sr.MACHINE}</a>' in (out / "h100" / "releases.html").read_text(
        encoding="utf-8"
    )
    assert (out / "h100" / "figures").is_dir() and CPU_INTERPRETER_MACHINE not in top
    with pytest.raises(ValueError, match="only CPU-interpreter results.*--machine"):
        build_sites(cpu, tmp_path / "cpu")
