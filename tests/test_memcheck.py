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
