"""The exactness check (specsample/exactness.py, docs/exactness.md), on a CPU.

Statistical power comes from specsample's batched PyTorch reference (``torch-eager``, and the
launcher of the vLLM-shaped trees, which calls it): thousands of trials in a second or two. mrv2's
Triton kernels run under the interpreter at a few dozen trials, where the check is smoke-level.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from vllm_trees import make_wheel

from specsample import cli, exactness, subjects
from specsample.commands import signoff as signoff_commands
from specsample.subjects.vllm import store
from specsample.track.signoff import exactness_rows

LAW = exactness.make_law(vocab_size=8, num_speculative_steps=3, seed=1)


# ---- chi-square and laws ---------------------------------------------------------------------


def test_chi_square_accepts_draws_from_the_law_and_rejects_draws_from_another():
    rng = np.random.default_rng(0)
    p = np.array([0.5, 0.2, 0.15, 0.1, 0.05])
    follows = exactness.chi_square("x", np.bincount(rng.choice(5, 50_000, p=p), minlength=5), p)
    assert follows.df == 4 and follows.p_value > 1e-3
    other = np.array([0.48, 0.22, 0.15, 0.1, 0.05])  # 2 points of mass moved
    off = exactness.chi_square("x", np.bincount(rng.choice(5, 50_000, p=other), minlength=5), p)
    assert off.p_value < 1e-6


def test_chi_square_merges_starved_bins_and_flags_an_impossible_token():
    # the two starved bins hold 4 expected together, still under 5: folded into the smallest bin
    obs, exp = exactness.merged_bins([10, 3, 1, 86], [10.0, 2.0, 2.0, 86.0])
    assert list(obs) == [14.0, 86.0] and list(exp) == [14.0, 86.0]
    obs, exp = exactness.merged_bins([10, 3, 4, 83], [10.0, 3.0, 3.0, 84.0])
    assert list(obs) == [10.0, 83.0, 7.0] and list(exp) == [10.0, 84.0, 6.0]
    t = exactness.chi_square("x", [5, 5, 1], [0.5, 0.5, 0.0])
    assert t.p_value == 0.0 and t.chi2 == float("inf")
    assert exactness.chi_square("x", [0, 0], [0.5, 0.5]) is None


def test_acceptance_laws_are_distributions_and_block_accepts_at_least_as_much():
    std, blk = exactness.standard_acceptance_law(LAW), exactness.block_acceptance_law(LAW)
    for law in (std, blk):
        assert law.shape == (4,) and (law >= 0).all() and abs(law.sum() - 1) < 1e-12
    mean = np.arange(4)
    assert (mean * blk).sum() >= (mean * std).sum() - 1e-12
    # drafts equal to the target: every draft accepted, both ways
    same = exactness.Law(LAW.target_logits, np.stack([LAW.target_logits] * 3))
    for law in (exactness.standard_acceptance_law(same), exactness.block_acceptance_law(same)):
        assert law[-1] == pytest.approx(1.0)


def test_a_verdict_needs_a_p_value_below_the_bonferroni_threshold():
    tests = [exactness.Test("position 0", 30.0, 7, 1e-5, 100), exactness.Test("acceptance", 1.0, 3, 0.8, 100)]
    verdict, threshold, worst = exactness.verdict_of(tests, 5)
    assert threshold == pytest.approx(2e-5) and verdict == "biased" and worst.what == "position 0"
    assert exactness.verdict_of(tests[1:], 5)[0] == "exact"


# ---- subjects ----------------------------------------------------------------------------------


def _check(subject, mode="standard", drafting="independent", trials=6000, drafter=None):
    return exactness.check(subject, mode, drafting, law=LAW, num_trials=trials, device="cpu", drafter=drafter)


@pytest.mark.parametrize("mode", ["standard", "block"])
def test_the_reference_is_exact_and_the_planted_sampler_is_flagged(mode):
    row = _check(subjects.get("torch-eager"), mode)
    assert row.verdict == "exact", row.summary
    assert abs(row.mean_accepted - row.expected_mean_accepted) < 0.05
    planted = _check(exactness.planted_subject("torch-eager", rate=0.15), mode)
    assert planted.verdict == "biased" and planted.worst["what"] == "position 0", planted.summary
    assert planted.summary.startswith("biased (chi2=") and "position 0, independent)" in planted.summary


def test_mrv2_under_the_interpreter_is_exact_at_a_tiny_size():
    row = _check(subjects.get("mrv2"), "block", trials=24)
    assert row.verdict == "exact", row.summary
    assert [t["what"] for t in row.tests][:1] == ["position 0"] and row.tests[0]["n"] == 24


def test_a_subject_without_a_drafting_sampler_skips_production_drafting():
    row = _check(subjects.get("torch-eager"), drafting="production")
    assert row.verdict == "skipped" and "ships no drafting sampler" in row.reason


def test_production_drafting_on_the_shared_stream_is_flagged(tmp_path, cache):
    """A 0.28.0-shaped tree (no drafting flag) draws its drafts on the verifier's (seed, position)
    stream: biased, and so does a 0.27.1-shaped one, whose cache arguments have the older names.
    A 0.29.0-shaped tree's production call salts the stream: exact; without the flag: biased."""
    store.extract_wheel(make_wheel(tmp_path, "9.7.0", gumbel="processed"))
    store.extract_wheel(make_wheel(tmp_path, "9.8.0", gumbel="unsalted"))
    store.extract_wheel(make_wheel(tmp_path, "9.9.0", gumbel="flag"))
    older, old, new = (exactness.drafting_of(f"vllm=={v}") for v in ("9.7.0", "9.8.0", "9.9.0"))
    assert not old.has_flag and new.has_flag and not older.has_flag
    assert older.cache_arguments == ("output_processed_logits", "output_processed_logits_col")
    assert old.cache_arguments == new.cache_arguments == ("logits_cache", "logits_cache_col")
    trials = 12_000
    for name, drafter in (("vllm==9.7.0", older), ("vllm==9.8.0", old)):
        shared = _check(subjects.get(name), drafting="production", trials=trials, drafter=drafter)
        assert shared.verdict == "biased", (name, shared.summary)
    assert _check(subjects.get("vllm==9.8.0"), drafting="production-unsalted", drafter=old).verdict == "skipped"
    salted = _check(subjects.get("vllm==9.9.0"), drafting="production", trials=trials, drafter=new)
    assert salted.verdict == "exact", salted.summary
    unsalted = _check(subjects.get("vllm==9.9.0"), drafting="production-unsalted", trials=trials, drafter=new)
    assert unsalted.verdict == "biased" and "production-unsalted)" in unsalted.summary


# ---- command line and sign-off -----------------------------------------------------------------


def test_the_command_writes_rows_and_exits_by_verdict(tmp_path, monkeypatch):
    monkeypatch.setattr(exactness, "PLANTED_BASE", "torch-eager")
    monkeypatch.setattr(exactness, "PLANTED_RATE", 0.3)
    argv = ["exactness", "--subjects", "torch-eager", "planted", "--device", "cpu", "--num-trials", "3000"]
    argv += ["--vocab-size", "8", "--modes", "standard", "--results-dir", str(tmp_path), "--machine", "m"]
    assert cli.main(argv + ["--commit", "HEAD"]) == 0  # the real subject exact, the control flagged
    (path,) = (tmp_path / "m").glob("*.exactness")
    rows = exactness.load(path)
    assert [(r["subject"], r["verdict"]) for r in rows] == [("torch-eager", "exact"), ("planted", "biased")]
    assert rows[0]["machine"] == "m" and len(rows[0]["commit"]) == 40
    monkeypatch.setattr(exactness, "PLANTED_RATE", 0.0)  # a control that is not flagged
    assert cli.main(argv + ["--subjects", "planted"]) == 1


def test_the_nightly_step_checks_ours_the_releases_and_the_control(tmp_path, monkeypatch, cache):
    """Every (subject, mode, drafting) of the nightly's list filed as one file; a release that
    cannot load is failed rows, and the control is still checked after it."""
    monkeypatch.setattr(exactness, "NIGHTLY_OURS", ("torch-eager",))
    monkeypatch.setattr(exactness, "PLANTED_BASE", "torch-eager")
    monkeypatch.setattr(exactness, "PLANTED_RATE", 0.3)
    commit = "ab" * 20
    path, rows = exactness.nightly(tmp_path, "m", commit, ("vllm==0.99.0",), device="cpu", num_trials=3000)
    assert path == tmp_path / "m" / f"{commit[:8]}{exactness.SUFFIX}"
    verdicts = {(r.subject, r.mode, r.drafting): r.verdict for r in rows}
    assert len(rows) == len(verdicts) == 3 * len(exactness.MODES) * len(exactness.DRAFTINGS)
    for mode in exactness.MODES:
        assert verdicts["torch-eager", mode, "independent"] == "exact"
        assert verdicts["torch-eager", mode, "production"] == "skipped"
        assert verdicts["planted", mode, "independent"] == "biased"
        assert {verdicts["vllm==0.99.0", mode, d] for d in exactness.DRAFTINGS} == {"failed"}
    written = exactness.load(path)
    assert len(written) == len(rows) and {(r["machine"], r["commit"]) for r in written} == {("m", commit)}


def test_a_run_stopped_part_way_keeps_the_subjects_it_finished(tmp_path, monkeypatch):
    """The command writes each subject's rows as it finishes them: stopped during the second
    subject (a GPU box's time limit), the file holds the first one's rows, whole."""
    real_check = exactness.check

    def stop_at_fast(subject, *args, **kwargs):
        if subject.name == "fast":
            raise KeyboardInterrupt  # the run killed here
        return real_check(subject, *args, **kwargs)

    monkeypatch.setattr(exactness, "check", stop_at_fast)
    argv = ["exactness", "--subjects", "torch-eager", "fast", "--device", "cpu", "--num-trials", "2000"]
    argv += ["--vocab-size", "8", "--results-dir", str(tmp_path), "--machine", "m", "--commit", "HEAD"]
    assert cli.main(argv) == 130
    (path,) = (tmp_path / "m").glob("*")  # no partial file left beside it
    rows = exactness.load(path)
    assert {(r["subject"], r["mode"]) for r in rows} == {("torch-eager", "standard"), ("torch-eager", "block")}


@pytest.mark.parametrize(
    "extra",
    [
        ["--subjects", "nonsense"],
        ["--subjects", "mrv2", "--vocab-size", "1"],
        ["--subjects", "mrv2", "--vocab-size", "64", "--num-speculative-steps", "5"],
    ],
)
def test_bad_input_exits_2_and_writes_nothing(tmp_path, extra, capsys):
    assert cli.main(["exactness", "--device", "cpu", "--results-dir", str(tmp_path), *extra]) == 2
    assert "specsample exactness" in capsys.readouterr().err or "nonsense" in extra
    assert not list(tmp_path.rglob("*.exactness"))


def test_an_unknown_drafting_is_refused_by_the_parser(tmp_path):
    with pytest.raises(SystemExit) as exc:
        cli.main(["exactness", "--subjects", "mrv2", "--drafting", "sometimes", "--results-dir", str(tmp_path)])
    assert exc.value.code == 2 and not list(tmp_path.rglob("*.exactness"))


def test_signoff_fails_a_head_that_turns_biased():
    def row(subject, verdict):
        return {
            "subject": subject,
            "mode": "standard",
            "drafting": "independent",
            "verdict": verdict,
            "worst": {"what": "position 0", "chi2": 99.0, "df": 7, "p_value": 1e-9, "n": 10},
        }

    base, head = [row("mrv2@aaaa", "exact")], [row("mrv2@bbbb", "biased")]
    text, turned = exactness_rows.section(base, head)
    assert turned and "biased (chi2=99.0, df=7, position 0, independent)" in text and "turned biased" in text
    assert exactness_rows.exit_code(1, turned) == 2
    text, turned = exactness_rows.section(base, [row("mrv2@bbbb", "exact")])
    assert not turned and exactness_rows.exit_code(0, turned) == 0
    # biased on both sides is reported, but is not a change the head made
    assert not exactness_rows.section([row("a", "biased")], [row("b", "biased")])[1]
    json.dumps(base)


def test_the_releases_page_shows_the_committed_exactness_rows(tmp_path):
    import synthetic_results as sr

    from specsample.dashboard import build_dashboard
    from specsample.dashboard.exactness import exactness_rows
    from specsample.track.results import load_results

    results = sr.write_asv_results(sr.releases_frame(), tmp_path / "results")
    df, _ = load_results(results)
    machine = sorted(set(df["machine"]))[0]
    worst = {"what": "position 1", "chi2": 812.3, "df": 15, "p_value": 1e-160, "n": 150_000}
    lines = [
        {"subject": "mrv2", "mode": "standard", "drafting": "independent", "verdict": "exact", "commit": "c" * 40},
        {"subject": "vllm==0.30.0", "mode": "standard", "drafting": "production", "verdict": "exact"},
        {"subject": "vllm==0.28.0", "mode": "standard", "drafting": "production", "verdict": "biased", "worst": worst},
        {"subject": "mrv2", "mode": "block", "drafting": "production", "verdict": "skipped", "reason": "none"},
    ]
    (results / machine / "cccccccc.exactness").write_text("".join(json.dumps(r) + "\n" for r in lines))
    rows = exactness_rows(results, machine)
    assert [r["subject"] for r in rows] == ["vllm==0.28.0", "vllm==0.30.0", "mrv2"]  # skipped left out
    assert rows[0]["summary"] == "biased (chi2=812.3, df=15, position 1, production)"
    build_dashboard(df, tmp_path / "site", results_dir=results)
    page = (tmp_path / "site" / "releases.html").read_text(encoding="utf-8")
    assert "Exactness per release" in page and "biased (chi2=812.3, df=15, position 1, production)" in page


def test_signoff_checks_both_sides_and_fails_a_head_that_turned_biased(monkeypatch):
    import argparse

    asked = []

    def fake_run(names, draftings, **kwargs):
        asked.append((list(names), list(draftings)))
        verdict = "biased" if names[0] == "vllm==9.2.0" else "exact"
        return [
            exactness.Row(
                names[0],
                "standard",
                "independent",
                verdict,
                worst={"what": "position 2", "chi2": 70.0, "df": 15, "p_value": 1e-9, "n": 9},
            )
        ]

    monkeypatch.setattr(exactness, "run", fake_run)
    args = argparse.Namespace(base="vllm==9.1.0", head="vllm==9.2.0", vllm_repo=None, subject=None)
    report, code = signoff_commands._signoff_exactness(args, {"machine": "m"}, "timing report\n", 0)
    assert asked == [(["vllm==9.1.0"], ["independent", "production"]), (["vllm==9.2.0"], ["independent", "production"])]
    assert code == 2 and "turned biased" in report and report.startswith("timing report")
    args.base, args.head = args.head, args.base  # the head fixed a bias: no failure
    assert signoff_commands._signoff_exactness(args, {"machine": "m"}, "", 1)[1] == 1
    report, code = signoff_commands._signoff_exactness(args, {"device": "cpu"}, "", 0)
    assert code == 0 and "Not checked: no GPU" in report
