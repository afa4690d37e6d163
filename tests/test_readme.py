"""README.md as the product page: short, its set-up commands the ones CI runs, its figures the
ones the committed results give, its links to files that exist."""

from __future__ import annotations

import re
import shlex
import shutil
from pathlib import Path

from specsample import cli
from specsample.devtools import goals

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def _bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, re.S)]


def test_readme_is_a_short_product_page():
    text = README.read_text()
    assert len(text.splitlines()) <= 150
    assert not re.search(r"\bsessions? \d", text, re.I)


def test_ci_runs_the_main_job_and_exactly_the_test_command():
    """The two set-up commands are the first two bash blocks; .ci/run runs the first (in a fresh
    environment) and ends with the second, word for word."""
    main_job, tests = _bash_blocks(README.read_text())[:2]
    ci = (ROOT / ".ci" / "run").read_text()
    assert main_job in ci
    assert ci.rstrip().splitlines()[-1].strip() == tests
    assert "specsample dashboard" in main_job and "pytest" in tests
    # everything runs in the venv the script makes, never the caller's; browser tests cannot skip
    lines = [line.strip() for line in ci.splitlines()]
    activate = lines.index('source "$venv/bin/activate"')
    assert lines.index('python3 -m venv "$venv"') < activate < lines.index(main_job)
    assert lines.index("export SPECSAMPLE_REQUIRE_BROWSER=1") < len(lines) - 1


def test_readme_links_point_at_files_in_the_repository():
    links = re.findall(r"\]\(([^)#]+)(?:#[^)]*)?\)", README.read_text())
    assert links
    for link in links:
        assert not link.startswith(("http:", "https:")), link
        assert (ROOT / link).exists(), f"README links to {link}, which is not in the repository"


def test_readme_figures_are_what_the_command_writes_from_the_committed_results(tmp_path, monkeypatch, capsys):
    found = goals.readme_figures(README)
    assert found is not None, "README has no figures block"
    args, committed = found
    copy = tmp_path / "README.md"
    shutil.copy(README, copy)
    monkeypatch.chdir(ROOT)  # the marker's paths (results/, the goals file) are the repository's
    assert cli.main(["goals", *shlex.split(args), "--readme", str(copy)]) == 0
    assert "already up to date" in capsys.readouterr().out
    regenerated = goals.readme_figures(copy)[1]
    assert regenerated == committed
    assert "| goal | target | measured | verdict |" in committed and "NVIDIA" in committed


def test_a_readme_without_a_figures_block_is_refused(tmp_path, monkeypatch, capsys):
    plain = tmp_path / "README.md"
    plain.write_text("# nothing here\n")
    monkeypatch.chdir(ROOT)
    argv = ["goals", "abe6f31", "--goals", "specsample/devtools/goals_express.json", "--readme", str(plain)]
    assert cli.main(argv) == 2
    assert "has no figures block" in capsys.readouterr().err
    assert plain.read_text() == "# nothing here\n"
