"""Reading a results directory's JSON files defensively: a file that cannot be read becomes a
:class:`Problem` (the loaders skip it and say why), never a crash or a half-read frame."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Problem:
    """A file, or one benchmark inside a file, that the loader skipped, and why."""

    path: Path
    reason: str


class Skip(Exception):
    """Raised inside the loader for content that becomes a :class:`Problem`."""


def read_json(path: Path) -> dict:
    """Parse one JSON file; corrupt, truncated or unreadable files raise Skip."""
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)  # asv writes NaN for skipped results; json accepts it
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise Skip(f"unreadable JSON ({exc})") from exc
    if not isinstance(data, dict):
        raise Skip(f"expected a JSON object, got {type(data).__name__}")
    return data
