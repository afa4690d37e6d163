"""The command line's own description: ``specsample --help`` lists every command it has."""

from __future__ import annotations

import re

from specsample import cli


def test_help_summary_lists_every_command():
    """The module docstring's command table (the top of ``specsample --help``) names exactly the
    parser's commands, so that a command added to one is not missing from the other."""
    parser = cli.build_parser()
    commands = set(next(a for a in parser._actions if a.dest == "command").choices)
    table = cli.__doc__.split("--------\n", 1)[1].split("\n\n", 1)[0]
    listed = {re.match(r"(\S+)\s", line).group(1) for line in table.splitlines()}
    assert listed == commands
    assert parser.description == cli.__doc__
