"""Reading a built dashboard in the tests: a page's sections, its tables' cells, the text a
reader sees, the figures a set of specs draws."""

from __future__ import annotations

import html
import re

from specsample.dashboard import MissingData, render_figure

# asv's benchmark names (``<module>.<Tier><Sweep><Family>.<metric>``): their module prefixes and
# class names; the pages show readable names instead (specsample.dashboard.names).
ASV_NAME = re.compile(r"\bbench_(sampler|stages)\b|\b(Smoke|Quick|Nightly|Releases|Full)[A-Z]\w*(Latency|Derived)\b")


def section(text: str, section_id: str) -> str:
    match = re.search(rf'<section id="{section_id}">(.*?)</section>', text, re.S)
    assert match, f"no section {section_id}"
    return match.group(1)


def rows(html_table: str) -> list[list[str]]:
    """Cells of every body row of the tables in ``html_table``, tags stripped, entities
    unescaped."""
    found = re.findall(r"<tr[^>]*>(.*?)</tr>", html_table, re.S)
    cells = [re.findall(r"<td[^>]*>(.*?)</td>", row, re.S) for row in found]
    return [[html.unescape(re.sub(r"<[^>]+>", "", c)).strip() for c in row] for row in cells if row]


def visible_text(page: str) -> str:
    """What a reader sees: the text between tags (attributes, such as tooltips and image
    sources, left out), the style sheet removed."""
    page = re.sub(r"<style>.*?</style>", "", page, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", page))


def drawn_figures(specs, frame_for, context=None):
    """(spec, file stem, Figure) for every figure ``specs`` draw from ``frame_for(spec)``;
    specs without data are left out."""
    for spec in specs:
        try:
            figures = render_figure(spec, frame_for(spec), context)
        except MissingData:
            continue
        for stem, fig in figures:
            yield spec, stem, fig
