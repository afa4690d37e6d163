"""vLLM subjects: fetching, the closure, the isolated loader, the adapter and fault isolation.

The trees are built here (tests/vllm_trees.py); the last tests fetch a real release from the
package index (CI reaches it) and compare it with mrv2 draw for draw under the interpreter.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from batches import emitted
from vllm_trees import CACHE, ROOT, ROWS, make_checkout, make_wheel, tree_files

from specsample import semantics, subjects, tiers, worker
from specsample.schema import parse_subject
from specsample.subjects.vllm import store
from specsample.subjects.vllm.closure import closure
from specsample.subjects.vllm.loader import LeftOut
from specsample.workloads import Workload, make_inputs

W = Workload(num_reqs=3, num_speculative_steps=3, vocab_size=300, placeholder_density=0.0, seed=3)


def _fetch(tmp_path, version, **knobs):
    return store.extract_wheel(make_wheel(tmp_path, version, **knobs))


# ---- closure and cache -------------------------------------------------------------------------


def test_closure_follows_imports_and_leaves_packages_and_the_shim_out():
    files = tree_files()
    found = closure(files.get)
    assert sorted(found.files) == sorted([ROOT, "vllm/v1/worker/gpu/sample/helper.py"])
    assert found.shim_names == {"tl", "triton"} and not found.missing


def test_closure_follows_what_the_launcher_reaches_and_leaves_the_rest_as_stand_ins():
    # 0.34.0's shape: the cache module's top imports a runtime for a method nothing calls and
    # an annotation; its Triton helper and the host function the launcher calls are followed
    found = closure(tree_files(cache=True).get)
    assert sorted(found.files) == sorted([ROOT, "vllm/v1/worker/gpu/sample/helper.py", CACHE, ROWS])
    assert found.stand_ins == {"vllm.distributed.state": {"get_group"}, "vllm.v1.worker.gpu.batch": {"Batch"}}
    assert not found.missing


def test_closure_follows_a_body_only_when_it_is_reached():
    files = {
        ROOT: (
            "from vllm.a import used\n"
            "from vllm.b import Base\n"
            "from vllm.f import Annotation\n"
            "class Unreached(Base):\n"
            "    def method(self):\n"
            "        from vllm.c import lazy\n"
            "def rejection_sample(x: Annotation = None) -> Annotation:\n"
            "    from vllm.g import inner\n"
            "    return used(inner(x))\n"
            "def other():\n"
            "    from vllm.d import never\n"
        ),
        "vllm/a.py": "from vllm.e import deep\ndef used(x):\n    return deep(x)\n",
        "vllm/b.py": "class Base:\n    pass\n",
        "vllm/c.py": "lazy = 1\n",
        "vllm/d.py": "never = 1\n",
        "vllm/e.py": "def deep(x):\n    return x\n",
        "vllm/f.py": "class Annotation:\n    pass\n",
        "vllm/g.py": "def inner(x):\n    return x\n",
    }
    found = closure(files.get)
    # a base class runs at import; the launcher's body, its import and what it calls are reached;
    # a method of a class nothing reaches, a function nothing calls and an annotation are not
    assert sorted(found.files) == sorted([ROOT, "vllm/a.py", "vllm/b.py", "vllm/e.py", "vllm/g.py"])
    assert found.stand_ins == {"vllm.f": {"Annotation"}} and not found.missing


def test_closure_records_a_module_that_is_not_there():
    found = closure(tree_files(misbehave="missing-module").get)
    assert found.missing == {"vllm.v1.worker.gpu.sample.not_there"}


def test_fetch_from_a_wheel_keeps_only_the_closure_with_hashes(tmp_path, cache):
    entry = _fetch(tmp_path, "9.1.0")
    assert entry.files == sorted([ROOT, "vllm/v1/worker/gpu/sample/helper.py"])
    manifest = json.loads((cache / "vllm" / "releases" / "9.1.0" / "manifest.json").read_text())
    assert manifest["release"] == "9.1.0" and manifest["wheel"] == "vllm-9.1.0-py3-none-any.whl"
    assert set(manifest["files"]) == set(entry.files) and all(len(h) == 64 for h in manifest["files"].values())
    assert not (cache / "vllm" / "releases" / "9.1.0" / "files" / "vllm" / "__init__.py").exists()
    assert store.cached_releases() == ["9.1.0"]


def test_a_release_without_the_mrv2_sampler_is_refused(tmp_path, cache):
    files = {k: v for k, v in tree_files().items() if k != ROOT}
    with pytest.raises(subjects.SubjectError, match="has no Model Runner V2 rejection sampler.*from 0.22.0 on"):
        store.extract_wheel(make_wheel(tmp_path, "0.21.0", files=files))


def test_a_corrupt_wheel_is_refused(tmp_path, cache):
    bad = tmp_path / "vllm-9.2.0-py3-none-any.whl"
    bad.write_bytes(b"not a zip")
    with pytest.raises(subjects.SubjectError, match="not a readable wheel"):
        store.extract_wheel(bad)


def test_a_corrupt_cache_entry_is_refused(tmp_path, cache):
    entry = _fetch(tmp_path, "9.3.0")
    (entry.root / ROOT).write_text("# edited\n")
    with pytest.raises(subjects.SubjectError, match="corrupt cache entry.*does not match its manifest hash"):
        subjects.get("vllm==9.3.0")
    (entry.root / ROOT).unlink()
    with pytest.raises(subjects.SubjectError, match="corrupt cache entry.*is missing"):
        subjects.get("vllm==9.3.0")


def test_vllm_list_of_a_corrupt_cache_entry_is_one_line_and_exit_2(tmp_path, cache, monkeypatch, capsys):
    """Exit 1 of ``vllm list --index`` tells the nightly glue that a newer release exists; a
    corrupt entry must not end in a traceback (which also exits 1)."""
    from specsample import cli

    entry = _fetch(tmp_path, "9.3.0")
    (entry.root / ROOT).unlink()
    monkeypatch.setattr(store, "index_releases", lambda: [*tiers.MRV2_RELEASES])
    for argv in (["vllm", "list"], ["vllm", "list", "--index"]):
        assert cli.main(argv) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err
        assert err.startswith("specsample vllm list: vllm==9.3.0: corrupt cache entry") and "fetch it again" in err
    (entry.root / store.MANIFEST).write_text("{not json")
    assert cli.main(["vllm", "list"]) == 2
    assert capsys.readouterr().err.startswith("specsample vllm list: vllm==9.3.0: corrupt cache entry")


def test_vllm_list_of_an_empty_cache_says_how_releases_get_there(tmp_path, cache, capsys):
    from specsample import cli

    assert cli.main(["vllm", "list"]) == 0
    assert "no vLLM release cached; `specsample vllm fetch X.Y.Z`" in capsys.readouterr().out
    _fetch(tmp_path, "9.3.0")
    assert cli.main(["vllm", "list"]) == 0
    out = capsys.readouterr().out
    assert "no vLLM release cached" not in out and "vllm==9.3.0: " in out


def test_a_release_not_in_the_cache_says_how_to_fetch_it(cache):
    with pytest.raises(
        subjects.SubjectError, match=r"vllm==0\.30\.0 is not in the cache.*specsample vllm fetch 0\.30\.0"
    ):
        subjects.get("vllm==0.30.0")
    # a version that is no MRV2 release specsample knows: no fetch suggested, the index's list is
    with pytest.raises(subjects.SubjectError) as raised:
        subjects.get("vllm==9.9.9")
    message = str(raised.value)
    assert "is not an MRV2 release specsample knows (0.22.0 to " in message and "vllm list --index" in message
    assert "vllm fetch" not in message


# ---- loading -----------------------------------------------------------------------------------


def test_a_loaded_release_runs_and_matches_its_reference(tmp_path, cache, device):
    _fetch(tmp_path, "9.4.0")
    subject = subjects.get("vllm==9.4.0")
    assert subject.provenance["release"] == "9.4.0" and set(subject.provenance["files"]) == {
        ROOT,
        "vllm/v1/worker/gpu/sample/helper.py",
    }
    assert subject.provenance["ignored_arguments"] == ["watermark_key"]  # a newer argument, left at its default
    assert "vllm" not in sys.modules and not any(k.startswith("vllm.") for k in sys.modules)
    inputs = make_inputs(W, device=device)
    out = subject.run(W, device, inputs)
    assert semantics.classify(inputs, out, subjects.get("mrv2").run(W, device, inputs)).semantics == "same draws"


def test_a_release_with_a_draft_logits_cache_runs_without_loading_the_runtime(tmp_path, cache, device, capsys):
    from specsample import cli

    entry = _fetch(tmp_path, "9.4.1", cache=True)
    assert CACHE in entry.files and "vllm/distributed/state.py" not in entry.files
    assert cli.main(["vllm", "list"]) == 0
    assert (
        "vllm==9.4.1: 4 files from vllm-9.4.1-py3-none-any.whl (2 modules it imports left out)"
        in capsys.readouterr().out
    )
    subject = subjects.get("vllm==9.4.1")  # the runtime modules raise if imported
    assert subject.provenance["stand_ins"] == {
        "vllm.distributed.state": ["get_group"],
        "vllm.v1.worker.gpu.batch": ["Batch"],
    }
    for draft in ("logits", "one-hot"):
        w = Workload(num_reqs=3, num_speculative_steps=3, vocab_size=300, draft=draft, placeholder_density=0.3, seed=5)
        inputs = make_inputs(w, device=device)
        out = subject.run(w, device, inputs)  # the tree checks the cache's values and row mapping
        assert semantics.classify(inputs, out, subjects.get("mrv2").run(w, device, inputs)).semantics == "same draws"


def test_a_left_out_name_that_is_used_names_itself(tmp_path, cache, device):
    _fetch(tmp_path, "9.4.2", cache=True, misbehave="left-out")
    with pytest.raises(LeftOut, match=r"vllm==9\.4\.2: vllm\.distributed\.state\.get_group was left out"):
        subjects.get("vllm==9.4.2").run(W, device)


def test_an_entry_from_an_older_closure_rule_is_walked_again_from_its_own_files(tmp_path, cache, device):
    # rule 1 followed every import: the entry holds the runtime too (0.34.0: 1,688 files, 33 MB)
    entry = _fetch(tmp_path, "9.4.3", cache=True)
    manifest_path = cache / "vllm" / "releases" / "9.4.3" / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    files = tree_files(cache=True)
    for extra in ("vllm/distributed/state.py", "vllm/v1/worker/gpu/batch.py"):
        (entry.root / extra).parent.mkdir(parents=True, exist_ok=True)
        (entry.root / extra).write_text(files[extra])
        manifest["files"][extra] = hashlib.sha256(files[extra].encode()).hexdigest()
    for key in ("closure_rule", "stand_ins"):
        del manifest[key]
    manifest_path.write_text(json.dumps(manifest))
    subject = subjects.get("vllm==9.4.3")
    rewritten = json.loads(manifest_path.read_text())
    assert rewritten["closure_rule"] == 2 and rewritten["rewalked_from_rule"] == 1
    assert set(rewritten["files"]) == set(entry.files) and not (entry.root / "vllm/distributed/state.py").exists()
    assert rewritten["wheel"] == "vllm-9.4.3-py3-none-any.whl"
    subject.run(W, device)
    # a later rule's entry holds fewer files than a walk may need: fetched again, never rewalked
    manifest_path.write_text(json.dumps(dict(rewritten, closure_rule=99)))
    subjects._resolve.cache_clear()
    with pytest.raises(
        subjects.SubjectError, match=r"vllm==9\.4\.3: cache entry .* closure rule 99, not 2; fetch it again"
    ):
        subjects.get("vllm==9.4.3")


def test_two_releases_live_in_one_process(tmp_path, cache, device):
    _fetch(tmp_path, "9.5.0", marker=1)
    _fetch(tmp_path, "9.6.0", marker=2)
    first, second = subjects.get("vllm==9.5.0"), subjects.get("vllm==9.6.0")
    markers = []
    for s in (first, second, first):
        call = s.prepare(W, device)
        markers.append(call.call.fn.func.__globals__["MARKER"])
    assert markers == [1, 2, 1]


def test_the_installed_vllm_is_read_where_it_lies_edits_included(tmp_path, cache, device, monkeypatch):
    """``vllm``: the vLLM this environment would import, read in place without running its
    ``__init__``; with an editable install of a checkout that is its working tree, so an edit
    not committed is what the next load runs."""
    import importlib

    monkeypatch.setattr(sys, "path", [p for p in sys.path if not (Path(p) / "vllm").is_dir()])
    with pytest.raises(subjects.SubjectError, match="vllm: no vLLM is installed in this environment"):
        subjects.get("vllm")
    site = tmp_path / "checkout"
    for path, text in tree_files(marker=7).items():
        (site / path).parent.mkdir(parents=True, exist_ok=True)
        (site / path).write_text(text)
    monkeypatch.syspath_prepend(str(site))  # what an editable install's path entry does
    importlib.invalidate_caches()
    subject = subjects.get("vllm")
    assert subject.provenance["kind"] == "vllm-installed" and subject.provenance["location"] == str(site)
    assert set(subject.provenance["files"]) == {ROOT, "vllm/v1/worker/gpu/sample/helper.py"}
    assert subject.prepare(W, device).call.fn.func.__globals__["MARKER"] == 7
    inputs = make_inputs(W, device=device)
    out = subject.run(W, device, inputs)
    assert semantics.classify(inputs, out, subjects.get("mrv2").run(W, device, inputs)).semantics == "same draws"
    (site / ROOT).write_text(tree_files(marker=8)[ROOT])  # edited in place: no commit, no reinstall
    subjects._resolve.cache_clear()
    assert subjects.get("vllm").prepare(W, device).call.fn.func.__globals__["MARKER"] == 8


def test_a_module_that_raises_on_import_is_a_clear_error(tmp_path, cache):
    _fetch(tmp_path, "9.7.0", misbehave="raise-on-import")
    with pytest.raises(
        subjects.SubjectError,
        match=r"vllm==9\.7\.0: importing .*rejection_sampler_utils failed in "
        r"vllm/v1/worker/gpu/spec_decode/rejection_sampler_utils.py line \d+: RuntimeError: this release",
    ):
        subjects.get("vllm==9.7.0")


def test_a_missing_module_names_the_module_and_the_subject(tmp_path, cache):
    _fetch(tmp_path, "9.8.0", misbehave="missing-module")
    with pytest.raises(
        subjects.SubjectError,
        match=r"vllm==9\.8\.0: vllm.v1.worker.gpu.sample.not_there is not in its extracted closure",
    ):
        subjects.get("vllm==9.8.0")


def test_a_name_the_shim_does_not_provide_is_a_clear_error(tmp_path, cache):
    _fetch(tmp_path, "9.9.1", misbehave="bad-shim")
    with pytest.raises(
        subjects.SubjectError,
        match=r"vllm==9\.9\.1: its Triton files import gluon from vllm.triton_utils, which specsample does not provide",
    ):
        subjects.get("vllm==9.9.1")


# ---- the adapter -------------------------------------------------------------------------------


def test_an_older_signature_skips_block_mode_with_a_reason(tmp_path, cache, device):
    _fetch(tmp_path, "9.10.0", signature="no-block")
    subject = subjects.get("vllm==9.10.0")
    block = Workload(num_reqs=2, num_speculative_steps=2, vocab_size=300, mode="block")
    assert "supports modes ('greedy', 'standard', 'synthetic'), not 'block'" in subject.unsupported(block)
    with pytest.raises(subjects.NotSupported):
        subject.prepare(block, device)
    assert subject.unsupported(W) is None
    subject.run(W, device)


def test_a_signature_that_cannot_be_adapted_is_refused(tmp_path, cache):
    _fetch(tmp_path, "9.11.0", signature="unfillable")
    with pytest.raises(subjects.SubjectError, match="requires contexts, which specsample cannot fill"):
        subjects.get("vllm==9.11.0")


def test_draft_logits_run_at_temperature_one_only():
    from specsample.subjects.vllm.adapter import adapt

    def rejection_sample(
        target_logits,
        draft_logits,
        draft_sampled,
        cu_num_logits,
        pos,
        idx_mapping,
        expanded_idx_mapping,
        expanded_local_pos,
        temperature,
        seed,
        num_speculative_steps,
    ):
        pass

    caps = adapt(rejection_sample, "vllm==x").capabilities
    assert caps.modes == ("greedy", "standard") and not caps.tempered_draft_logits
    s = subjects.Subject("vllm==x", "", caps, lambda inputs: None)
    assert "T = 1 only" in s.unsupported(Workload(temperature=0.7))
    assert s.unsupported(Workload(temperature=0.7, draft="one-hot")) is None


# ---- a checkout's refs ---------------------------------------------------------------------------


def test_refs_of_a_checkout_are_subjects(tmp_path, cache, monkeypatch, device):
    repo, (old, new) = make_checkout(tmp_path / "vllm-src", [tree_files(marker=1), tree_files(marker=2)])
    monkeypatch.setenv("SPECSAMPLE_VLLM_REPO", str(repo))
    a, b = subjects.get(f"vllm@{old[:10]}"), subjects.get("vllm@main")
    assert a.provenance["commit"] == old and b.provenance["commit"] == new
    assert a.prepare(W, device).call.fn.func.__globals__["MARKER"] == 1
    assert b.prepare(W, device).call.fn.func.__globals__["MARKER"] == 2
    with pytest.raises(subjects.SubjectError, match="no ref 'nope' in the vLLM checkout"):
        subjects.get("vllm@nope")


def test_a_ref_without_a_checkout_is_not_supported_here(cache, monkeypatch):
    """Not an error of the subject: the nightly tier's vllm@main is skipped on a box without one."""
    monkeypatch.delenv("SPECSAMPLE_VLLM_REPO", raising=False)
    with pytest.raises(
        subjects.NotSupported, match=r"no vLLM checkout given \(--vllm-repo PATH or \$SPECSAMPLE_VLLM_REPO\)"
    ):
        subjects.get("vllm@main")


# ---- fault isolation ---------------------------------------------------------------------------


def _units(phis=(0.0, 0.5, 0.0), drafts=None):
    drafts = drafts or ("logits",) * len(phis)
    points = [
        dict(
            mode="standard",
            draft=draft,
            num_reqs=2,
            num_speculative_steps=2,
            vocab_size=300,
            placeholder_density=phi,
            placeholder_pattern="trailing",
        )
        for phi, draft in zip(phis, drafts)
    ]
    return [worker.Unit(f"u/{i}", p, ("mrv2", "vllm==9.12.0")) for i, p in enumerate(points)]


OPTIONS = worker.JobOptions(device="cpu", host=True, num_samples=2, calls_per_sample=1, stall_s=120)


def test_a_subject_that_kills_its_process_costs_only_its_own_points(tmp_path, cache):
    _fetch(tmp_path, "9.12.0", misbehave="exit")
    outcome = worker.run_units(_units(), OPTIONS, log=lambda line: None)
    records = outcome.records
    assert records["u/0"]["vllm==9.12.0"]["status"] == "ok" and records["u/2"]["vllm==9.12.0"]["status"] == "ok"
    crashed = records["u/1"]["vllm==9.12.0"]
    assert crashed["status"] == "crashed" and "exited with code 42" in crashed["reason"]
    assert all(records[k]["mrv2"]["status"] == "ok" for k in records)  # nobody else's points lost
    assert outcome.workers == 2 and [c[:2] for c in outcome.crashes] == [("u/1", "vllm==9.12.0")]
    assert outcome.provenance["vllm==9.12.0"]["release"] == "9.12.0"


def test_a_subject_that_crashes_twice_is_not_run_again(tmp_path, cache):
    _fetch(tmp_path, "9.12.0", misbehave="exit")
    outcome = worker.run_units(_units((0.5, 0.5, 0.5, 0.0)), OPTIONS, log=lambda line: None)
    statuses = [outcome.records[f"u/{i}"]["vllm==9.12.0"]["status"] for i in range(4)]
    assert statuses == ["crashed", "crashed", "crashed", "crashed"]
    reason = outcome.records["u/2"]["vllm==9.12.0"]["reason"]
    assert "not run: crashed 2 times in standard mode, logits drafts" in reason
    assert outcome.workers == 3  # two crashes, then one worker for the rest
    assert all(outcome.records[f"u/{i}"]["mrv2"]["status"] == "ok" for i in range(4))


def test_a_crash_with_one_draft_kind_does_not_stop_the_other(tmp_path, cache):
    """The count is per mode and draft kind: crashes with draft logits leave one-hot points run."""
    _fetch(tmp_path, "9.12.0", misbehave="exit")
    units = _units((0.5, 0.5, 0.0, 0.0), drafts=("logits", "logits", "logits", "one-hot"))
    outcome = worker.run_units(units, OPTIONS, log=lambda line: None)
    statuses = [outcome.records[f"u/{i}"]["vllm==9.12.0"]["status"] for i in range(4)]
    assert statuses == ["crashed", "crashed", "crashed", "ok"]
    assert "not run" in outcome.records["u/2"]["vllm==9.12.0"]["reason"]


def test_after_a_crash_the_subjects_likeliest_to_crash_run_first(tmp_path, cache, monkeypatch):
    """A crash costs the set-up of every subject run before it in that worker: the fresh worker
    starts the crashed point with the subjects not yet run there, and every later point with
    the subjects that crashed, the most recent first; each point still gets every record."""
    _fetch(tmp_path, "9.12.0", misbehave="exit")
    _fetch(tmp_path, "9.13.0", misbehave="exit")
    subjects_ = ("mrv2", "vllm==9.12.0", "vllm==9.13.0", "fast")
    units = [worker.Unit(u.key, u.point, subjects_) for u in _units((0.5, 0.5))]
    given, real = [], worker._run_worker

    def run_worker(units, *args, **kwargs):
        done, crash, started = real(units, *args, **kwargs)
        given.append(([(u.key, u.subjects) for u in units], crash[:2] if crash else None, started))
        return done, crash, started

    monkeypatch.setattr(worker, "_run_worker", run_worker)
    lines = []
    outcome = worker.run_units(units, OPTIONS, log=lines.append)
    progress = [line for line in lines if line.startswith("[")]
    assert re.fullmatch(r"\[1/2\] .* \(\d+ s, about \d+ s left\)", progress[0]), progress
    assert re.fullmatch(r"\[2/2\] .* \(\d+ s\)", progress[1]), progress
    first, second = (("u/0", "vllm==9.12.0"), ("u/0", "vllm==9.13.0"))
    assert given[0][1:] == (first, ["mrv2", "vllm==9.12.0"])
    # At the crashed point: 9.13.0 and fast were not yet run there, mrv2 was; the crasher leads
    # the next point.
    assert given[1][0] == [
        ("u/0", ("vllm==9.13.0", "fast", "mrv2")),
        ("u/1", ("vllm==9.12.0", "mrv2", "vllm==9.13.0", "fast")),
    ]
    # It crashed before any other subject ran again (mrv2's output, which every point is judged
    # against, runs first at each point).
    assert given[1][1:] == (second, ["mrv2", "vllm==9.13.0"])
    assert given[2][0][1] == ("u/1", ("vllm==9.13.0", "vllm==9.12.0", "mrv2", "fast"))
    assert [g[1] for g in given[2:]] == [("u/1", "vllm==9.13.0"), ("u/1", "vllm==9.12.0"), None]
    assert given[3][0] == [("u/1", ("vllm==9.12.0", "fast", "mrv2"))] and given[3][2] == ["mrv2", "vllm==9.12.0"]
    for key in ("u/0", "u/1"):
        records = outcome.records[key]
        assert set(records) == set(subjects_)
        assert [records[s]["status"] for s in subjects_] == ["ok", "crashed", "crashed", "ok"]


def test_a_subject_that_hangs_is_recorded_as_hung(tmp_path, cache):
    _fetch(tmp_path, "9.12.0", misbehave="hang")
    # the stall limit must cover the worker's own start (torch import) and the interpreter's run
    options = worker.JobOptions(device="cpu", host=True, num_samples=1, calls_per_sample=1, stall_s=25)
    outcome = worker.run_units(_units((0.5, 0.0)), options, log=lambda line: None)
    assert outcome.records["u/0"]["vllm==9.12.0"] == {"status": "crashed", "reason": "hung: no progress for 25 s"}
    assert outcome.records["u/1"]["vllm==9.12.0"]["status"] == "ok"


# ---- a real release from the package index ---------------------------------------------------

REAL = "0.28.0"  # the first release with PR #50939; mrv2 reproduces its draws
NEWEST = tiers.MRV2_RELEASES[-1]  # the nightly tier's vLLM subject


@pytest.fixture(scope="session")
def real_release(tmp_path_factory):
    """vllm==0.28.0 and the newest release fetched once per test session (pip download; about
    330 MB each, seconds on a good link); skipped only when the package index cannot be reached."""
    cache = tmp_path_factory.mktemp("vllm-cache")
    env = dict(os.environ, SPECSAMPLE_CACHE=str(cache))
    probe = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "vllm"], capture_output=True, text=True, env=env, timeout=120
    )
    if probe.returncode != 0 or REAL not in probe.stdout:
        pytest.skip(f"the package index cannot be reached (pip index versions vllm: {probe.stderr.strip()[-200:]})")
    old = os.environ.get("SPECSAMPLE_CACHE")
    os.environ["SPECSAMPLE_CACHE"] = str(cache)
    try:
        store.fetch_release(REAL)
        store.fetch_release(NEWEST)
        yield cache
    finally:
        if old is None:
            del os.environ["SPECSAMPLE_CACHE"]
        else:
            os.environ["SPECSAMPLE_CACHE"] = old


def _beside_mrv2(cache, monkeypatch, device, version: str, w: Workload):
    """A fetched release and mrv2 on the same inputs: (subject, inputs, mrv2's out, the release's)."""
    monkeypatch.setenv("SPECSAMPLE_CACHE", str(cache))
    subjects._resolve.cache_clear()
    subject = subjects.get(f"vllm=={version}")
    assert parse_subject(subject.name).version == version and subject.provenance["release"] == version
    inputs = make_inputs(w, device=device)
    return subject, inputs, subjects.get("mrv2").run(w, device, inputs), subject.run(w, device, inputs)


@pytest.mark.parametrize("mode", ["greedy", "standard", "block"])
@pytest.mark.parametrize("draft", ["logits", "one-hot"])
def test_a_real_release_draws_what_mrv2_draws(real_release, monkeypatch, device, mode, draft):
    w = Workload(4, 3, 1000, mode=mode, draft=draft, placeholder_density=0.4, placeholder_pattern="random", seed=11)
    _, inputs, ours, theirs = _beside_mrv2(real_release, monkeypatch, device, REAL, w)
    assert emitted(*theirs) == emitted(*ours)
    assert semantics.classify(inputs, theirs, ours).semantics == "same draws"


@pytest.mark.parametrize("mode", ["greedy", "standard", "block"])
@pytest.mark.parametrize("draft", ["logits", "one-hot"])
def test_the_newest_release_loads_from_its_own_small_closure_and_accepts_what_mrv2_accepts(
    real_release, monkeypatch, device, mode, draft
):
    """The newest release (0.34.0 takes its draft logits as a cache object, from a module whose top
    imports most of vLLM) loads from a closure of a few files, and reads the draft logits it is
    given: greedy draws mrv2's tokens; standard mode accepts what mrv2 accepts (the same uniforms;
    from 0.31.0 on only the resample noise is another stream, a hash); block mode, whose uniforms
    come from per-step seeds from 0.33.0 on (seed ^ step << 32), keeps the placeholder rules."""
    w = Workload(6, 4, 500, mode=mode, draft=draft, placeholder_density=0.3, placeholder_pattern="random", seed=7)
    subject, inputs, ours, theirs = _beside_mrv2(real_release, monkeypatch, device, NEWEST, w)
    assert len(subject.provenance["files"]) <= 12
    verdict = semantics.classify(inputs, theirs, ours).semantics
    if mode == "greedy":
        assert verdict == "same draws"
    elif mode == "standard":
        assert torch.equal(theirs[1], ours[1])
        assert [t[:-1] for t in emitted(*theirs)] == [t[:-1] for t in emitted(*ours)]
    assert verdict != "violates placeholder semantics"


def test_an_unknown_release_is_a_clear_error(real_release):
    with pytest.raises(subjects.SubjectError, match=r"vllm==0\.0\.999: no such release on the package index"):
        store.fetch_release("0.0.999")


def test_specsample_vllm_fetch_exits_2_on_an_unknown_release(real_release, tmp_path):
    env = dict(os.environ, SPECSAMPLE_CACHE=str(tmp_path / "c"))
    proc = subprocess.run(
        [sys.executable, "-m", "specsample", "vllm", "fetch", "0.0.999"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert proc.returncode == 2 and "no such release on the package index" in proc.stderr
    assert not (tmp_path / "c" / "vllm" / "releases" / "0.0.999").exists()


# ---- the package index's releases beside the tiers' ---------------------------------------------


def test_index_versions_are_parsed_from_pips_output():
    text = "vllm (9.1.0)\nAvailable versions: 9.1.0, 9.0.1.post1, 9.0.0rc1, 0.8.5\n"
    assert store.parse_index_versions(text) == ["9.1.0", "9.0.1.post1", "0.8.5"]
    assert store.parse_index_versions("ERROR: no such package\n") is None


def test_vllm_list_index_exits_1_when_the_index_has_a_newer_release_than_the_tiers(cache, monkeypatch, capsys):
    from specsample import cli

    newest = tiers.MRV2_RELEASES[-1]
    monkeypatch.setattr(store, "index_releases", lambda: [*tiers.MRV2_RELEASES])
    assert cli.main(["vllm", "list", "--index"]) == 0
    assert f"  vllm=={newest}: tiers\n" in capsys.readouterr().out
    monkeypatch.setattr(store, "index_releases", lambda: [*tiers.MRV2_RELEASES, "99.0.0"])
    assert cli.main(["vllm", "list", "--index"]) == 1
    captured = capsys.readouterr()
    assert "  vllm==99.0.0: not in the tiers\n" in captured.out
    assert (
        f"the index has vllm==99.0.0, newer than the newest release the tiers measure (vllm=={newest})" in captured.err
    )

    def unreachable():
        raise subjects.SubjectError("the package index cannot be read (pip index versions vllm: offline)")

    monkeypatch.setattr(store, "index_releases", unreachable)
    assert cli.main(["vllm", "list", "--index"]) == 2 and "cannot be read" in capsys.readouterr().err
    assert cli.main(["vllm", "list"]) == 0  # the cache alone needs no index
