"""``specsample tune`` (specsample.devtools.tune): its options, checked before any GPU is needed."""

from __future__ import annotations

import json

import pytest

from specsample import cli
from specsample.devtools import tune
from specsample.kernels import express, fast
from specsample.workloads import bytes_required


def test_candidate_replaces_fields_of_its_base():
    name, config = tune.parse_candidate("w8=small:stats_warps=16,speculative_load=true,resample_block=512")
    assert name == "w8"
    assert config.stats_warps == 16 and config.speculative_load is True and config.resample_block == 512
    # the fields not named keep the base's values
    assert config.stats_block == fast.SMALL_BATCH_CONFIG.stats_block
    assert config.fused_insert == fast.SMALL_BATCH_CONFIG.fused_insert
    assert tune.parse_candidate("same=large")[1] == fast.LARGE_BATCH_CONFIG


@pytest.mark.parametrize(
    "text, message",
    [
        ("w8", "expected NAME=BASE"),
        ("w8=huge:stats_warps=8", "base must be one of"),
        ("w8=large:stat_warps=8", "unknown Config fields ['stat_warps']"),
        ("w8=large:stats_warps=3", "power of two"),
        ("w8=large:stats_warps=eight", "invalid literal"),
    ],
)
def test_bad_candidates_say_why(text, message):
    with pytest.raises(ValueError) as e:
        tune.parse_candidate(text)
    assert message in str(e.value)


def test_options_collect_candidates_stages_and_workloads():
    opts = tune.options(["R1-standard-phi0"], ["w8=large:stats_warps=8"], "large,w8", None)
    assert opts.workloads == ("R1-standard-phi0",)
    assert list(opts.candidates) == ["large", "small", "tiny", "w8"]
    assert opts.candidates["w8"].stats_warps == 8
    assert opts.stage_candidates == ("large", "w8")
    assert opts.modules == {}
    # nothing given: every workload, fast's three configurations, the default stage candidates
    default = tune.options()
    assert default.workloads == tuple(tune.WORKLOADS) and list(default.candidates) == ["large", "small", "tiny"]
    assert default.stage_candidates == tune.DEFAULT_STAGE_CANDIDATES


def test_express_candidates_are_express_configs():
    opts = tune.options(
        ["R1-standard-phi0", "R8-standard-phi0"],
        ["b8=small:stats_blocks=8", "w8=large:stats_warps=8,resample_programs=16"],
        "small,b8",
        None,
        "express",
    )
    assert opts.sampler == "express" and opts.module is express
    assert list(opts.candidates) == ["large", "small", "b8", "w8"]
    assert opts.candidates["large"] == express.LARGE_BATCH_CONFIG
    assert opts.candidates["small"] == express.SMALL_BATCH_CONFIG
    assert opts.candidates["b8"] == express.Config(**{**vars(express.SMALL_BATCH_CONFIG), "stats_blocks": 8})
    assert opts.candidates["w8"].resample_programs == 16 and opts.candidates["w8"].stats_warps == 8
    assert not opts.candidates["w8"].fused_insert
    assert opts.stage_candidates == ("small", "b8")
    # fast stays the default sampler, and its bases are not express's
    assert tune.options().sampler == "fast" and tune.options().module is fast


def test_before_imports_an_earlier_fast_module():
    assert tune.options(before="specsample.kernels.fast").modules == {"before": fast}


def test_before_names_several_variants_and_their_stages():
    opts = tune.options(
        before=["specsample.kernels.express", "v2=specsample.kernels.express"], stages="large,v2", sampler="express"
    )
    assert opts.modules == {"before": express, "v2": express}
    assert opts.stage_candidates == ("large", "v2")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(workloads=["R3-nothing"]), "--workload: unknown ['R3-nothing']"),
        (dict(candidates=["small=large:stats_warps=8"]), "--candidate small: the name is taken"),
        (dict(candidates=["mrv2=large"]), "--candidate mrv2: the name is taken"),
        (dict(candidates=["a=large", "a=small"]), "--candidate a: the name is taken"),
        (dict(stages="large,w9"), "--stages: unknown candidates ['w9']"),
        (dict(before="specsample.kernels.no_such_module"), "--before specsample.kernels.no_such_module"),
        (dict(before="specsample.schema"), "has no Pipeline"),
        (dict(before=["specsample.kernels.fast", "specsample.kernels.fast"]), "the name 'before' is taken"),
        (dict(before="large=specsample.kernels.fast"), "the name 'large' is taken"),
        (dict(before="mrv2=specsample.kernels.fast"), "the name 'mrv2' is taken"),
        (dict(sampler="mrv2"), "--sampler: expected one of ['express', 'fast']"),
        (dict(candidates=["t=tiny"], sampler="express"), "base must be one of ['large', 'small']"),
        (
            dict(candidates=["t=small:speculative_load=true"], sampler="express"),
            "unknown Config fields ['speculative_load']",
        ),
        (dict(candidates=["t=small:stats_blocks=2"]), "unknown Config fields ['stats_blocks']"),
    ],
)
def test_bad_options_say_which(kwargs, message):
    with pytest.raises(ValueError) as e:
        tune.options(**kwargs)
    assert message in str(e.value)


def test_cli_refuses_bad_options_before_it_needs_a_gpu(capsys, monkeypatch, tmp_path):
    monkeypatch.chdir(tmp_path)
    assert cli.main(["tune", "--candidate", "w8=large:stat_warps=8"]) == 2
    assert "specsample tune: 'w8=large:stat_warps=8': unknown Config fields" in capsys.readouterr().err
    # good options and no GPU: refused, nothing written
    monkeypatch.setattr("specsample.machine.cuda_unavailable", lambda: "no GPU (test)")
    assert cli.main(["tune", "--candidate", "w8=large:stats_warps=8", "--stages", "w8"]) == 2
    assert "specsample tune times kernels on a GPU" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
    # express: its candidates are checked before the GPU too
    assert cli.main(["tune", "--sampler", "express", "--candidate", "b8=tiny:stats_blocks=8"]) == 2
    assert "base must be one of ['large', 'small']" in capsys.readouterr().err
    assert cli.main(["tune", "--sampler", "express", "--before", "v2=specsample.schema"]) == 2
    assert "--before v2=specsample.schema: the module has no Pipeline" in capsys.readouterr().err
    assert cli.main(["tune", "--sampler", "express", "--candidate", "b8=small:stats_blocks=8"]) == 2
    assert "specsample tune times kernels on a GPU" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_bandwidth_fractions_are_the_nightly_tiers():
    # bytes_required over the whole call's median, over the copy bandwidth: the stages are not
    # calls; 311.2 MB in 110.5 us at 4.211 TB/s is goal 3's 0.668 at abe6f31
    medians = {"mrv2:call": 300.0, "mrv2:stats": 120.0, "large:call": 110.5, "stream80:call": 92.4}
    fractions = tune.bandwidth_fractions(medians, 311_200_000, 4.211e12)
    assert set(fractions) == {"mrv2", "large", "stream80"}
    assert fractions["large"] == pytest.approx(0.668, abs=0.001)
    assert fractions["stream80"] == pytest.approx(0.80, abs=0.001)
    assert fractions["mrv2"] == pytest.approx(311.2e6 / 300e-6 / 4.211e12)


def test_run_writes_each_workloads_medians_bytes_and_fractions(monkeypatch, tmp_path):
    # the GPU parts replaced: the copy bandwidth, the device name and each workload's timing
    monkeypatch.setattr(tune, "copy_bandwidth", lambda: 4e12)
    monkeypatch.setattr(tune.torch.cuda, "get_device_name", lambda: "test GPU")
    monkeypatch.setattr(tune, "tune_workload", lambda name, w, opts, log: {"mrv2:call": 200.0, "large:call": 100.0})
    opts = tune.options(["base-standard-phi0.5", "R1-standard-phi0"], sampler="express")
    lines = []
    results = tune.run(opts, tmp_path / "tune.json", log=lines.append)
    written = json.loads((tmp_path / "tune.json").read_text())
    assert written == json.loads(json.dumps(results)) and written["copy_bandwidth_gbps"] == 4000.0
    required = written["bytes_required"]["base-standard-phi0.5"]
    assert required == bytes_required(tune.WORKLOADS["base-standard-phi0.5"]) > 0
    assert f"large {required / 100e-6 / 4e12:.3f}" in "\n".join(lines)
