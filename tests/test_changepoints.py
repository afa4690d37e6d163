"""Change points (specsample.track.changepoints) and ``specsample regressions``, on frames and
asv results directories the tests build (tests/synthetic_results.py says what is planted)."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest
import synthetic_results as sr

from specsample.cli import build_parser, main
from specsample.schema import BANDWIDTH_METRIC, RATIO_METRIC
from specsample.track import changepoints as cp
from specsample.track import series
from specsample.track.results import load_results, to_frame

L = 100e-6  # seconds


def _series(
    levels,
    *,
    metric="time_sample",
    subject="mrv2",
    mode="standard",
    num_reqs=128,
    iqr=None,
    seed=0,
    sweep="Batch",
    stage=None,
) -> list[dict]:
    """One point's rows over ``len(levels)`` commits, one a day; ``levels`` are latencies in
    seconds (a stage's time with ``stage``); ``iqr`` replaces the samples' quartiles by
    value * (1 -/+ iqr / 2)."""
    rng = np.random.default_rng(seed)
    rows = []
    for c, level in enumerate(levels):
        row = sr.row(
            commit=sr.commit_hash(f"c{c}"),
            tier="nightly",
            sweep=sweep,
            metric=metric,
            date=pd.Timestamp("2026-11-01", tz="UTC") + pd.Timedelta(days=c),
            point={"subject": subject, "mode": mode, "num_reqs": num_reqs, **({"stage": stage} if stage else {})},
            seconds=level,
            rng=rng,
        )
        if iqr is not None:
            row["q25"], row["q75"] = row["value"] * (1 - iqr / 2), row["value"] * (1 + iqr / 2)
        rows.append(row)
    return rows


def _commit(c: int) -> str:
    return sr.commit_hash(f"c{c}")


@pytest.fixture(scope="module")
def history():
    return sr.history_frame()


@pytest.fixture(scope="module")
def history_changes(history):
    return cp.detect(history)


# ---------------------------------------------------------------------------------------------
# Over commits
# ---------------------------------------------------------------------------------------------


def test_the_planted_regression_and_improvement_are_found_at_their_commits(history_changes):
    reg, imp = cp.regressions(history_changes), cp.improvements(history_changes)
    # every mrv2 latency point (3 modes x 2 batch sizes, 2 latency metrics) and nothing else
    assert set(reg["subject"]) == {"mrv2"} and len(reg) == 12
    assert set(reg["before"]) == {sr.commit_hash("commit-3")}
    assert set(reg["after"]) == {sr.commit_hash("commit-4")}
    assert set(imp["subject"]) == {"fast"} and len(imp) == 12
    assert set(imp["before"]) == {sr.commit_hash("commit-2")}
    assert set(imp["after"]) == {sr.commit_hash("commit-3")}
    # the planted +12% and -10%, each within its interval, and the run-to-run noise (0.3%)
    # well inside the 5% floor
    np.testing.assert_allclose(reg["change"], 0.12, atol=0.015)
    np.testing.assert_allclose(imp["change"], -0.10, atol=0.015)
    for frame in (reg, imp):
        assert (frame["change_lo"] <= frame["change"]).all()
        assert (frame["change"] <= frame["change_hi"]).all()
        assert (frame["threshold"] >= cp.NOISE_FLOOR["commits"]).all()
    # asv may split a level in two where the runs' drift exceeds the points' CIs
    assert reg["n_before"].between(1, 4).all() and reg["n_after"].between(1, 2).all()
    assert (reg["before_position"] == 3).all() and (reg["after_position"] == 4).all()
    assert set(history_changes["dimension"]) == {"commits"}


def test_changes_are_ranked_by_effect_regressions_first(history_changes):
    assert list(history_changes["direction"]) == sorted(history_changes["direction"], key=cp.DIRECTIONS.index)
    for part in (cp.regressions(history_changes), cp.improvements(history_changes)):
        assert part["effect"].is_monotonic_decreasing
        np.testing.assert_allclose(part["effect"], part["change"].abs())


def test_unchanged_series_and_changes_under_the_noise_floor_are_not_flagged():
    # mrv2-pre50939 never changes in the history; 3% steps are under the 5% floor
    quiet = sr.history_frame(fast_change=-0.03, mrv2_change=0.03)
    assert cp.detect(quiet).empty
    changes = cp.detect(sr.history_frame())
    assert "mrv2-pre50939" not in set(changes["subject"])


def test_the_absolute_floor_keeps_small_points_quiet():
    # +8% of 8 us is 0.64 us, under the 1 us drift between runs; +8% of 100 us is not
    rows = _series([8e-6] * 6 + [8.64e-6] * 6, num_reqs=1)
    rows += _series([L] * 6 + [1.08 * L] * 6, num_reqs=512)
    changes = cp.detect(to_frame(rows))
    assert list(changes["num_reqs"]) == [512]
    assert changes["threshold"].iloc[0] == pytest.approx(cp.NOISE_FLOOR["commits"])


def test_the_absolute_floor_applies_to_every_latency_metric():
    # the 8 us point moves by 0.64 us in both its latency metrics: quiet
    rows = _series([8e-6] * 6 + [8.64e-6] * 6, num_reqs=1)
    rows += _series([8e-6] * 6 + [8.64e-6] * 6, num_reqs=1, metric="track_latency_us")
    points = to_frame(rows)
    assert cp.detect(points).empty
    newest = cp.newest_vs_previous(points)
    assert set(newest["metric"]) == {"time_sample", "track_latency_us"}
    assert (newest["threshold"] > 0.12).all()  # 1 us of an 8 us point


def test_a_bandwidth_fraction_is_not_a_series_of_its_own():
    # the latency does not change; the copy bandwidth measured at the start of the later runs
    # is 6% higher, so the fraction falls 6% (the committed H200 history moved up to 4.4%)
    rows = _series([L] * 12)
    fraction = _series([L] * 12, metric=BANDWIDTH_METRIC, seed=1)
    for c, row in enumerate(fraction):
        row["value"] = 0.8 if c < 6 else 0.8 / 1.06
    frame = to_frame(rows + fraction)
    assert cp.detect(frame).empty
    newest = cp.newest_vs_previous(frame)
    assert not newest.empty and BANDWIDTH_METRIC not in set(newest["metric"])
    assert set(newest["verdict"]) == {"unchanged"}


def test_a_ratio_to_mrv2_is_not_a_series_of_its_own():
    # mrv2 gets 10% faster, fast does not change: fast's ratio to mrv2 rises by 11%, which is
    # mrv2's change (found in mrv2's own series), not a regression of fast
    rows = _series([L] * 6 + [0.9 * L] * 6, subject="mrv2")
    rows += _series([0.7 * L] * 12, subject="fast", seed=1)
    ratio = _series([0.7 * L] * 12, subject="fast", metric=RATIO_METRIC, seed=2)
    for c, row in enumerate(ratio):
        row["value"] = 0.7 if c < 6 else 0.7 / 0.9
    frame = to_frame(rows + ratio)
    changes = cp.detect(frame)
    assert list(changes["subject"]) == ["mrv2"] and list(changes["direction"]) == ["improvement"]
    newest = cp.newest_vs_previous(frame)
    assert not newest.empty and RATIO_METRIC not in set(newest["metric"])


def test_noise_from_the_stored_quartiles_raises_the_threshold():
    noisy = to_frame(_series([L] * 6 + [1.07 * L] * 6, iqr=0.10))
    assert cp.detect(noisy).empty  # 7% is under the series' own 10% spread
    big = cp.detect(to_frame(_series([L] * 6 + [1.15 * L] * 6, iqr=0.10)))
    assert len(big) == 1
    assert big["noise"].iloc[0] == pytest.approx(0.10) and big["threshold"].iloc[0] == pytest.approx(0.10)


def test_noise_from_samples_when_no_quartiles_were_stored():
    rows = _series([L] * 6 + [1.2 * L] * 6)
    for row in rows:
        row["q25"] = row["q75"] = None
    changes = cp.detect(to_frame(rows))
    samples = np.asarray(rows[0]["samples"])
    q25, q75 = np.percentile(samples, [25, 75])
    assert changes["noise"].iloc[0] == pytest.approx((q75 - q25) / np.median(samples), rel=0.5)
    assert np.isfinite(changes["noise"]).all()


def test_higher_is_better_metrics_regress_downwards(monkeypatch):
    # were the bandwidth fraction a series (1 us / latency): a slower kernel moves fewer bytes
    # per second
    monkeypatch.setattr(series, "DERIVED_METRICS", (RATIO_METRIC,))
    slower = to_frame(_series([L] * 6 + [1.25 * L] * 6, metric="track_bandwidth_fraction"))
    faster = to_frame(_series([L] * 6 + [0.8 * L] * 6, metric="track_bandwidth_fraction"))
    reg, imp = cp.detect(slower), cp.detect(faster)
    assert list(reg["direction"]) == ["regression"] and reg["change"].iloc[0] == pytest.approx(-0.2)
    assert list(imp["direction"]) == ["improvement"] and imp["change"].iloc[0] == pytest.approx(0.25)


def test_a_regression_later_halved_is_reported_as_what_is_still_present():
    rows = _series([L] * 4 + [1.3 * L] * 4 + [1.1 * L] * 4)
    changes = cp.detect(to_frame(rows))
    reg, imp = cp.regressions(changes), cp.improvements(changes)
    assert len(reg) == 1 and reg["change"].iloc[0] == pytest.approx(0.10, abs=0.01)
    assert reg["before"].iloc[0] == _commit(3) and reg["after"].iloc[0] == _commit(4)
    assert len(imp) == 1 and imp["change"].iloc[0] == pytest.approx(1.1 / 1.3 - 1, abs=0.01)
    assert imp["before"].iloc[0] == _commit(7) and imp["after"].iloc[0] == _commit(8)


def _stages_and_call(stats, resample, call) -> pd.DataFrame:
    """One point's stats and resample stage times over commits, and its call latency as a
    sweep timed it (``call`` None: no sweep did)."""
    rows = _series(stats, metric="track_stage_us", sweep="Stages", stage="stats", seed=3)
    rows += _series(resample, metric="track_stage_us", sweep="Stages", stage="resample", seed=4)
    if call is not None:
        rows += _series(call, sweep="Density", seed=5)
    return to_frame(rows)


def test_a_stage_step_its_call_does_not_show_is_a_shift_not_a_regression():
    # work moved from resample to stats (express's row 0 read by stats): the stats stage doubles, resample
    # halves, the call does not change
    frame = _stages_and_call([10e-6] * 6 + [20e-6] * 6, [20e-6] * 6 + [10e-6] * 6, [40e-6] * 12)
    changes = cp.detect(frame)
    assert cp.regressions(changes).empty and cp.improvements(changes).empty
    moved = cp.shifts(changes)
    assert list(zip(moved["stage"], moved["direction"])) == [("stats", "regression"), ("resample", "improvement")]
    np.testing.assert_allclose(moved["change"], [1.0, -0.5], atol=0.02)
    np.testing.assert_allclose(moved["call_change"], 0.0, atol=0.02)
    assert "2 stage shifts" in cp.report(changes, cp.newest_vs_previous(frame))


def test_a_stage_step_the_call_shows_is_a_regression():
    frame = _stages_and_call([10e-6] * 6 + [20e-6] * 6, [20e-6] * 12, [40e-6] * 6 + [50e-6] * 6)
    reg = cp.regressions(cp.detect(frame))
    assert sorted(reg["metric"]) == ["time_sample", "track_stage_us"] and cp.shifts(cp.detect(frame)).empty
    stage = reg[reg["stage"].notna()]
    assert list(stage["stage"]) == ["stats"] and stage["call_change"].iloc[0] == pytest.approx(0.25, abs=0.02)
    assert reg.loc[reg["stage"].isna(), "call_change"].isna().all()


def test_without_a_timed_call_the_stages_together_judge_the_step():
    # the stages' sum stays at 30 us: a shift; where it rises with the stage, a regression
    moved = cp.detect(_stages_and_call([10e-6] * 6 + [20e-6] * 6, [20e-6] * 6 + [10e-6] * 6, None))
    assert len(cp.shifts(moved)) == 2 and cp.regressions(moved).empty
    slower = cp.regressions(cp.detect(_stages_and_call([10e-6] * 6 + [20e-6] * 6, [20e-6] * 12, None)))
    assert list(slower["stage"]) == ["stats"]
    assert slower["call_change"].iloc[0] == pytest.approx(1 / 3, abs=0.02)


def test_a_call_timed_on_one_side_only_is_not_set_against_a_sum():
    # the call (50 us, launch gaps included) was timed only before the step; after it only the
    # stages were: their sum rose 30 -> 40 us, which is the regression (50 -> 40 would read as
    # the call getting faster, and the stats step as a shift)
    rows = _series([10e-6] * 6 + [20e-6] * 6, metric="track_stage_us", sweep="Stages", stage="stats", seed=3)
    rows += _series([20e-6] * 12, metric="track_stage_us", sweep="Stages", stage="resample", seed=4)
    rows += _series([50e-6] * 6, sweep="Density", seed=5)
    reg = cp.regressions(cp.detect(to_frame(rows)))
    assert list(reg["stage"]) == ["stats"]
    assert reg["call_change"].iloc[0] == pytest.approx(1 / 3, abs=0.02)


def test_newest_vs_previous_calls_a_stage_step_its_call_does_not_show_a_shift():
    frame = _stages_and_call([10e-6] * 11 + [20e-6], [20e-6] * 11 + [10e-6], [40e-6] * 12)
    newest = cp.newest_vs_previous(frame)
    assert set(newest.loc[newest["stage"].notna(), "verdict"]) == {"shift"}
    assert set(newest.loc[newest["stage"].isna(), "verdict"]) == {"unchanged"}
    summary = cp.newest_summary(newest)
    assert summary["regressions"].sum() == 0 and summary["improvements"].sum() == 0
    slower = _stages_and_call([10e-6] * 11 + [20e-6], [20e-6] * 12, [40e-6] * 11 + [50e-6])
    newest = cp.newest_vs_previous(slower)
    assert set(newest.loc[newest["stage"] == "stats", "verdict"]) == {"regression"}


def test_a_spike_that_reverts_is_not_a_change():
    assert cp.detect(to_frame(_series([L] * 5 + [1.3 * L] + [L] * 6))).empty


def test_failed_crashed_and_skipped_points_are_left_out():
    rows = _series([L] * 6 + [1.2 * L] * 6)
    for row in rows[6:]:
        row.update(status="crashed", value=np.nan)
    assert cp.detect(to_frame(rows)).empty


def test_detect_is_pure(history):
    before = history.copy(deep=True)
    cp.detect(history)
    cp.newest_vs_previous(history)
    pd.testing.assert_frame_equal(history, before)


def test_empty_frames_give_empty_frames_with_the_columns():
    empty = sr.history_frame().iloc[0:0]
    for dimension in cp.DIMENSIONS:
        changes = cp.detect(empty, dimension)
        assert changes.empty and set(cp.CHANGE_COLUMNS) <= set(changes.columns)
    assert cp.newest_vs_previous(empty).empty
    with pytest.raises(ValueError, match="dimension"):
        cp.detect(empty, "weeks")


# ---------------------------------------------------------------------------------------------
# Newest vs previous
# ---------------------------------------------------------------------------------------------


def test_newest_vs_previous_compares_each_benchmark_with_its_previous_commit():
    frame = sr.history_frame(commits=5, mrv2_step_at=4, fast_step_at=9)
    # a benchmark measured only up to the fourth commit is compared at its own newest commit
    older = frame[(frame["metric"] == "track_latency_us") & (frame["commit"] != sr.commit_hash("commit-4"))]
    frame = pd.concat([frame[frame["metric"] != "track_latency_us"], older], ignore_index=True)
    points = cp.newest_vs_previous(frame)
    latest = points[points["metric"] == "time_sample"]
    assert set(latest["newest"]) == {sr.commit_hash("commit-4")}
    assert set(latest["previous"]) == {sr.commit_hash("commit-3")}
    assert set(latest.loc[latest["verdict"] == "regression", "subject"]) == {"mrv2"}
    assert set(latest.loc[latest["subject"] != "mrv2", "verdict"]) == {"unchanged"}
    derived = points[points["metric"] == "track_latency_us"]
    assert set(derived["newest"]) == {sr.commit_hash("commit-3")}
    assert set(derived["verdict"]) == {"unchanged"}
    summary = cp.newest_summary(points)
    first = summary.iloc[0]  # benchmarks with regressions first
    assert first["benchmark"].endswith("time_sample") and first["regressions"] == 6
    assert first["geomean_change"] == pytest.approx(0.12 / 3, abs=0.01)  # 6 of 18 points +12%


# ---------------------------------------------------------------------------------------------
# Over vLLM releases
# ---------------------------------------------------------------------------------------------


def test_the_placeholder_fix_is_found_between_the_releases_that_have_it():
    frame = sr.releases_frame()
    changes = cp.detect(frame, "releases")
    assert set(changes["direction"]) == {"improvement"}
    assert set(zip(changes["before"], changes["after"])) == {("0.27.1", "0.28.0")}
    assert set(changes["measured_at"]) == {sr.commit_hash("releases-run")}
    assert "subject" not in changes  # the releases are the x axis
    density = changes[changes["sweep"] == "Density"]
    # the modes that read draft logits, at phi > 0; nothing in greedy, one-hot or at phi=0
    assert set(zip(density["mode"], density["draft"])) == {("standard", "logits"), ("block", "logits")}
    assert set(density["placeholder_density"]) == {0.5, 1.0}
    heavy = density[density["placeholder_density"] == 1.0]
    np.testing.assert_allclose(heavy["change"], 1.22 / 1.40 - 1, atol=0.015)
    assert (changes["threshold"] >= cp.NOISE_FLOOR["releases"]).all()


def test_release_rows_take_each_benchmarks_newest_run_with_releases():
    old = sr.releases_frame(commit_label="old-run", date="2026-11-05")
    new = sr.releases_frame(commit_label="new-run", date="2026-11-09")
    rows = cp.release_rows(pd.concat([old, new, sr.history_frame()], ignore_index=True))
    assert set(rows["commit"]) == {sr.commit_hash("new-run")}
    assert set(rows["release"]) == set(sr.RELEASES)
    assert cp.release_order(["0.28.0", "0.9.1", "0.27.1", "0.27.1.post1"]) == [
        "0.9.1",
        "0.27.1",
        "0.27.1.post1",
        "0.28.0",
    ]
    assert cp.detect_all(new)["dimension"].unique().tolist() == ["releases"]


# ---------------------------------------------------------------------------------------------
# specsample regressions
# ---------------------------------------------------------------------------------------------


def test_cli_bad_input_is_one_line_and_exit_2(tmp_path, capsys):
    assert main(["regressions", "--results-dir", str(tmp_path / "nonexistent")]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "no results directory" in err and "nonexistent" in err
    (tmp_path / "empty").mkdir()
    assert main(["regressions", "--results-dir", str(tmp_path / "empty")]) == 2
    results = sr.write_asv_results(sr.history_frame(), tmp_path / "results")
    assert main(["regressions", "--results-dir", str(results), "--machine", "nope"]) == 2
    assert sr.MACHINE in capsys.readouterr().err


def test_cli_exit_1_on_a_regression_with_json(tmp_path, capsys):
    results = sr.write_asv_results(sr.history_frame(), tmp_path / "results")
    out = tmp_path / "changes.json"
    assert main(["regressions", "--results-dir", str(results), "--json", str(out)]) == 1
    text = capsys.readouterr().out
    assert "12 regressions (ranked by effect)" in text and "12 improvements" in text
    data = json.loads(out.read_text())
    assert data["machines"] == [sr.MACHINE]
    assert {r["subject"] for r in data["regressions"]} == {"mrv2"}
    assert {r["subject"] for r in data["improvements"]} == {"fast"}
    assert all(r["change_lo"] <= r["change"] <= r["change_hi"] for r in data["regressions"])
    assert data["newest_vs_previous"] and all(r["newest"] for r in data["newest_vs_previous"])


def test_cli_exit_0_when_a_stage_only_shifted(tmp_path, capsys):
    frame = _stages_and_call([10e-6] * 6 + [20e-6] * 6, [20e-6] * 6 + [10e-6] * 6, [40e-6] * 12)
    results = sr.write_asv_results(frame, tmp_path / "results")
    out = tmp_path / "changes.json"
    assert main(["regressions", "--results-dir", str(results), "--json", str(out)]) == 0
    assert "2 stage shifts" in capsys.readouterr().out
    data = json.loads(out.read_text())
    assert not data["regressions"] and {r["stage"] for r in data["shifts"]} == {"stats", "resample"}


def test_cli_exit_0_without_a_regression(tmp_path, capsys):
    results = sr.write_asv_results(sr.history_frame(mrv2_change=0.0), tmp_path / "results")
    assert main(["regressions", "--results-dir", str(results), "--machine", sr.MACHINE]) == 0
    assert "no regressions" in capsys.readouterr().out


def test_cli_counts_regressions_between_releases(tmp_path):
    # a release slower than the one before it, still at the newest release
    frame = sr.releases_frame()
    slow = frame["subject"].isin(["vllm==0.29.0"]) & (frame["mode"] == "greedy")
    for column in ("value", "q25", "q75", "ci_lo", "ci_hi"):
        frame.loc[slow, column] *= 1.2
    frame.loc[slow, "samples"] = frame.loc[slow, "samples"].map(
        lambda s: [1.2 * v for v in s] if isinstance(s, list) else s
    )
    results = sr.write_asv_results(frame, tmp_path / "results")
    reloaded, problems = load_results(results)
    assert not problems
    changes = cp.detect_all(reloaded)
    reg = cp.regressions(changes)
    assert set(reg["dimension"]) == {"releases"} and set(reg["mode"]) == {"greedy"}
    assert set(zip(reg["before"], reg["after"])) == {("0.28.0", "0.29.0")}
    assert main(["regressions", "--results-dir", str(results)]) == 1


def test_every_regressions_option_has_help():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command").choices["regressions"]
    options = [a for a in sub._actions if a.option_strings and a.dest != "help"]
    assert {a.dest for a in options} == {"results_dir", "machine", "json"}
    assert all(a.help and a.help.strip() for a in options)
    assert "%(default)s" in sub.formatter_class(prog="x")._get_help_string(options[0])


def test_newest_vs_previous_gives_the_four_way_verdict_and_the_summary_counts_it():
    rows = _series([L] * 12, num_reqs=1, seed=1)  # steady: same
    rows += _series([L] * 11 + [1.3 * L], num_reqs=2, seed=2)  # slower
    rows += _series([L] * 11 + [0.7 * L], num_reqs=4, seed=3)  # faster
    wide = _series([L] * 12, num_reqs=8, seed=4)
    for row in wide[-2:]:  # medians known to +-15%: the 5% floor can be neither passed nor shown
        row.update(ci_lo=0.85 * L, ci_hi=1.15 * L)
    rows += wide
    newest = cp.newest_vs_previous(to_frame(rows)).set_index("num_reqs")
    assert newest["four_way"].to_dict() == {1: "same", 2: "slower", 4: "faster", 8: "inconclusive"}
    summary = cp.newest_summary(newest.reset_index())
    assert summary[["regressions", "improvements", "same", "inconclusive"]].sum().tolist() == [1, 1, 1, 1]
    ids = cp.detect(to_frame(rows))["id"]
    assert ids.str.fullmatch(r"[0-9a-f]{10}").all() and ids.is_unique
    assert cp.detect(to_frame(rows))["id"].tolist() == ids.tolist()  # stable


def test_a_path_on_and_off_are_two_series_over_releases():
    """FLy on (window 2) exists from a later release, at five times the latency of FLy off: the
    two are separate series, so the window turning on is no step between releases, and a step
    inside the FLy series is labelled with its window."""
    rng = np.random.default_rng(5)
    rows = []
    releases = ("0.31.0", "0.32.0", "0.33.0", "0.34.0", "0.35.0")
    for i, release in enumerate(releases):
        for window in (0, 2):
            has_fly = i >= 2
            seconds = 270e-6 if window == 0 else (2.4e-3 if i < 4 else 1.2e-3)
            for metric in ("time_sample", "track_latency_us"):
                rows.append(
                    sr.row(
                        commit=sr.commit_hash("releases-run"),
                        date=pd.Timestamp("2026-11-10", tz="UTC"),
                        tier="releases",
                        sweep="PathsFly",
                        metric=metric,
                        point={"subject": f"vllm=={release}", "mode": "standard", "fly_window_size": window},
                        seconds=seconds if (window == 0 or has_fly) else None,
                        rng=rng,
                        status="ok" if (window == 0 or has_fly) else "skipped",
                    )
                )
    changes = cp.detect(sr.to_frame(rows), "releases")
    assert set(changes["fly_window_size"]) == {2}, changes[["before", "after", "fly_window_size"]]
    assert set(zip(changes["before"], changes["after"])) == {("0.34.0", "0.35.0")}
    assert set(changes["direction"]) == {"improvement"}
    assert all(cp.point_label(r).endswith("fly_window_size=2") for r in changes.to_dict("records"))
    # a series at every path default keeps the id it had before the path axes existed
    row = {"machine": "m", "benchmark": "b", "mode": "standard", "dimension": "commits", "before": "a", "after": "b"}
    key = ["machine", "benchmark", "mode"]
    assert cp.change_id({**row, "fly_window_size": 0, "watermark": False}, [*key, "fly_window_size", "watermark"]) == (
        cp.change_id(row, key)
    )
