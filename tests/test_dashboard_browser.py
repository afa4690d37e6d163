"""The built dashboard in a real browser: headless Chromium, opened from disk and over HTTP.

Two sites are built into temporary directories the way ``python -m specsample dashboard`` builds
``dashboards/``: one from the committed results (``results/``), and one from an asv results
directory the tests write (tests/synthetic_results.py: a history with a planted regression and
improvement, and the releases tier with faults), so that the newest-vs-previous summary, the
change tables and the vLLM releases page have content to show. Chromium is driven through its
command line only (``--dump-dom``, ``--screenshot``), so no Python browser bindings are needed.

Whether every image really loaded is asked of the browser itself: the tests write a copy of
``index.html`` next to it with one ``<script>`` appended. On window load the script scrolls to
each ``<img>`` in turn (the page uses ``loading="lazy"``, so an image is only fetched near the
viewport), waits for it to load or fail, and writes ``complete``/``naturalWidth``/
``naturalHeight`` of every image, and the rows and images of every ``<section>``, into
``<pre id="img-check">`` as JSON. ``--virtual-time-budget``
keeps Chromium alive until that has run, and the dumped DOM is parsed here. The page itself is
not changed otherwise; the screenshots are of the untouched pages.

Skipped, with the reason, when no Chromium binary is found (``.ci/install-browser.sh`` installs
one on Debian). Environment:

``SPECSAMPLE_CHROMIUM``        the browser binary to use instead of searching ``PATH``
``SPECSAMPLE_REQUIRE_BROWSER`` set to 1 (CI, after installing it) to fail instead of skipping
``SPECSAMPLE_SCREENSHOT_DIR``  also copy the screenshot there (a CI artifact to look at)
"""

from __future__ import annotations

import html
import json
import os
import re
import shutil
import struct
import subprocess
import tempfile
import threading
from contextlib import contextmanager
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"
BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome", "google-chrome-stable", "chrome")
BROWSER_TIMEOUT_S = 60  # per Chromium process; a healthy run takes 1-2 s
VIRTUAL_TIME_BUDGET_MS = 10_000  # virtual time: passes instantly while the page is idle
WINDOW = (1400, 4600)  # the top of the page: summary, change tables, history and more
CHECK_PAGE = "_browser_check.html"
RELEASES_CHECK_PAGE = "_browser_check_releases.html"

# Headless, no network besides the page itself, no profile state shared between runs.
BROWSER_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-proxy-server",
    "--disable-extensions",
    "--mute-audio",
    "--hide-scrollbars",
    "--run-all-compositor-stages-before-draw",
    f"--virtual-time-budget={VIRTUAL_TIME_BUDGET_MS}",
)

# Appended to a copy of index.html; reports on every image once they have all settled.
IMAGE_CHECK_SCRIPT = """
<script>
window.addEventListener("load", async () => {
  const settled = (img) => new Promise((done) => {
    if (img.complete) return done(true);
    img.addEventListener("load", () => done(true), {once: true});
    img.addEventListener("error", () => done(true), {once: true});
    setTimeout(() => done(false), 8000);  // virtual ms; Chromium pauses it during fetches
  });
  const images = [];
  for (const img of Array.from(document.images)) {
    img.scrollIntoView();  // loading="lazy": fetched only near the viewport
    const settledInTime = await settled(img);
    const section = img.closest("section");
    images.push({src: img.getAttribute("src"), settled: settledInTime, complete: img.complete,
                 width: img.naturalWidth, height: img.naturalHeight,
                 section: section ? section.id : null});
  }
  window.scrollTo(0, 0);
  const sections = {};
  for (const section of document.querySelectorAll("section")) {
    sections[section.id] = {rows: section.querySelectorAll("tr td").length > 0 ?
                              section.querySelectorAll("tr").length : 0,
                            images: section.querySelectorAll("img").length};
  }
  const out = document.createElement("pre");
  out.id = "img-check";
  out.textContent = JSON.stringify({
    protocol: location.protocol,
    panel: document.getElementById("placeholder-panel") !== null,
    title: document.title,
    text: document.body.innerText,
    sections,
    images,
  });
  document.body.appendChild(out);
});
</script>
"""


def _find_browser() -> str | None:
    wanted = os.environ.get("SPECSAMPLE_CHROMIUM")
    for name in (wanted,) if wanted else BROWSER_NAMES:
        path = shutil.which(name)
        if path:
            return path
    return None


def _browser_or_skip() -> str:
    """The browser binary, after checking it starts; skip (or fail when required) otherwise."""
    required = os.environ.get("SPECSAMPLE_REQUIRE_BROWSER") == "1"
    give_up = pytest.fail if required else pytest.skip
    browser = _find_browser()
    if browser is None:
        names = os.environ.get("SPECSAMPLE_CHROMIUM") or ", ".join(BROWSER_NAMES)
        give_up(
            f"no Chromium binary found (looked for {names} on PATH); install one with "
            ".ci/install-browser.sh or set SPECSAMPLE_CHROMIUM"
        )
    try:
        version = subprocess.run([browser, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as exc:
        give_up(f"{browser} does not start: {exc}")
    if version.returncode != 0:
        give_up(f"{browser} --version failed ({version.returncode}): {version.stderr.strip()[-500:]}")
    return browser


@pytest.fixture(scope="module")
def browser() -> str:
    return _browser_or_skip()


@pytest.fixture(scope="module")
def site(browser, tmp_path_factory) -> Path:
    """The dashboard built from the committed results, plus the image-check copy of its index."""
    from specsample.commands.bench import build_site

    out = tmp_path_factory.mktemp("browser") / "site"
    index = build_site(RESULTS, out)
    _write_check_page(index)
    return out


@pytest.fixture(scope="module")
def synthetic_site(browser, tmp_path_factory) -> Path:
    """The dashboard built from a results directory with a planted history and releases tier,
    plus image-check copies of both pages."""
    import synthetic_results

    from specsample.commands.bench import build_site

    root = tmp_path_factory.mktemp("synthetic")
    results = synthetic_results.write_asv_results(synthetic_results.site_frame(), root / "results")
    index = build_site(results, root / "site")
    _write_check_page(index)
    _write_check_page(index.parent / "releases.html", name=RELEASES_CHECK_PAGE)
    return index.parent


def _write_check_page(index: Path, page: str | None = None, name: str = CHECK_PAGE) -> Path:
    page = index.read_text(encoding="utf-8") if page is None else page
    head, body_end, tail = page.rpartition("</body>")
    assert body_end, f"{index} has no </body>"
    check = index.parent / name
    check.write_text(head + IMAGE_CHECK_SCRIPT + body_end + tail, encoding="utf-8")
    return check


def _run_browser(browser: str, *args: str, attempts: int = 2) -> subprocess.CompletedProcess:
    """One headless Chromium run. A run that hangs is tried once more with a fresh profile: seen
    in CI under load, a ``--screenshot`` run of the committed site that takes 5 s alone hung
    past 60 s once (its stderr only dbus noise), and passed on its own."""
    for attempt in range(1, attempts + 1):
        with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile:
            try:
                done = subprocess.run(
                    [browser, *BROWSER_FLAGS, f"--user-data-dir={profile}", *args],
                    capture_output=True,
                    text=True,
                    timeout=BROWSER_TIMEOUT_S,
                )
                break
            except subprocess.TimeoutExpired as exc:
                if attempt == attempts:
                    pytest.fail(
                        f"{browser} {' '.join(args)} ran past {BROWSER_TIMEOUT_S} s {attempts} times: "
                        f"{(exc.stderr or b'')[-2000:]!r}"
                    )
    assert done.returncode == 0, f"{browser} {' '.join(args)} exited {done.returncode}:\n{done.stderr[-2000:]}"
    return done


def _image_check(browser: str, url: str) -> dict:
    """Load ``url`` (a check page) and return what its script reported."""
    done = _run_browser(browser, "--dump-dom", url)
    match = re.search(r'<pre id="img-check">(.*?)</pre>', done.stdout, re.S)
    assert match, (
        f"the image check did not finish within {VIRTUAL_TIME_BUDGET_MS} ms of virtual "
        f"time at {url} (DOM {len(done.stdout)} chars; stderr tail:\n{done.stderr[-1500:]})"
    )
    return json.loads(html.unescape(match.group(1)))


def _broken(check: dict) -> list[str]:
    """Sources of images that did not load: not complete, or nothing decoded."""
    return [
        img["src"]
        for img in check["images"]
        if not (img["settled"] and img["complete"] and img["width"] > 0 and img["height"] > 0)
    ]


def _png_size(path: Path) -> tuple[int, int]:
    header = path.read_bytes()[:24]
    assert header[:8] == b"\x89PNG\r\n\x1a\n" and header[12:16] == b"IHDR", f"{path} is not a PNG"
    return struct.unpack(">II", header[16:24])


def _assert_site_loaded(
    check: dict, site: Path, protocol: str, page_name: str = CHECK_PAGE, panel: bool = True
) -> None:
    assert check["protocol"] == protocol
    if panel:
        assert check["panel"], 'no element with id="placeholder-panel" in the loaded page'
    page = (site / page_name).read_text(encoding="utf-8")  # the page + the check script
    sources = re.findall(r'<img src="([^"]+)"', page)
    assert sources, "the page references no images"
    assert [img["src"] for img in check["images"]] == [html.unescape(s) for s in sources]
    broken = _broken(check)
    assert not broken, f"{len(broken)} of {len(sources)} image(s) did not load over {protocol}: {broken}"
    for img in check["images"]:  # and what loaded is the PNG on disk, at its own size
        assert (img["width"], img["height"]) == _png_size(site / img["src"]), img
    if panel:
        in_panel = [img for img in check["images"] if img["section"] == "placeholder-panel"]
        assert in_panel, "the placeholder panel shows no image"


@contextmanager
def _http_server(root: Path):
    """http.server on 127.0.0.1 at a free port; yields (base URL, [(path, status), ...])."""
    requests: list[tuple[str, int]] = []

    class Handler(SimpleHTTPRequestHandler):
        def log_request(self, code="-", size="-"):
            try:
                status = int(code)
            except (TypeError, ValueError):
                status = 0
            requests.append((self.path, status))

        def log_message(self, format, *args):  # noqa: A002 - signature of the base class
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), partial(Handler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, name="dashboard-http", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", requests
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


# ---------------------------------------------------------------------------------------------


def test_site_from_disk_loads_every_image_and_the_placeholder_panel(browser, site):
    check = _image_check(browser, (site / CHECK_PAGE).as_uri())
    _assert_site_loaded(check, site, "file:")


def test_site_over_http_loads_every_image_and_the_placeholder_panel(browser, site):
    with _http_server(site) as (base, requests):
        check = _image_check(browser, f"{base}/{CHECK_PAGE}")
    _assert_site_loaded(check, site, "http:")
    served = {path.split("?")[0]: status for path, status in requests}
    for img in check["images"]:
        assert served.get("/" + img["src"]) == 200, f"server log for {img['src']}: {requests}"


def test_image_check_catches_broken_images(browser, site, tmp_path):
    """The check itself: a missing file, a corrupt PNG and an undecodable data URL are caught."""
    copy = shutil.copytree(site, tmp_path / "site")
    (copy / "figures" / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\nthis is not a png")
    page = (copy / "index.html").read_text(encoding="utf-8")
    sources = re.findall(r'<img src="([^"]+)"', page)
    assert len(sources) >= 2
    missing, corrupt = "figures/no-such-figure.png", "figures/corrupt.png"
    page = page.replace(f'src="{sources[0]}"', f'src="{missing}"', 1)
    page = page.replace(f'src="{sources[-1]}"', f'src="{corrupt}"', 1)
    page = page.replace("</h1>", '</h1><img src="data:image/png;base64,AAAA" alt="bad">', 1)
    check = _image_check(browser, _write_check_page(copy / "index.html", page).as_uri())
    assert sorted(_broken(check)) == sorted([missing, corrupt, "data:image/png;base64,AAAA"])
    assert len(check["images"]) == len(sources) + 1  # every other image still loaded
    with pytest.raises(AssertionError, match="did not load"):
        _assert_site_loaded(check, copy, "file:")


def _screenshot(browser: str, page: Path, shot: Path) -> None:
    """A screenshot of the untouched ``page`` that shows something (look at it: see the module
    doc), copied to $SPECSAMPLE_SCREENSHOT_DIR when set."""
    _run_browser(browser, f"--screenshot={shot}", f"--window-size={WINDOW[0]},{WINDOW[1]}", page.as_uri())
    assert shot.is_file(), "Chromium wrote no screenshot"
    assert _png_size(shot) == WINDOW
    from matplotlib.image import imread

    pixels = imread(shot)[..., :3]
    inked = (pixels < 0.9).any(axis=-1).mean()
    assert inked > 0.05, f"the screenshot is nearly blank ({inked:.1%} of pixels not white)"
    if os.environ.get("SPECSAMPLE_SCREENSHOT_DIR"):
        target = Path(os.environ["SPECSAMPLE_SCREENSHOT_DIR"])
        target.mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, target / shot.name)


def test_screenshot_of_the_site(browser, site, tmp_path):
    _screenshot(browser, site / "index.html", tmp_path / "dashboard.png")


# ---- the new content: summary, change tables, the releases page (synthetic results) ----------


def test_index_shows_the_summary_and_the_change_tables(browser, synthetic_site):
    check = _image_check(browser, (synthetic_site / CHECK_PAGE).as_uri())
    _assert_site_loaded(check, synthetic_site, "file:")
    sections = check["sections"]
    assert list(sections)[:3] == ["newest", "regressions", "improvements"]  # the summary on top
    for section in ("newest", "regressions", "improvements", "environment"):
        assert sections[section]["rows"] > 1, (section, sections[section])
    assert sections["history"]["images"] >= 1


def test_releases_page_loads_its_figures_and_tables(browser, synthetic_site):
    with _http_server(synthetic_site) as (base, requests):
        check = _image_check(browser, f"{base}/{RELEASES_CHECK_PAGE}")
    _assert_site_loaded(check, synthetic_site, "http:", page_name=RELEASES_CHECK_PAGE, panel=False)
    assert "vLLM releases" in check["title"]
    sections = check["sections"]
    for section in (
        "fastest-release",
        "placeholder-drop",
        "newest-release",
        "fidelity",
        "release-outcomes",
        "release-regressions",
        "provenance",
    ):
        assert section in sections, sorted(sections)
    for section in ("fastest-release", "placeholder-drop", "newest-release", "release-outcomes", "release-regressions"):
        assert sections[section]["rows"] > 1, (section, sections[section])
    assert sections["release-latency"]["images"] >= 2
    served = {path.split("?")[0]: status for path, status in requests}
    assert all(served.get("/" + img["src"]) == 200 for img in check["images"])


def test_the_text_a_reader_sees_names_benchmarks_readably(browser, site, synthetic_site):
    """The browser's own rendering of the pages (``innerText``: tooltips left out) names no
    benchmark by its asv name, and says which release is fastest and what PR #50939 changed."""
    from site_pages import ASV_NAME

    from specsample.dashboard.specs import PLACEHOLDER_CHANGE_TEXT

    for root, page in ((site, CHECK_PAGE), (synthetic_site, CHECK_PAGE), (synthetic_site, RELEASES_CHECK_PAGE)):
        text = _image_check(browser, (root / page).as_uri())["text"]
        assert not ASV_NAME.search(text), (root, page, ASV_NAME.search(text))
        assert PLACEHOLDER_CHANGE_TEXT in text, (root, page)
        if page == CHECK_PAGE:
            assert "Batch sweep (nightly) · latency" in text, root
        else:
            assert re.search(r"standard: vllm==0\.2[89]\.0, [\d.]+ µs", text)


def test_screenshots_of_the_new_content(browser, synthetic_site, tmp_path):
    _screenshot(browser, synthetic_site / "index.html", tmp_path / "dashboard-synthetic.png")
    _screenshot(browser, synthetic_site / "releases.html", tmp_path / "releases-synthetic.png")
