"""Sign-off statistics and report (specsample.track.signoff.stats, .report) on synthetic samples
(fixed seeds) and on the real CPU fixture: pure frame -> frame functions, no measurement."""

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from specsample.track import signoff
from specsample.track.results import COLUMNS, commit_order, load_results, machine_environment
from specsample.track.signoff import (
    compare,
    compare_variants,
    exit_code,
    min_p_value,
    noise_level,
    report_markdown,
)

RESULTS = Path(__file__).parent / "fixtures" / "asv_results"
BENCH = "bench_sampler.NightlyBatchLatency.time_sample"
N_SAMPLES = 20  # enough for Mann-Whitney to reach p < 0.002 (min two-sided p ~ 1.5e-11)


def _point(
    commit,
    samples=None,
    *,
    value=None,
    subject="mrv2",
    num_reqs=64,
    status="ok",
    benchmark=BENCH,
    ci=None,
    metric=None,
    semantics=None,
    reason=None,
):
    """One results-frame row; value defaults to the samples' median, as asv stores it."""
    if samples is not None:
        samples = [float(s) for s in samples]
        value = float(np.median(samples)) if value is None else value
        q25, q75 = np.percentile(samples, [25, 75])
    else:
        q25 = q75 = np.nan
    return {
        "commit": commit,
        "machine": "h200",
        "benchmark": benchmark,
        "metric": metric or benchmark.rsplit(".", 1)[1],
        "unit": "seconds" if (metric or benchmark).split(".")[-1].startswith("time_") else "fraction",
        "subject": subject,
        "mode": "standard",
        "draft": "logits",
        "num_reqs": num_reqs,
        "num_speculative_steps": 4,
        "vocab_size": 151936,
        "placeholder_density": 0.5,
        "placeholder_pattern": "trailing",
        "stage": None,
        "value": np.nan if status != "ok" else value,
        "ci_lo": ci[0] if ci else np.nan,
        "ci_hi": ci[1] if ci else np.nan,
        "q25": q25,
        "q75": q75,
        "n_samples": len(samples) if samples else None,
        "samples": samples if status == "ok" else None,
        "status": status,
        "semantics": semantics,
        "reason": reason,
    }


def _frame(rows):
    df = pd.DataFrame(rows)
    return df.astype({c: d for c, d in COLUMNS.items() if c in df and d != "object"})


def _lognormal(seed, median, sigma=0.01, n=N_SAMPLES):
    return median * np.random.default_rng(seed).lognormal(0.0, sigma, n)


# ---------------------------------------------------------------------------------------------
# Verdicts
# ---------------------------------------------------------------------------------------------


def test_identical_distributions_are_unchanged():
    base = _frame([_point("b", _lognormal(seed=1, median=100e-6))])
    head = _frame([_point("h", _lognormal(seed=2, median=100e-6))])
    out = compare(base, head)
    assert out.verdict.tolist() == ["same"]
    assert out.test.iloc[0] == "mann-whitney" and out.p_value.iloc[0] > 0.002
    assert exit_code(out) == 0


def test_ten_percent_slower_with_low_noise_is_a_regression():
    base = _frame([_point("b", _lognormal(seed=3, median=100e-6))])
    head = _frame([_point("h", _lognormal(seed=4, median=110e-6))])
    out = compare(base, head)
    assert out.verdict.tolist() == ["slower"]
    assert out.p_value.iloc[0] < 1e-6
    assert out.ratio.iloc[0] == pytest.approx(1.10, rel=0.02)
    assert exit_code(out) == 1


def test_one_percent_shift_is_unchanged_at_five_percent_min_effect():
    base = _frame([_point("b", _lognormal(seed=5, median=100e-6, sigma=0.001))])
    head = _frame([_point("h", _lognormal(seed=6, median=101e-6, sigma=0.001))])
    out = compare(base, head, min_effect=0.05)
    # significant, but too small to block a PR
    assert out.significant.iloc[0] and out.verdict.tolist() == ["same"]
    assert compare(base, head, min_effect=0.005).verdict.tolist() == ["slower"]


def test_ten_percent_faster_is_an_improvement_and_passes():
    base = _frame([_point("b", _lognormal(seed=7, median=110e-6))])
    head = _frame([_point("h", _lognormal(seed=8, median=100e-6))])
    out = compare(base, head)
    assert out.verdict.tolist() == ["faster"] and exit_code(out) == 0


def test_failed_benchmark_exits_2_even_next_to_a_regression():
    base = _frame([_point("b", _lognormal(9, 100e-6)), _point("b", _lognormal(10, 100e-6), num_reqs=1)])
    head = _frame([_point("h", _lognormal(11, 130e-6)), _point("h", status="failed", num_reqs=1)])
    out = compare(base, head).set_index("num_reqs")
    assert out.verdict[64] == "slower" and out.verdict[1] == "failed"
    assert exit_code(out.reset_index()) == 2


def test_points_measured_on_one_side_only_are_not_a_pass():
    """Issue 19: a point missing on one side (no row, or skipped there while the other side ran
    it) is missing / new: exit 2 unless allowed, and never a pass on its own."""
    base = _frame(
        [
            _point("b", _lognormal(12, 1e-4), num_reqs=1),
            _point("b", _lognormal(13, 1e-4), num_reqs=2),
            _point("b", status="skipped", num_reqs=3),
            _point("b", status="skipped", num_reqs=5),
            _point("b", _lognormal(16, 1e-4), num_reqs=6),
        ]
    )
    head = _frame(
        [
            _point("h", status="skipped", num_reqs=1),
            _point("h", _lognormal(14, 1e-4), num_reqs=3),
            _point("h", _lognormal(15, 1e-4), num_reqs=4),
            _point("h", status="skipped", num_reqs=5),
            _point("h", _lognormal(17, 1e-4), num_reqs=6),
        ]
    )
    out = compare(base, head)
    assert out.set_index("num_reqs").verdict.to_dict() == {
        1: "missing",
        2: "missing",
        3: "new",
        4: "new",
        5: "skipped",
        6: "same",
    }
    assert exit_code(out) == 2
    assert exit_code(out, allow_missing=True) == 0
    # allowed, but nothing compared on both sides is still not a pass
    assert exit_code(out[out.num_reqs != 6], allow_missing=True) == 2
    assert exit_code(out[out.num_reqs == 5]) == 2  # skipped on both sides only: nothing verified


def test_crashed_or_failed_on_either_side_fails_the_signoff():
    base = _frame(
        [
            _point("b", _lognormal(20, 1e-4), num_reqs=1),
            _point("b", status="crashed", num_reqs=2, reason="killed by SIGSEGV: illegal memory access"),
            _point("b", status="failed", num_reqs=3, reason="RuntimeError: boom"),
            _point("b", _lognormal(21, 1e-4), num_reqs=4),
        ]
    )
    head = _frame(
        [
            _point("h", status="crashed", num_reqs=1, reason="hung: no progress for 600 s"),
            _point("h", _lognormal(22, 1e-4), num_reqs=2),
            _point("h", _lognormal(23, 1e-4), num_reqs=3),
            _point("h", _lognormal(24, 1e-4), num_reqs=4),
        ]
    )
    out = compare(base, head)
    assert out.set_index("num_reqs").verdict.to_dict() == {1: "crashed", 2: "crashed", 3: "failed", 4: "same"}
    assert exit_code(out) == 2 and exit_code(out, allow_missing=True) == 2
    assert out.head_reason.iloc[0] == "hung: no progress for 600 s"
    text = report_markdown(out)
    assert "**FAIL** (exit 2): 2 crashed points, 1 failed point out of 4 points" in text
    crashed = text.split("### Crashed (2)")[1].split("###")[0]
    assert "| side | reason |" in crashed
    assert "R=1 K=4 V=151936 phi=0.5 trailing | head | hung: no progress for 600 s |" in crashed
    assert "| base | killed by SIGSEGV: illegal memory access |" in crashed
    assert "| base | RuntimeError: boom |" in text.split("### Failed (1)")[1]


def test_head_violating_placeholder_semantics_where_base_does_not_fails():
    same, other, bad = "same draws", "same semantics, other stream", signoff.VIOLATES
    base = _frame(
        [
            _point("b", _lognormal(30, 1e-4), num_reqs=n, semantics=sem)
            for n, sem in ((1, same), (2, bad), (3, same), (4, None))
        ]
    )
    head = _frame(
        [
            _point(
                "h",
                _lognormal(31, 0.8e-4),
                num_reqs=1,
                semantics=bad,
                reason="request 0: 2 drafts accepted, but its first -1 is draft 1 (drafts [-1, -1])",
            ),
            _point("h", _lognormal(32, 1e-4), num_reqs=2, semantics=bad),  # the replica: both
            _point("h", _lognormal(33, 1e-4), num_reqs=3, semantics=other),
            _point("h", _lognormal(34, 1e-4), num_reqs=4, semantics=bad),
        ]
    )
    out = compare(base, head)
    # a faster wrong kernel is not an improvement; base violating too is not head's doing
    assert out.set_index("num_reqs").verdict.to_dict() == {
        1: "violation",
        2: "same",
        3: "same",
        4: "violation",
    }
    assert out.ratio.iloc[0] == pytest.approx(0.8, rel=0.02)
    assert exit_code(out) == 2 and exit_code(out, allow_missing=True) == 2
    text = report_markdown(out)
    assert "2 semantics violations at head" in text
    section = text.split("### Semantics violations at head (2)")[1].split("###")[0]
    assert "| base semantics | head: first broken rule | change |" in section
    assert (
        "| same draws | request 0: 2 drafts accepted, but its first -1 is draft 1 (drafts [-1, -1]) | -20." in section
    )
    # each side's semantics, counted over the points both ran
    table = [line for line in text.split("### Semantics\n")[1].split("\n\n")[1].splitlines()]
    assert table == [
        "| base | head | points |",
        "|---|---|---:|",
        f"| same draws | {other} | 1 |",
        f"| same draws | {bad} | 1 |",
        f"| {bad} | {bad} | 1 |",
        f"| not checked | {bad} | 1 |",
    ]


def test_one_sided_points_are_listed_and_allowed_only_on_request():
    base = _frame([_point("b", _lognormal(40, 1e-4), num_reqs=1), _point("b", _lognormal(41, 1e-4), num_reqs=2)])
    head = _frame(
        [
            _point("h", _lognormal(42, 1e-4), num_reqs=1),
            _point("h", status="skipped", num_reqs=2, reason="mrv2 supports modes ('greedy',), not 'standard'"),
        ]
    )
    out = compare(base, head)
    strict, allowed = report_markdown(out), report_markdown(out, allow_missing=True)
    assert strict.startswith("## specsample sign-off\n\n**FAIL** (exit 2): 1 point measured on one side only out of 2")
    assert "pass --allow-missing to accept them" in strict
    assert (
        "**PASS** (exit 0): nothing slower, 1 point measured on one side only (allowed by "
        "--allow-missing) out of 2 points" in allowed
    )
    section = allowed.split("### Measured on one side only (1: 1 missing at head, 0 new at head)")[1]
    assert "| base | head |" in section
    assert "| 99.7 µs | skipped: mrv2 supports modes ('greedy',), not 'standard' |" in section


def test_few_samples_fall_back_to_confidence_intervals():
    # 5 samples a side: the smallest two-sided p is 2/252 > 0.002, as in asv's is_different.
    assert min_p_value(5, 5) == pytest.approx(2 / 252)
    base = _frame([_point("b", _lognormal(16, 100e-6, n=5), ci=(99e-6, 101e-6))])
    head = _frame([_point("h", _lognormal(17, 120e-6, n=5), ci=(119e-6, 121e-6))])
    out = compare(base, head)
    assert out.test.iloc[0] == "ci-overlap" and out.verdict.iloc[0] == "slower"
    overlapping = _frame([_point("h", _lognormal(17, 120e-6, n=5), ci=(100e-6, 121e-6))])
    # Neither different nor shown within the 5% margin: too few samples to tell.
    assert compare(base, overlapping).verdict.iloc[0] == "inconclusive"
    close = _frame([_point("h", _lognormal(17, 100e-6, n=5), ci=(99.5e-6, 101.5e-6))])
    assert compare(base, close).verdict.iloc[0] == "same"


def test_no_samples_uses_ci_and_track_points_use_the_ratio():
    base = _frame([_point("b", value=1e-4, ci=(0.99e-4, 1.01e-4))])
    head = _frame([_point("h", value=1.2e-4, ci=(1.19e-4, 1.21e-4))])
    assert compare(base, head).test.iloc[0] == "ci-overlap"
    bw = "bench_sampler.NightlyBatchDerived.track_bandwidth_fraction"
    base = _frame([_point("b", value=0.80, benchmark=bw)])
    head = _frame([_point("h", value=0.60, benchmark=bw)])
    out = compare(base, head)
    # lower achieved bandwidth is worse, although asv would call it an improvement
    assert out.test.iloc[0] == "ratio-only" and out.verdict.iloc[0] == "slower"
    assert compare(base, head, higher_is_better=()).verdict.iloc[0] == "faster"


def test_duplicate_keys_are_refused():
    rows = [_point("b", _lognormal(18, 1e-4)), _point("b2", _lognormal(19, 1e-4))]
    with pytest.raises(ValueError, match="base has 1 rows sharing a key"):
        compare(_frame(rows), _frame([_point("h", _lognormal(20, 1e-4))]))


def test_output_columns_follow_the_contract():
    base = _frame([_point("b", _lognormal(21, 1e-4))])
    head = _frame([_point("h", _lognormal(22, 1e-4))])
    out = compare(base, head)
    key = signoff.default_key(base, head)
    assert list(out.columns) == [*key, *signoff.VERDICT_COLUMNS]
    assert set(out.verdict) <= set(signoff.VERDICTS) and set(out.test) <= set(signoff.TESTS)
    assert set(signoff.VERDICTS) == {
        *signoff.COMPARED_VERDICTS,
        *signoff.FAILED_VERDICTS,
        *signoff.ONE_SIDED_VERDICTS,
        "skipped",
    }
    assert out.base_commit.iloc[0] == "b" and out.head_commit.iloc[0] == "h"


# ---------------------------------------------------------------------------------------------
# Subject against subject (--results)
# ---------------------------------------------------------------------------------------------


def test_compare_variants_pairs_on_everything_but_the_subject():
    rows = [_point("c" * 40, _lognormal(30 + n, 100e-6), subject="mrv2-pre50939", num_reqs=n) for n in (1, 64)]
    rows += [_point("c" * 40, _lognormal(40 + n, 72e-6), subject="mrv2", num_reqs=n) for n in (1, 64)]
    out = compare_variants(_frame(rows), "mrv2-pre50939", "mrv2")
    assert len(out) == 2 and set(out.verdict) == {"faster"}
    assert out.ratio.to_numpy() == pytest.approx(0.72, rel=0.02)
    assert set(out.base_subject) == {"mrv2-pre50939"} and set(out.head_subject) == {"mrv2"}
    assert "subject" not in out.columns and "commit" in out.columns
    # the --results report names both subjects and the commit, and every table has a commit column
    text = report_markdown(out)
    assert "out of 2 points (`mrv2-pre50939` → `mrv2` at `cccccccc`)." in text
    assert "| commit | benchmark | point | base | head | change | p | semantics (base → head) |" in text
    assert f"| `cccccccc` | `{BENCH}` | standard logits R=1 K=4 V=151936 phi=0.5 trailing | " in text


def test_compare_variants_of_a_subject_with_no_rows_is_not_a_pass():
    """`signoff --results mrv2 nosuch` is not a PASS: every point is missing on one side."""
    rows = [_point("c", _lognormal(50 + n, 100e-6), num_reqs=n) for n in (1, 64)]
    out = compare_variants(_frame(rows), "mrv2", "nosuch")
    assert set(out.verdict) == {"missing"} and exit_code(out) == 2 and exit_code(out, allow_missing=True) == 2
    assert "**FAIL** (exit 2): 2 points measured on one side only" in report_markdown(out)


def test_newest_commit_with_both_subjects():
    rows = [
        _point("old", _lognormal(60, 1e-4)),
        _point("old", _lognormal(61, 1e-4), subject="fast"),
        _point("mid", _lognormal(62, 1e-4)),
        _point("mid", _lognormal(63, 1e-4), subject="fast"),
        _point("new", _lognormal(64, 1e-4)),
    ]
    df = _frame(rows).assign(
        date=pd.to_datetime(["2026-01-01", "2026-01-01", "2026-01-02", "2026-01-02", "2026-01-03"], utc=True)
    )
    assert signoff.newest_commit_with(df, ["mrv2", "fast"]) == "mid"
    assert signoff.newest_commit_with(df, ["mrv2"]) == "new"
    assert signoff.newest_commit_with(df, ["mrv2", "nosuch"]) is None


# ---------------------------------------------------------------------------------------------
# Noise and the report
# ---------------------------------------------------------------------------------------------


def test_noise_level_is_median_relative_iqr():
    rows = [_point("c", value=1.0, num_reqs=n) for n in (1, 2, 3)]
    for row, (q25, q75) in zip(rows, [(0.99, 1.01), (0.98, 1.02), (0.90, 1.10)]):
        row.update(q25=q25, q75=q75)
    assert noise_level(_frame(rows)) == pytest.approx(0.04)
    only_samples = _frame([_point("c", [1.0, 2.0, 3.0, 4.0, 5.0])]).assign(q25=np.nan, q75=np.nan)
    assert noise_level(only_samples) == pytest.approx((4.0 - 2.0) / 3.0)


def test_report_markdown_has_summary_tables_noise_and_machine():
    base = _frame([_point("b" * 40, _lognormal(50, 100e-6), num_reqs=n) for n in (1, 8, 64)])
    head = _frame(
        [
            _point("c" * 40, _lognormal(51, 115e-6), num_reqs=1),
            _point("c" * 40, _lognormal(52, 80e-6), num_reqs=8),
            _point("c" * 40, _lognormal(53, 100e-6), num_reqs=64),
        ]
    )
    machine = {
        "machine": "h200",
        "gpu": "NVIDIA H200",
        "driver": "570.124.06",
        "cuda": "12.8",
        "torch": "2.9.0",
        "triton": "3.6.0",
    }
    text = report_markdown(compare(base, head), machine, notes=["Measured somehow."])
    assert text.startswith("## specsample sign-off")
    assert "**FAIL** (exit 1): 1 slower out of 3 points (base `bbbbbbbb` → head `cccccccc`)" in text
    assert "### Slower (1)" in text and "### Faster (1)" in text
    assert "| benchmark | point | base | head | change | p | semantics (base → head) |" in text
    assert f"| `{BENCH}` | mrv2 standard logits R=64" not in text  # a point the same is not listed
    row = "| mrv2 standard logits R=1 K=4 V=151936 phi=0.5 trailing | 99.8 µs | 115 µs | +14.9% |"
    assert row in text and "| not checked |" in text
    assert "same: 1" in text and "Noise: median relative IQR" in text
    assert text.rstrip().endswith("Measured somehow.")
    assert "GPU `NVIDIA H200`" in text and "triton `3.6.0`" in text


def test_nothing_compared_is_not_a_pass():
    empty = _frame([_point("b", _lognormal(70, 1e-4))]).iloc[0:0]
    out = compare(empty, empty)
    assert out.empty and exit_code(out) == 2
    assert "no points to compare" in report_markdown(out)


def test_report_markdown_pass():
    base = _frame([_point("b", _lognormal(60, 1e-4))])
    head = _frame([_point("h", _lognormal(61, 1e-4))])
    text = report_markdown(compare(base, head))
    assert "**PASS** (exit 0): nothing slower out of 1 points" in text and "### Slower" not in text


# ---------------------------------------------------------------------------------------------
# On the real CPU fixture
# ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fixture_df():
    return load_results(RESULTS)[0]


def test_fixture_planted_kernel_step_is_a_regression(fixture_df):
    commits = commit_order(fixture_df).commit
    base = fixture_df[fixture_df.commit == commits[1]]
    head = fixture_df[fixture_df.commit == commits[2]]
    out = compare(base, head)
    kernel = out[out.metric == "track_stage_us"]
    assert set(kernel[kernel.subject == "mrv2"].verdict) == {"slower"}
    assert kernel[kernel.subject == "mrv2"].ratio.to_numpy() == pytest.approx(1.15)
    assert set(kernel[kernel.subject == "mrv2-pre50939"].verdict) == {"same"}
    # the planted failed track_bandwidth_fraction points, and track_ratio_to_mrv2 for mrv2
    assert exit_code(out) == 2
    # 5 samples a point in the nightly sweep: CI fallback, as asv would do
    assert set(out[out.metric == "time_sample"].test) <= {"ci-overlap", "mann-whitney", "none"}
    text = report_markdown(out, machine_environment(fixture_df, commit=commits[2]))
    assert "### Failed" in text and "NVIDIA H200 (hand-written fixture)" in text


# ---------------------------------------------------------------------------------------------
# Absolute floor for time points (the paired sign-off's placement offset)
# ---------------------------------------------------------------------------------------------


def test_absolute_floor_keeps_a_sub_microsecond_shift_of_a_tiny_point_unchanged():
    """The H200 A/A case: +3% of an 11.6 us point (0.35 us), significant, same code."""
    base = _frame([_point("b", _lognormal(seed=21, median=11.6e-6, sigma=0.002))])
    head = _frame([_point("h", _lognormal(seed=22, median=11.6e-6 * 1.03, sigma=0.002))])
    strict = compare(base, head, min_effect=signoff.PAIRED_MIN_EFFECT)
    assert strict.verdict.tolist() == ["slower"] and strict.significant.iloc[0]
    floored = compare(base, head, min_effect=signoff.PAIRED_MIN_EFFECT, min_abs_seconds=signoff.PAIRED_MIN_ABS_SECONDS)
    assert floored.verdict.tolist() == ["same"] and floored.significant.iloc[0]
    assert exit_code(floored) == 0
    assert "0.5 µs" in report_markdown(floored)


def test_absolute_floor_still_flags_a_five_percent_regression_of_a_25_us_point():
    base = _frame([_point("b", _lognormal(seed=23, median=25e-6, sigma=0.002))])
    head = _frame([_point("h", _lognormal(seed=24, median=25e-6 * 1.05, sigma=0.002))])  # +1.25 us
    out = compare(base, head, min_effect=signoff.PAIRED_MIN_EFFECT, min_abs_seconds=signoff.PAIRED_MIN_ABS_SECONDS)
    assert out.verdict.tolist() == ["slower"]
    # and the improvement side is floored the same way
    out = compare(head, base, min_effect=signoff.PAIRED_MIN_EFFECT, min_abs_seconds=2e-6)
    assert out.verdict.tolist() == ["same"]


def test_absolute_floor_ignores_points_not_in_a_time_unit():
    """A fraction moving by 0.05 is not 0.05 seconds: the floor applies to time units only."""
    bench = "bench_sampler.NightlyBatchDerived.track_bandwidth_fraction"
    base = _frame([_point("b", value=0.50, benchmark=bench)])
    head = _frame([_point("h", value=0.40, benchmark=bench)])
    out = compare(base, head, min_abs_seconds=1.0)
    assert out.verdict.tolist() == ["slower"]  # ratio-only for track_*, and not floored
    latency = "bench_sampler.NightlyBatchDerived.track_latency_us"
    us = (
        _frame([_point("b", value=20.0, benchmark=latency)]).assign(unit="us"),
        _frame([_point("h", value=20.4, benchmark=latency)]).assign(unit="us"),
    )  # +0.4 us, +2%
    out = compare(*us, min_effect=0.01, min_abs_seconds=0.5e-6)
    assert out.verdict.tolist() == ["same"]
    assert compare(*us, min_effect=0.01).verdict.tolist() == ["slower"]
