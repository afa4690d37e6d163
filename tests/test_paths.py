"""vLLM's newer sampler paths as workload axes (docs/paths.md): the workloads, the adapter's
passing or skipping of each path, the path semantics (FLy's rules, watermark determinism, the
speed paths' draw invariance) and the discovery of new releases. No GPU, no network."""

from __future__ import annotations

import importlib
import json
import math

import pytest
import torch
from vllm_trees import make_wheel

from specsample import discovery, measure, semantics, subjects, tiers
from specsample.reference.fly import fly_prefix, top_k_entropy
from specsample.schema import PATH_AXES, PATH_DEFAULTS, paths_of
from specsample.subjects import SubjectError
from specsample.subjects.vllm import store
from specsample.subjects.vllm.adapter import adapt
from specsample.timing import TimingConfig
from specsample.workloads import Workload, make_inputs, workload_of

SMALL = dict(num_reqs=6, num_speculative_steps=4, vocab_size=2100, placeholder_density=0.0)


def _release(tmp_path, version, **knobs):
    store.extract_wheel(make_wheel(tmp_path, version, **knobs))
    return subjects.get(f"vllm=={version}")


# ---- workloads ---------------------------------------------------------------------------------


def test_default_paths_build_the_same_inputs_and_name():
    w = Workload(**SMALL)
    assert workload_of({**_point(w), **PATH_DEFAULTS}) == w
    assert workload_of(_point(w)) == w
    assert w.name == "R6-K4-V2100-phi0-trailing-standard-logits"
    assert paths_of({}) == ()


def _point(w):
    return dict(
        mode=w.mode,
        draft=w.draft,
        num_reqs=w.num_reqs,
        num_speculative_steps=w.num_speculative_steps,
        vocab_size=w.vocab_size,
        placeholder_density=w.placeholder_density,
        placeholder_pattern=w.placeholder_pattern,
    )


def test_path_fields_are_validated():
    with pytest.raises(ValueError, match="standard or greedy"):
        Workload(**SMALL, mode="block", fly_window_size=2)
    with pytest.raises(ValueError, match="needs draft 'logits'"):
        Workload(**SMALL, draft="one-hot", draft_cache="sharded")
    with pytest.raises(ValueError, match="masked_vocab_fraction"):
        Workload(**SMALL, masked_vocab_fraction=1.0)
    with pytest.raises(ValueError, match="row_entropy"):
        Workload(**SMALL, row_entropy="medium")


def test_masked_vocabulary_is_contiguous_ranges_of_the_asked_fraction():
    w = Workload(**SMALL, masked_vocab_fraction=0.9)
    logits = make_inputs(w)["target_logits"]
    masked = torch.isinf(logits)
    fraction = masked.float().mean(dim=1)
    assert torch.all((fraction - 0.9).abs() < 0.002)
    # few allowed ranges per row (8, plus the kept top token), not scattered tokens
    starts = (masked[:, :-1] & ~masked[:, 1:]).sum(dim=1)
    assert int(starts.max()) <= 9


def test_row_entropy_moves_rows_across_flys_threshold():
    def above(level):
        logits = make_inputs(Workload(**SMALL, row_entropy=level))["target_logits"]
        return (top_k_entropy(logits, 3) >= 0.3).float().mean().item()

    assert above("low") == 0.0
    assert above("high") == 1.0
    assert 0.2 < above("mixed") < 0.8


def test_heavy_tailed_rows_look_like_a_language_models():
    logits = make_inputs(Workload(num_reqs=64, num_speculative_steps=1, vocab_size=32000, logits_shape="heavy-tailed"))[
        "target_logits"
    ]
    logp = logits.log_softmax(dim=1)
    entropy = -(logp.exp() * logp).sum(dim=1)
    top1 = logp.exp().max(dim=1).values
    assert 0.5 < entropy.mean().item() < 3.0
    assert 0.4 < top1.mean().item() < 0.85


def test_watermark_contexts_are_the_previous_tokens():
    w = Workload(num_reqs=2, num_speculative_steps=3, vocab_size=500, watermark=True)
    inputs = make_inputs(w)
    contexts, tokens = inputs["contexts"], inputs["draft_sampled"]
    assert contexts.shape == (8, 4)
    # row j's last context token is the token at local position j - 1 ... the anchor/drafts before it
    assert contexts[1, -1] == tokens[0] and contexts[2, -2:].tolist() == tokens[0:2].tolist()


def test_sharded_cache_holds_the_same_rows_elsewhere():
    w = Workload(**SMALL, draft_cache="sharded", max_num_reqs=9)
    inputs = make_inputs(w)
    rows = inputs["draft_logits_row_mapping"].long()
    slots = inputs["idx_mapping"].long()
    assert int((rows >= 0).sum()) == w.num_reqs
    assert torch.equal(inputs["draft_logits_cache_values"][rows[slots]], inputs["draft_logits"][slots])


# ---- adapter and capabilities ------------------------------------------------------------------


def _launcher(extra: str):
    namespace = {}
    exec(
        "def rejection_sample(target_logits, draft_logits, draft_sampled, cu_num_logits, pos, idx_mapping, "
        "expanded_idx_mapping, expanded_local_pos, temperature, seed, num_speculative_steps, "
        f"synthetic_conditional_rates=None, use_fp64=False, use_block_verification=False{extra}):\n    pass\n",
        namespace,
    )
    return namespace["rejection_sample"]


@pytest.mark.parametrize(
    "extra, paths",
    [
        ("", ()),
        (", watermark_key=None", ()),  # part of a path is not the path
        (", contexts=None, watermarking=None, watermark_key=None", ("watermark",)),
        (", fly_window_size=0, fly_entropy_threshold=0.3, fly_entropy_top_k=3", ("fly",)),
        (", skip_masked_vocab_blocks=False", ("skip_masked_vocab_blocks",)),
    ],
)
def test_a_version_has_a_path_where_its_signature_takes_all_of_it(extra, paths):
    assert adapt(_launcher(extra), "t").capabilities.paths == paths


def test_the_adapter_passes_a_path_only_where_the_workload_turns_it_on():
    adapter = adapt(_launcher(", fly_window_size=0, fly_entropy_threshold=0.3, fly_entropy_top_k=3"), "t")
    plain = make_inputs(Workload(**SMALL))
    assert "fly_window_size" not in adapter.arguments(plain)
    fly = make_inputs(Workload(**SMALL, fly_window_size=2))
    args = adapter.arguments(fly)
    assert (args["fly_window_size"], args["fly_entropy_threshold"], args["fly_entropy_top_k"]) == (2, 0.3, 3)
    with pytest.raises(ValueError, match="no watermark path"):
        adapter.arguments(make_inputs(Workload(**SMALL, watermark=True)))


@pytest.mark.parametrize("name", ["mrv2", "fast", "express", "mrv2-pre50939"])
@pytest.mark.parametrize(
    "paths",
    [dict(fly_window_size=2), dict(watermark=True), dict(skip_masked_vocab_blocks=True), dict(draft_cache="sharded")],
)
def test_our_samplers_skip_every_path_they_lack_with_its_name(name, paths):
    reason = subjects.get(name).unsupported(Workload(**SMALL, **paths))
    if name == "express" and "skip_masked_vocab_blocks" in paths:
        assert reason is None  # express's own masked-block skip
        return
    has = "skip_masked_vocab_blocks" if name == "express" else "none"
    assert reason and f"{name} has no {paths_of(paths)[0]} path (its paths: {has})" in reason


def test_a_path_asked_of_a_subject_without_it_is_a_usage_error(capsys):
    """``specsample compare`` with the skip on: express runs it, mrv2 is named before anything
    is measured."""
    from specsample import cli

    argv = ["compare", "--subjects", "express", "mrv2", "--num-reqs", "2", "--vocab-size", "2100"]
    argv += ["--masked-vocab-fraction", "0.9", "--skip-masked-vocab-blocks", "on"]
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert "mrv2 has no skip_masked_vocab_blocks path (its paths: none)" in err and "express" not in err


def test_express_runs_the_masked_sweep_with_its_skip_and_the_path_check(device):
    """The PathsMasked point with the skip on: express is measured (not skipped) and its path
    check (the same call without the skip emits the same tokens) passes."""
    w = Workload(**SMALL, masked_vocab_fraction=0.9, skip_masked_vocab_blocks=True)
    result = measure.measure_point(["express", "mrv2"], w, TimingConfig("warm", 1, 1, False), device=device, host=True)
    assert result["mrv2"].status == "skipped" and "no skip_masked_vocab_blocks path" in result["mrv2"].reason
    assert result["express"].status == "ok", result["express"]
    assert result["express"].semantics == "same semantics, other stream", result["express"].semantics_detail


def test_our_samplers_run_the_data_only_axes():
    for axes in (dict(masked_vocab_fraction=0.99), dict(logits_shape="heavy-tailed"), dict(row_entropy="high")):
        assert subjects.get("mrv2").unsupported(Workload(**SMALL, **axes)) is None


def test_releases_pass_or_skip_each_path(tmp_path, cache, device):
    shapes = {"9.30.0": ("watermark", False), "9.33.0": ("fly", False), "9.34.0": ("paths", True)}
    loaded = {v: _release(tmp_path, v, signature=sig, cache=c) for v, (sig, c) in shapes.items()}
    assert loaded["9.30.0"].capabilities.paths == ("watermark",)
    assert loaded["9.33.0"].capabilities.paths == ("fly", "watermark")
    assert loaded["9.34.0"].capabilities.paths == (
        "fly",
        "watermark",
        "skip_masked_vocab_blocks",
        "sharded_draft_cache",
    )
    fly = Workload(**SMALL, fly_window_size=2, row_entropy="high")
    assert "vllm==9.30.0 has no fly path (its paths: watermark)" in loaded["9.30.0"].unsupported(fly)
    for version in ("9.33.0", "9.34.0"):
        loaded[version].run(fly, device)
        module = _module(version)
        assert module.RECEIVED["fly_window_size"] == 2 and module.RECEIVED["fly_entropy_top_k"] == 3
    loaded["9.34.0"].run(Workload(**SMALL, draft_cache="sharded"), device)
    assert _module("9.34.0").RECEIVED["row_mapping"] is not None
    loaded["9.34.0"].run(Workload(**SMALL), device)
    assert _module("9.34.0").RECEIVED["row_mapping"] is None and _module("9.34.0").RECEIVED["fly_window_size"] == 0


def _module(version):
    """The loaded launcher's module namespace (its globals), as an object."""
    subject = subjects.get(f"vllm=={version}")
    for cell in subject.prepare_inputs.__closure__:
        value = cell.cell_contents
        if callable(value) and getattr(value, "__name__", "") == "rejection_sample":
            return type("Module", (), value.__globals__)
    raise AssertionError("launcher not found")


# ---- path semantics ----------------------------------------------------------------------------


def test_fly_prefix_follows_the_rules():
    T, F = True, False
    # no deferral without W, or where the entropy gate is closed, or the window does not fit
    assert fly_prefix([T, F, T, T], [T] * 4, [T] * 4, 0) == (1, 0)
    assert fly_prefix([T, F, T, T], [T] * 4, [T, F, T, T], 2) == (1, 0)
    assert fly_prefix([T, T, F, T], [T] * 4, [T] * 4, 2) == (2, 0)
    # a deferral confirmed by its window accepts it and the window; verification goes on
    assert fly_prefix([T, F, T, T], [T] * 4, [T] * 4, 2) == (4, 1)
    assert fly_prefix([F, T, F, T, T], [T] * 5, [T] * 5, 1) == (5, 2)
    # a window that fails rejects the deferred draft after all
    assert fly_prefix([F, T, F, T], [T] * 4, [T] * 4, 2) == (0, 0)
    # an undeferrable draft (a placeholder, p = 0) is never deferred
    assert fly_prefix([T, F, T, T], [T, F, T, T], [T] * 4, 2) == (1, 0)


def test_fly_deferral_happens_at_a_rate_the_row_entropy_controls(tmp_path, cache, device):
    subject = _release(tmp_path, "9.33.0", signature="fly")
    rates = {}
    for level in ("low", "high"):
        w = Workload(num_reqs=24, num_speculative_steps=4, vocab_size=600, fly_window_size=1, row_entropy=level)
        inputs = make_inputs(w, device)
        out = subject.run(w, device, inputs)
        verdict = semantics.check_paths(w, inputs, out, lambda i: subject.run(w, device, i))
        assert verdict.violation is None
        rates[level] = verdict.rates["deferral_rate"]
    assert rates["low"] == 0.0 and rates["high"] > 0.05


def test_a_sampler_that_defers_without_the_entropy_gate_violates_fly(tmp_path, cache, device):
    subject = _release(tmp_path, "9.33.1", signature="fly", misbehave="fly-no-entropy")
    w = Workload(num_reqs=24, num_speculative_steps=4, vocab_size=600, fly_window_size=1, row_entropy="mixed")
    result = measure.measure_point([subject.name], w, TimingConfig("warm", 1, 1, False), device=device, host=True)
    assert result[subject.name].semantics == "violates path semantics"
    assert "FLy's rules" in result[subject.name].semantics_detail


def test_watermarked_draws_are_deterministic_and_use_the_key(tmp_path, cache, device):
    good = _release(tmp_path, "9.30.0", signature="watermark")
    bad = _release(tmp_path, "9.30.1", signature="watermark", misbehave="watermark-unstable")
    w = Workload(num_reqs=20, num_speculative_steps=2, vocab_size=300, watermark=True)
    result = measure.measure_point(
        [good.name, bad.name], w, TimingConfig("warm", 1, 1, False), device=device, host=True
    )
    assert result[good.name].semantics == "same semantics, other stream"
    assert result[bad.name].semantics == "violates path semantics"
    assert "same key and contexts" in result[bad.name].semantics_detail


def test_a_watermark_that_ignores_its_key_is_flagged():
    w = Workload(num_reqs=20, num_speculative_steps=2, vocab_size=300, watermark=True)
    inputs = make_inputs(w)
    out = subjects.get("mrv2").run(
        Workload(num_reqs=20, num_speculative_steps=2, vocab_size=300), "cpu", _plain(inputs)
    )
    verdict = semantics.check_paths(w, inputs, out, lambda i: (out[0].clone(), out[1].clone()))
    assert verdict.violation and "key is not used" in verdict.violation


def _plain(inputs):
    from specsample.workloads import base_inputs

    return base_inputs(inputs)


def test_a_speed_path_that_changes_the_draws_is_flagged():
    w = Workload(**SMALL, masked_vocab_fraction=0.9, skip_masked_vocab_blocks=True)
    inputs = make_inputs(w)
    out = subjects.get("mrv2").run(workload_of({**_point(w), "masked_vocab_fraction": 0.9}), "cpu", _plain(inputs))
    shifted = out[0].clone()
    shifted[0, out[1][0] - 1] += 1

    def call(i):
        return out if "skip_masked_vocab_blocks" not in i else (shifted, out[1])

    assert semantics.check_paths(w, inputs, out, call).violation is None
    assert (
        "skip_masked_vocab_blocks changes the draws"
        in semantics.check_paths(w, inputs, (shifted, out[1]), call).violation
    )


# ---- tiers and discovery -----------------------------------------------------------------------


def test_path_axes_live_only_in_the_path_sweeps():
    for sweep in tiers.sweeps():
        has = [a for a in sweep.axis_names if a in PATH_AXES]
        assert has == (list(PATH_AXES) if "Paths" in sweep.name else [])


def test_discovery_appends_newer_releases_with_a_sampler(tmp_path):
    path = tmp_path / "results" / "discovered_releases.json"
    fetched, lines = [], []

    def fetch(version):
        if version == "0.35.1":
            raise SubjectError("vllm==0.35.1: no MRV2 sampler in the wheel")
        fetched.append(version)

    index = lambda: ["0.33.0", "0.34.0", "0.35.0", "0.35.1", "0.36.0"]  # noqa: E731
    found = discovery.discover(("0.22.0", "0.34.0"), path, index=index, fetch=fetch, log=lines.append)
    assert found == ["0.35.0", "0.36.0"] and fetched == ["0.35.0", "0.36.0"]
    assert json.loads(path.read_text()) == {"releases": ["0.35.0", "0.36.0"]}
    assert any("0.35.1" in line and "not measured" in line for line in lines)
    # append-only: a later run keeps what was found
    assert discovery.discover(("0.36.0",), path, index=lambda: ["0.37.0"], fetch=fetch, log=lines.append) == ["0.37.0"]
    assert json.loads(path.read_text())["releases"] == ["0.35.0", "0.36.0", "0.37.0"]


def test_discovery_without_an_index_says_so_in_one_line_and_goes_on(tmp_path):
    lines = []

    def index():
        raise SubjectError("the package index cannot be read (network unreachable)")

    path = tmp_path / "d.json"
    assert discovery.discover(("0.34.0",), path, index=index, fetch=lambda v: None, log=lines.append) == []
    assert len(lines) == 1 and "cannot be read" in lines[0] and not path.exists()


def test_discovered_releases_extend_every_release_axis(tmp_path, monkeypatch):
    path = tmp_path / "discovered.json"
    path.write_text(json.dumps({"releases": ["0.34.0", "0.35.0"]}))
    before = {s.class_name: s.params for s in tiers.sweeps()}
    monkeypatch.setenv(tiers.DISCOVERED_RELEASES_ENV, str(path))
    try:
        fresh = importlib.reload(tiers)
        assert fresh.MRV2_RELEASES[-1] == "0.35.0" and fresh.NEWEST_RELEASE == "vllm==0.35.0"
        for sweep in fresh.sweeps():
            for was, now in zip(before[sweep.class_name], sweep.params):
                assert now[: len(was)] == was  # append-only
        paths_fly = next(s for s in fresh.sweeps("nightly") if s.name == "PathsFly")
        assert "vllm==0.35.0" in paths_fly.subjects and "vllm==0.34.0" in paths_fly.retired
    finally:
        monkeypatch.delenv(tiers.DISCOVERED_RELEASES_ENV)
        importlib.reload(tiers)


def test_a_malformed_discovered_file_is_a_clear_error(tmp_path):
    path = tmp_path / "d.json"
    path.write_text('{"releases": ["latest"]}')
    with pytest.raises(ValueError, match="expected"):
        tiers.load_discovered(path, ())
