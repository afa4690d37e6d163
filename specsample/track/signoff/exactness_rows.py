"""Sign-off's exactness rows: each subject's output law on both sides (specsample.exactness).

A head whose check is ``biased`` where its base's was ``exact`` (same subject stem, mode and
drafting) fails sign-off with exit 2: the head changed what the sampler computes, whatever its
speed. Rows biased on both sides are shown but are not the head's doing.
"""

from __future__ import annotations


def _stem(subject: str) -> str:
    """``fast@1a2b3c4`` -> ``fast``; ``vllm==0.33.0`` and ``vllm@main`` -> ``vllm``: what pairs a
    base row with its head row."""
    return subject.split("@")[0].split("==")[0]


def _summary(row: dict) -> str:
    from ...exactness import summary

    return summary(row)


def section(base_rows: list[dict], head_rows: list[dict]) -> tuple[str, bool]:
    """The markdown section, and whether a head row turned biased where its base was exact."""
    base = {(_stem(r["subject"]), r["mode"], r["drafting"]): r for r in base_rows}
    lines = [
        "## Exactness",
        "",
        "| subject | mode | drafting | base | head | |",
        "|---|---|---|---|---|---|",
    ]
    turned = False
    for h in head_rows:
        key = (_stem(h["subject"]), h["mode"], h["drafting"])
        b = base.get(key)
        flag = ""
        if b is not None and b["verdict"] == "exact" and h["verdict"] == "biased":
            turned, flag = True, "**turned biased**"
        lines.append(
            f"| {key[0]} | {key[1]} | {key[2]} | {_summary(b) if b else 'not checked'} | {_summary(h)} | {flag} |"
        )
    if turned:
        lines += ["", "The head is biased where its base was exact: sign-off fails (exit 2)."]
    return "\n".join(lines) + "\n", turned


def exit_code(timing_exit_code: int, turned_biased: bool) -> int:
    """Sign-off's exit code with the exactness rows: 2 where the head turned biased."""
    return 2 if turned_biased else timing_exit_code
