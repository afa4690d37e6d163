"""The memcheck driver (``python -m specsample.devtools.memcheck``): its configurations reach
the sampler they name, and a configuration of another subject is refused."""

import pytest
import torch

from specsample.devtools import memcheck
from specsample.kernels import express, fast
from specsample.workloads import Workload, make_inputs


def test_config_of_another_subject_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_info:
        memcheck.main(["mrv2", "--config", "large"])
    assert exit_info.value.code == 2
    assert "not a configuration of mrv2" in capsys.readouterr().err


@pytest.mark.parametrize(("subject", "module"), [("fast", fast), ("express", express)])
def test_every_config_is_forced_and_matches_the_default(subject, module, device, monkeypatch):
    """Each named configuration is the one the sampler launches with (seen by its launch), and
    draws what the batch size's own configuration draws (configurations never change a draw)."""
    w = Workload(num_reqs=2, num_speculative_steps=2, vocab_size=300, mode="standard", seed=5)
    default_call, _ = memcheck._caller(subject, None)
    expected = default_call(w, device, make_inputs(w, device=device))
    for name, config in memcheck.configs()[subject].items():
        seen = []
        launch = module.launch

        def spy(*args, config=None, **kwargs):
            seen.append(config)
            return launch(*args, config=config, **kwargs)

        monkeypatch.setattr(module, "launch", spy)
        call, unsupported = memcheck._caller(subject, name)
        assert unsupported(w) is None
        sampled, num_sampled = call(w, device, make_inputs(w, device=device))
        monkeypatch.setattr(module, "launch", launch)
        assert seen == [config], (name, seen)
        assert torch.equal(num_sampled, expected[1]), name
        for row, n in enumerate(num_sampled.tolist()):
            assert torch.equal(sampled[row, :n], expected[0][row, :n]), name


def test_the_masked_skip_cases_run_where_the_path_exists():
    """The masked-block skip cases reach express (its path) with a forced configuration too, and
    are left out for a subject without the path rather than called with an argument it lacks."""
    masked = [Workload(**{"vocab_size": 300, **fields}) for n, fields in memcheck.CASES.items() if "masked" in n]
    assert masked and all(w.skip_masked_vocab_blocks for w in masked)
    for subject, config in (("express", None), ("express", "small"), ("fast", None), ("fast", "tiny"), ("mrv2", None)):
        _, unsupported = memcheck._caller(subject, config)
        reasons = {unsupported(w) for w in masked}
        if subject == "express":
            assert reasons == {None}, (subject, config, reasons)
        else:
            assert all(r and "skip_masked_vocab_blocks" in r for r in reasons), (subject, config, reasons)
