"""``specsample goals`` (specsample.devtools.goals): the goals report, on a hand-made results
frame whose ratios are known, with the packaged goals and with goals files of its own."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from specsample import cli, tiers
from specsample.devtools import goals

COMMIT = "c1b5b1ca" + "0" * 32
BASE = dict(num_reqs=128, num_speculative_steps=4, vocab_size=151936, placeholder_pattern="trailing", draft="logits")


def _frame() -> pd.DataFrame:
    rows = []

    def add(metric, sweep, subject, value, **point):
        row = dict(BASE, mode="standard", placeholder_density=0.0)
        row.update(metric=metric, sweep=sweep, subject=subject, value=value, **point)
        rows.append(row)

    # goal 1: fast block 90 / 300 = 0.300, mrv2 270 / 300 = 0.900; a random-pattern row is ignored
    for subject, phi0, phi1 in (("fast", 300.0, 90.0), ("mrv2", 300.0, 270.0)):
        add("track_latency_us", "Density", subject, phi0, mode="block")
        add("track_latency_us", "Density", subject, phi1, mode="block", placeholder_density=1.0)
    rows.append(dict(rows[-1], placeholder_pattern="random", value=1.0))
    # goal 1 again, standard: fast 100 / 250 = 0.400 (misses 0.30)
    add("track_latency_us", "Density", "fast", 250.0)
    add("track_latency_us", "Density", "fast", 100.0, placeholder_density=1.0)
    # goal 2: bandwidth fraction at phi=0.5; a point off the base (R=32) is ignored
    add("track_bandwidth_fraction", "Density", "fast", 0.5, placeholder_density=0.5)
    add("track_bandwidth_fraction", "Density", "mrv2", 0.25, placeholder_density=0.5)
    add("track_bandwidth_fraction", "Density", "fast", 0.99, placeholder_density=0.5, num_reqs=32)
    # goal 3: fast/mrv2 latency ratios 0.5 and 0.8 -> speedups 2.0 and 1.25; mrv2's own is ignored
    add("track_ratio_to_mrv2", "Batch", "fast", 0.5, num_reqs=1)
    add("track_ratio_to_mrv2", "Steps", "fast", 0.8, num_speculative_steps=8)
    add("track_ratio_to_mrv2", "Steps", "mrv2", 1.0, num_speculative_steps=8)
    # goal 4: FlashInfer from logits 3x fast at R=32, its kernel alone half of fast; 2x at R=1
    for subject, value in (("fast", 100.0), ("flashinfer", 300.0), ("flashinfer-kernel", 50.0)):
        add("track_latency_us", "Peers", subject, value, num_reqs=32, vocab_size=32000)
    for subject, value in (("fast", 10.0), ("flashinfer", 20.0)):
        add("track_latency_us", "Peers", subject, value, num_reqs=1, vocab_size=32000)
    frame = pd.DataFrame(rows)
    frame["num_reqs"] = frame["num_reqs"].astype("Int64")  # as load_results types them
    return frame.assign(status="ok")


def test_report_computes_each_goal_from_the_packaged_goals():
    text = goals.report(_frame(), goals.load_goals())
    lines = text.splitlines()
    assert lines[0] == (
        "1. phi=1 / phi=0 latency, base point, trailing (goal: fast <= 0.3, 1.5 / (K + 1) at K = 4): not met (1 of 2)"
    )
    assert "   block    logits : fast 0.300, mrv2 0.900   (fast 90.0 / 300.0 us)" in lines
    assert "   standard logits : fast 0.400   (fast 100.0 / 250.0 us)" in lines
    assert (
        "2. bandwidth fraction, base point, phi=0.5, trailing, draft logits (goal: fast >= 0.8): not met (0 of 1)"
        in lines
    )
    assert "   standard: fast 0.500, mrv2 0.250" in lines
    assert "3. speedup over mrv2, 2 points: geomean 1.581x (goal >= 1.3), slowest 1.250x (goal >= 0.98): met" in lines
    assert "   Batch        geomean 2.000x" in lines and "   Steps        geomean 1.250x" in lines
    assert (
        "   slow: sweep=Steps mode=standard draft=logits R=128 K=8 V=151936 phi=0.0 pattern=trailing -> 1.250x" in lines
    )
    assert "4. FlashInfer / fast, Peers sweep (goal: flashinfer / fast >= 3, from logits at R >= 32): met" in lines
    assert "   R=32   V=32000  : from logits 3.00, kernel alone 0.50   (fast 100.0 us)" in lines
    assert "   R=1    V=32000  : from logits 2.00   (fast 10.0 us)" in lines  # below R=32: shown, not judged
    assert lines[-1].startswith("5. lossless: mrv2's random numbers, draw for draw: not a timing")


def test_rows_that_did_not_run_are_left_out():
    frame = _frame()
    frame.loc[(frame["metric"] == "track_ratio_to_mrv2") & (frame["sweep"] == "Batch"), "status"] = "failed"
    assert "3. speedup over mrv2, 1 points: geomean 1.250x" in goals.report(frame, goals.load_goals())


def test_goals_are_data(tmp_path):
    spec = goals.load_goals()
    spec["subject"] = "mrv2"
    spec["goals"] = [g for g in spec["goals"] if g["name"] == "1"]
    spec["goals"][0]["goal"] = {"at_most": 0.95}
    spec["goals"][0]["subjects"] = ["mrv2", "fast"]
    path = tmp_path / "goals.json"
    path.write_text(json.dumps(spec))
    text = goals.report(_frame(), goals.load_goals(path))
    assert text.splitlines() == [
        "1. phi=1 / phi=0 latency, base point, trailing (goal: mrv2 <= 0.95): met",
        "   block    logits : mrv2 0.900, fast 0.300   (mrv2 270.0 / 300.0 us)",
        "   standard logits : fast 0.400",
    ]


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda s: s["goals"][0].update(kind="median"), "goal 1: kind must be one of"),
        (lambda s: s["goals"][1].pop("metric"), "goal 2 (value) lacks metric"),
        (lambda s: s["goals"][0].update(goal={"note": "x"}), "goal 1: give its threshold as at_least or at_most"),
        (lambda s: s.pop("base_point"), "goal 1 is at the base point, and there is no base_point"),
        (lambda s: s.pop("subject"), "no 'subject'"),
    ],
)
def test_bad_goals_files_say_what_is_wrong(tmp_path, change, message):
    spec = goals.load_goals()
    change(spec)
    path = tmp_path / "goals.json"
    path.write_text(json.dumps(spec))
    with pytest.raises(goals.GoalsError) as e:
        goals.load_goals(path)
    assert message in str(e.value)


def _results(frame: pd.DataFrame) -> pd.DataFrame:
    other = frame.assign(commit="d40178d3" + "0" * 32, date=pd.Timestamp("2026-11-01", tz="UTC"))
    frame = frame.assign(commit=COMMIT, date=pd.Timestamp("2026-11-30", tz="UTC"))
    both = pd.concat([frame, other], ignore_index=True)
    return both.assign(machine="h200", tier="nightly", gpu="NVIDIA H200")


def test_select_names_what_exists():
    df = _results(_frame())
    rows, machine = goals.select(df, "c1b5")
    assert machine == "h200" and (rows["commit"] == COMMIT).all() and len(rows) == len(_frame())
    with pytest.raises(goals.GoalsError, match="no results for commit 0123; newest commits: c1b5b1ca, d40178d3"):
        goals.select(df, "0123")
    with pytest.raises(goals.GoalsError, match=r"no quick results .* \(tiers there: nightly\)"):
        goals.select(df, "c1b5", tier="quick")
    with pytest.raises(goals.GoalsError, match=r"on a100 \(it has results on h200\)"):
        goals.select(df, "c1b5", machine="a100")
    two = pd.concat([df, df.assign(machine="a100")], ignore_index=True)
    with pytest.raises(goals.GoalsError, match="has results on a100, h200: give --machine"):
        goals.select(two, "c1b5")


def test_cli_prints_the_report(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr("specsample.track.results.load_results", lambda path: (_results(_frame()), []))
    assert cli.main(["goals", "c1b5b1c", "--results-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == "commit c1b5b1ca on h200 (NVIDIA H200), nightly tier"
    assert out[1].startswith("1. phi=1 / phi=0 latency")
    assert cli.main(["goals", "feed", "--results-dir", str(tmp_path)]) == 2
    assert "specsample goals: no results for commit feed" in capsys.readouterr().err
    assert cli.main(["goals", "c1b5b1c", "--results-dir", str(tmp_path / "none")]) == 2
    assert "no results directory" in capsys.readouterr().err


def test_speedup_against_another_subject_pairs_the_points_both_ran():
    """``"against"``: the other subject's latency over ours at the same point (sweep and axes)."""
    rows = []
    for sweep, point, ours, theirs in (
        ("Shape", dict(num_reqs=1), 24.0, 18.0),  # 0.75x: slower than the release
        ("Shape", dict(num_reqs=128), 100.0, 200.0),  # 2x
        ("Density", dict(placeholder_density=0.5), 50.0, 150.0),  # 3x
    ):
        for subject, value in (("express", ours), ("vllm==0.33.0", theirs)):
            row = dict(BASE, mode="standard", placeholder_density=0.0)
            row.update(point, metric="track_latency_us", sweep=sweep, subject=subject, value=value)
            rows.append(row)
    rows.append(dict(rows[0], subject="express", num_reqs=8, value=10.0))  # no release beside it: left out
    frame = pd.DataFrame(rows).assign(status="ok")
    spec = json.loads((goals.default_goals_path().parent / "goals_express.json").read_text())
    spec["goals"] = [g for g in spec["goals"] if g["kind"] == "speedup"]
    text = goals.report(frame, spec)
    geomean = (0.75 * 2 * 3) ** (1 / 3)
    assert f"3 points: geomean {geomean:.3f}x (goal >= 1.5), slowest 0.750x (goal >= 1): not met (1 of 2)" in text
    assert "   Shape        geomean 1.225x" in text and "   Density      geomean 3.000x" in text
    assert "slow: sweep=Shape mode=standard draft=logits R=1 " in text


def test_newest_release_is_the_newest_in_the_results_and_an_older_one_is_said():
    """``"newest-release"``: the newest vllm==X.Y.Z in the results, named in the title; when the
    results predate the newest MRV2 release specsample knows, the report says so first."""
    rows = []
    for subject, value in (("express", 50.0), ("vllm==0.9.0", 200.0), ("vllm==0.10.0", 100.0), ("mrv2", 1.0)):
        row = dict(BASE, mode="standard", placeholder_density=0.0)
        row.update(metric="track_latency_us", sweep="Vllm", subject=subject, value=value)
        rows.append(row)
    frame = pd.DataFrame(rows).assign(status="ok")
    spec = json.loads((goals.default_goals_path().parent / "goals_express.json").read_text())
    spec["goals"] = [g for g in spec["goals"] if g["name"] == "1"]
    text = goals.report(frame, spec)
    assert "1. speedup over vllm==0.10.0 (the newest release), every point both ran, 1 points: geomean 2.000x" in text
    assert text.startswith(
        f"newest-release: vllm==0.10.0 is the newest release in these results; the newest MRV2 release is "
        f"{tiers.NEWEST_RELEASE}, not measured here"
    )
    current = frame.assign(subject=frame["subject"].replace("vllm==0.10.0", tiers.NEWEST_RELEASE))
    assert not goals.report(current, spec).startswith("newest-release")


def test_speedup_against_the_fastest_release_takes_each_points_fastest():
    """``"against": "fastest-release"``: at each point the fastest vllm==X.Y.Z subject there, so
    a point where an older release beats the newest one counts against us."""
    rows = []
    for point, ours, releases in (
        (dict(num_reqs=1), 24.0, {"vllm==0.30.0": 18.0, "vllm==0.33.0": 20.0}),  # 0.75x (0.30.0)
        (dict(num_reqs=128), 100.0, {"vllm==0.30.0": 260.0, "vllm==0.33.0": 200.0}),  # 2x (0.33.0)
    ):
        for subject, value in (("express", ours), ("mrv2", 1.0), *releases.items()):  # mrv2: not a release
            row = dict(BASE, mode="standard", placeholder_density=0.0)
            row.update(point, metric="track_latency_us", sweep="Batch", subject=subject, value=value)
            rows.append(row)
    frame = pd.DataFrame(rows).assign(status="ok")
    spec = json.loads((goals.default_goals_path().parent / "goals_express.json").read_text())
    spec["goals"] = [g for g in spec["goals"] if g["name"] == "1b"]
    text = goals.report(frame, spec)
    geomean = (0.75 * 2) ** 0.5
    assert f"2 points: geomean {geomean:.3f}x (goal >= 1.5), slowest 0.750x (goal >= 1): not met (0 of 2)" in text
    assert "slow: sweep=Batch mode=standard draft=logits R=1 " in text


def test_the_express_goals_file_loads():
    spec = goals.load_goals(goals.default_goals_path().parent / "goals_express.json")
    assert spec["subject"] == "express" and [g["name"] for g in spec["goals"]] == [
        "1",
        "1b",
        "2a",
        "2b",
        "3",
        "4",
        "5",
        "6",
        "7",
    ]


def _masked_goal() -> dict:
    spec = json.loads((goals.default_goals_path().parent / "goals_express.json").read_text())
    spec["goals"] = [g for g in spec["goals"] if g["name"] == "6"]
    return spec


def test_the_masked_skip_goal_pairs_both_skipping_at_each_fraction():
    """Goal 6: express over vllm==0.34.0 at the PathsMasked points where both skip, mask 0.9 and
    0.99; the skip-off points, mask 0.5 and another release are left out."""
    rows = []
    for fraction, skip, ours, theirs in (
        (0.9, True, 100.0, 250.0),  # 2.5x
        (0.99, True, 90.0, 180.0),  # 2x
        (0.9, False, 10.0, 1000.0),  # skip off: not the goal's
        (0.5, True, 10.0, 1000.0),  # another fraction
    ):
        for subject, value in (("express", ours), ("vllm==0.34.0", theirs), ("vllm==0.35.0", 1.0)):
            row = dict(BASE, mode="standard", placeholder_density=0.0)
            row.update(
                metric="track_latency_us",
                sweep="PathsMasked",
                subject=subject,
                value=value,
                masked_vocab_fraction=fraction,
                skip_masked_vocab_blocks=skip,
            )
            rows.append(row)
    text = goals.report(pd.DataFrame(rows).assign(status="ok"), _masked_goal())
    geomean = (2.5 * 2.0) ** 0.5
    assert f"2 points: geomean {geomean:.3f}x (goal >= 1), slowest 2.000x (goal >= 1): met" in text
    assert "   0.9          geomean 2.500x" in text and "   0.99         geomean 2.000x" in text
    assert (
        "slow: mode=standard draft=logits R=128 phi=0.0 masked_vocab_fraction=0.99 skip_masked_vocab_blocks=True"
        in text
    )


def test_the_masked_skip_goal_says_when_the_results_lack_the_sweep():
    """Committed results from before the PathsMasked sweep (or without vllm==0.34.0 in it): "no
    results", with the reason, and no data as the verdict."""
    row = dict(BASE, mode="standard", placeholder_density=0.0, metric="track_latency_us", value=1.0)
    before = pd.DataFrame([dict(row, sweep="Density", subject="express")]).assign(status="ok")
    opening, (result,) = goals.evaluate(before, _masked_goal())
    assert result.verdict == "no data" and result.summary == "no results (these results have no PathsMasked sweep)"
    assert result.lines[0].endswith(
        "no results (these results have no PathsMasked sweep) (goal: geomean >= 1, slowest >= 1): no data"
    )
    alone = pd.DataFrame([dict(row, sweep="PathsMasked", subject="express")]).assign(status="ok")
    (result,) = goals.evaluate(alone, _masked_goal())[1]
    assert result.summary == "no results (vllm==0.34.0 is not in the PathsMasked sweep's results)"
