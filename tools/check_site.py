"""Check the built website in a real headless browser (Playwright driving Debian's Chromium).

    make site-check                     # after make site
    python tools/check_site.py --site build/site

For every page: it loads with no console error, no failed request and no request that leaves this
machine; every lesson page shows as many figures as its executed notebook has plot outputs, each image
actually decoded; no output is an error or a traceback; every link between pages resolves; the front page
and lesson 00 name every lesson; no page is wider than the screen, at a desktop width or on a phone (390 px):
wide tables and code scroll inside their own box. Each lesson's length is measured in screens at 1366 x 768 and
at 390 x 844 (the whole page, and its core path: the page without its "(deep dive)" sections) and the core path
must fit MAX_CORE_SCREENS at both. On a phone, the header's button opens the list of pages. axe-core's
accessibility rules run on every page at both widths: a serious or critical violation fails the check, moderate
and minor ones are listed; every figure must have a text alternative that states its finding (its title, recorded
with the figure). Screenshots at both widths go to build/site/screenshots.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import re
import shutil
import sys
import threading
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nbformat
import portpicker

from utils import course, site
from utils.paths import REPO_ROOT

CHROMIUM_FLAGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SIZES = {"desktop": (1366, 768), "phone": (390, 844)}
#: How long one browser step may take. Playwright's default is 30 s: in CI this check shares two cores with the
#: JupyterLab check and the lessons run without root, and a full-page screenshot of lesson 03 failed there
#: (2026-12-01; the error's last line was cut from the log: most likely that limit).
PAGE_TIMEOUT_MS = 180_000
JPEG_MAX_PX = 65_500  # a JPEG is at most 65,535 pixels high
#: The longest core path a lesson page may have (the page without its deep dives), in screens of each size. On a
#: phone (390 x 844) a reader of the course found lessons of 47 and 56 screens too long to work through; a lesson
#: past either limit moves a section into a deep dive, or code into utils. The desktop limit dates from the pages
#: measured on 2026-11-25 once figure, table and sentence code was collapsed (hide-input).
MAX_CORE_SCREENS = {"desktop": 45, "phone": 40}

#: The page's width against the screen's, and what sticks out of the screen without a box of its own that
#: scrolls or clips it (what makes the whole page scroll sideways): the outermost elements that stick out, and
#: the innermost elements whose text runs past the screen (a long word in a heading).
OVERFLOW_JS = """() => {
  const width = document.documentElement.clientWidth, scroll = document.documentElement.scrollWidth;
  const sticksOut = el => el.getBoundingClientRect().right > width + 1;
  const spills = el => el.clientWidth > 0 && el.scrollWidth > el.clientWidth + 1
    && getComputedStyle(el).overflowX === 'visible' && el.getBoundingClientRect().left + el.scrollWidth > width + 1;
  // inside a box that scrolls or clips, or fixed to the screen (an off-canvas sidebar): not the page's width
  const contained = el => {
    if (getComputedStyle(el).position === 'fixed') return true;
    for (let p = el.parentElement; p && p !== document.body; p = p.parentElement) {
      const style = getComputedStyle(p);
      if (style.overflowX !== 'visible' || style.position === 'fixed') return true;
    }
    return false;
  };
  const name = el => el.tagName.toLowerCase()
    + (typeof el.className === 'string' && el.className.trim() ? '.' + el.className.trim().split(/\\s+/).join('.') : '');
  const text = el => `"${el.textContent.trim().replace(/\\s+/g, ' ').slice(0, 40)}"`;
  if (scroll <= width) return {width, scroll, offenders: []};
  const free = [...document.body.querySelectorAll('*')].filter(el => !contained(el));
  const boxes = free.filter(el => sticksOut(el) && !(el.parentElement && sticksOut(el.parentElement)))
    .map(el => `${name(el)} ${Math.round(el.getBoundingClientRect().width)} px (${text(el)})`);
  const texts = free.filter(el => spills(el) && ![...el.children].some(c => spills(c) || sticksOut(c)))
    .map(el => `text of ${name(el)} runs to ${Math.round(el.getBoundingClientRect().left + el.scrollWidth)} px (${text(el)})`);
  return {width, scroll, offenders: [...boxes, ...texts].slice(0, 5)};
}"""

#: The impacts of an axe-core violation that fail the check; moderate and minor ones are listed without failing it.
AXE_FAILING = ("critical", "serious")
#: axe-core's options at each width. Colour contrast, most of axe's time on a long lesson (it checks every coloured
#: token of the code), is checked once, at the desktop width: the phone's layout uses the same colours.
AXE_OPTIONS = {
    "desktop": {"resultTypes": ["violations"]},
    "phone": {"resultTypes": ["violations"], "rules": {"color-contrast": {"enabled": False}}},
}

#: The figures in cell outputs whose text alternative is missing or is only their file's name (what Sphinx writes
#: for an image given no text alternative).
FIGURE_ALTS_JS = """() => [...document.querySelectorAll('.cell_output img')]
  .map(i => (i.getAttribute('alt') || '').trim())
  .filter(alt => !alt || /^[^\\s]+\\.(png|jpe?g|svg|gif)$/i.test(alt))"""

#: The page's height and the height of its deep-dive sections (the outermost ones), in pixels.
LENGTH_JS = """() => {
  const isDeep = s => {
    const h = s.querySelector(':scope > h1, :scope > h2, :scope > h3, :scope > h4, :scope > h5, :scope > h6');
    return h !== null && /\\(deep dive\\)/i.test(h.textContent);
  };
  const deep = [...document.querySelectorAll('section')].filter(isDeep);
  const outer = deep.filter(s => !deep.some(d => d !== s && d.contains(s)));
  return {
    height: document.documentElement.scrollHeight,
    viewport: window.innerHeight,
    deep: outer.reduce((sum, s) => sum + s.getBoundingClientRect().height, 0),
  };
}"""


def chromium() -> str:
    """Path of the system Chromium, or exit with what to install."""
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    sys.exit(
        "No Chromium found for the browser check. On Debian/Ubuntu: sudo apt-get install -y chromium\n"
        "(Playwright's own browser download is not used: it needs a network this check does not assume.)"
    )


def serve(folder: Path) -> tuple[http.server.ThreadingHTTPServer, str]:
    """Serve folder on a free loopback port in a background thread."""
    handler = functools.partial(QuietHandler, directory=str(folder))
    server = QuietServer(("127.0.0.1", portpicker.pick_unused_port()), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, f"http://127.0.0.1:{server.server_address[1]}/"


class QuietHandler(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args) -> None:
        pass


class QuietServer(http.server.ThreadingHTTPServer):
    def handle_error(self, request, client_address) -> None:
        """A browser that closes a connection early (a page left mid-download) is not a problem."""
        if not isinstance(sys.exc_info()[1], ConnectionError):
            super().handle_error(request, client_address)


def keep_local(outside: list[str], route) -> None:
    """Let a request through when it stays on this machine; block and record any other."""
    if site.is_local(route.request.url):
        route.continue_()
    else:
        outside.append(route.request.url)
        route.abort()


def screenshot(page, shots: Path, name: str) -> None:
    """Save the whole page as a JPEG (a lesson is up to 65 screens long; idle here, lesson 03's took 5.8 s, its PNG 6.7),
    or as a PNG where the page is taller than a JPEG can be. The picture is for a person to look at, not a check: one
    that times out on a busy machine is reported and the checks go on; any other browser error stops the check."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    tall = page.evaluate("document.documentElement.scrollHeight") > JPEG_MAX_PX
    path = shots / f"{name}.{'png' if tall else 'jpeg'}"
    try:
        page.screenshot(path=str(path), full_page=True, **({} if tall else {"type": "jpeg", "quality": 80}))
    except PlaywrightTimeout as err:
        print(f"[site] {path.name}: no screenshot ({(str(err).splitlines() or ['timed out'])[0]}); the checks go on")


def check_page(page, url: str, problems: list[str]) -> tuple[str, int]:
    """Open one page; record its console errors, failed and off-machine requests; return its HTML
    and the number of decoded images in cell outputs."""
    seen: list[str] = []
    page.on("console", lambda m: seen.append(f"console {m.type}: {m.text}") if m.type == "error" else None)
    page.on("pageerror", lambda e: seen.append(f"page error: {e}"))
    page.on("requestfailed", lambda r: seen.append(f"request failed: {r.url} ({r.failure})"))
    page.goto(url, wait_until="networkidle")
    images = page.evaluate(
        "() => [...document.querySelectorAll('.cell_output img')].filter(i => i.complete && i.naturalWidth > 0).length"
    )
    problems += [f"{url}: {line}" for line in seen]
    return page.content(), images


def accessibility(page, axe, options: dict) -> tuple[list[str], list[str]]:
    """axe-core's violations on the open page: those that fail the check (AXE_FAILING), one line each (impact, rule,
    what it asks, the first elements at fault), and the others in short (rule, impact, number of elements)."""
    failing, others = [], []
    for v in axe.run(page, options=options).response["violations"]:
        targets = [" ".join(str(part) for part in node["target"]) for node in v["nodes"]]
        if v["impact"] not in AXE_FAILING:
            others.append(f"{v['id']} ({v['impact']}, {len(targets)} element(s))")
            continue
        failing.append(
            f"axe {v['impact']} '{v['id']}': {v['help']} ({len(targets)} element(s): "
            + "; ".join(targets[:3])
            + ("; ..." if len(targets) > 3 else "")
            + ")"
        )
    return failing, others


def figures_without_alt(page) -> list[str]:
    """The text alternatives of the open page's figures that are missing or only a file name ('' when missing)."""
    return page.evaluate(FIGURE_ALTS_JS)


def overflow(page) -> str | None:
    """What makes the open page wider than its screen, or None when it fits."""
    found = page.evaluate(OVERFLOW_JS)
    if found["scroll"] <= found["width"]:
        return None
    return (
        f"the page is {found['scroll']} px wide on a {found['width']} px screen (it scrolls sideways); "
        f"sticking out: {'; '.join(found['offenders']) or 'nothing found'}"
    )


def navigation_opens(page) -> str | None:
    """At a phone's width, tap the visible button that opens the list of pages: None when the list opens and links
    to the course's front page, else what went wrong."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    buttons = [b for b in page.locator("button.primary-toggle").all() if b.is_visible()]
    if not buttons:
        return "no visible button opens the list of pages"
    buttons[0].click()
    try:
        page.wait_for_function("document.querySelector('#pst-primary-sidebar-modal')?.open === true", timeout=3000)
    except PlaywrightTimeout:
        return "its button to open the list of pages does nothing"
    links = page.locator("#pst-primary-sidebar-modal a[href]").count()
    page.keyboard.press("Escape")
    return None if links else "the list of pages opens empty"


def length_in_screens(page) -> tuple[float, float]:
    """The open page's length in screens of its viewport: the whole page, and without its deep dives."""
    found = page.evaluate(LENGTH_JS)
    return found["height"] / found["viewport"], (found["height"] - found["deep"]) / found["viewport"]


def axe_version(axe) -> str:
    """The version of the axe-core script that axe-playwright-python bundles (its first line names it)."""
    match = re.search(r"axe v([0-9.]+)", axe.axe_script[:200])
    return match.group(1) if match else "(unknown version)"


def main() -> None:
    """Run every check; exit 1 with the list of problems when any is found."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--site", type=Path, default=REPO_ROOT / "build" / "site")
    args = parser.parse_args()
    html_dir, src = args.site / "html", args.site / "src"
    if not (html_dir / "index.html").exists():
        sys.exit(f"No site in {html_dir}: run `make site` first.")
    from axe_playwright_python.sync_playwright import Axe
    from playwright.sync_api import sync_playwright

    names = [p.name for p in sorted((src / "notebooks").glob("*.ipynb"))]
    lessons = [lesson.notebook for lesson in course.lessons()]
    problems: list[str] = [f"notebooks/{n} is a lesson with no page" for n in lessons if n not in names]
    shots = args.site / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    server, base = serve(html_dir)
    links: set[str] = set()
    axe, axe_seconds, axe_minor = Axe(), 0.0, 0
    pages = [("index", base + "index.html", None)]
    pages += [(Path(n).stem, f"{base}notebooks/{Path(n).stem}.html", src / "notebooks" / n) for n in names]
    pages += [(f"docs-{p.stem}", f"{base}docs/{p.stem}.html", None) for p in sorted((src / "docs").glob("*.md"))]
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_FLAGS)
            for size, (width, height) in SIZES.items():
                context = browser.new_context(viewport={"width": width, "height": height})
                context.set_default_timeout(PAGE_TIMEOUT_MS)
                outside: list[str] = []
                context.route("**/*", functools.partial(keep_local, outside))
                for stem, url, notebook in pages:
                    page = context.new_page()
                    html, images = check_page(page, url, problems)
                    wide = overflow(page)
                    if wide:
                        problems.append(f"{stem} at {width} px: {wide}")
                    started = time.perf_counter()
                    failing, others = accessibility(page, axe, AXE_OPTIONS[size])
                    axe_seconds += time.perf_counter() - started
                    problems += [f"{stem} at {width} px: {line}" for line in failing]
                    if others:
                        print(f"[site] {stem} at {width} px: axe, not failing: {', '.join(others)}")
                    axe_minor += len(others)
                    bare = figures_without_alt(page) if size == "desktop" else []
                    if bare:
                        problems.append(
                            f"{stem}: {len(bare)} figure(s) shown without a text alternative that states their "
                            f"finding (alt {bare[0]!r}): build the site with tools/build_site.py, whose book lists "
                            "utils.site among its extensions (it gives each figure the text alternative recorded with it)"
                        )
                    if notebook is not None:
                        whole, core = length_in_screens(page)
                        print(f"[site] {stem}: {whole:.1f} screens at {width}x{height}, core path {core:.1f}")
                        if core > MAX_CORE_SCREENS[size]:
                            problems.append(
                                f"{stem}: the core path is {core:.1f} screens at {width}x{height}, more than "
                                f"{MAX_CORE_SCREENS[size]}: collapse figure and table code (hide-input) or move a "
                                "section into a deep dive"
                            )
                    if size == "phone" and notebook is not None and stem == Path(names[0]).stem:
                        stuck = navigation_opens(page)  # once: every page has the same header
                        if stuck:
                            problems.append(f"{stem} at {width} px: {stuck} (tools/build_site.py's JS passes it on)")
                    screenshot(page, shots, f"{stem}.{size}")
                    page.close()
                    if size != "desktop":
                        continue
                    links |= site.internal_links(html, url)
                    text = html.replace("\u2011", "-")
                    if stem in ("index", "00_start_here"):
                        problems += [
                            f"{stem}: the course map does not name {n}" for n in lessons if Path(n).stem not in text
                        ]
                    if notebook is not None:
                        nb = nbformat.read(notebook, as_version=4)
                        expected = site.figure_count(nb)
                        print(f"[site] {stem}: {images} figures shown, {expected} in the notebook's outputs")
                        if images != expected:
                            problems.append(f"{stem}: {images} figures shown, the notebook has {expected}")
                        problems += [f"{stem}: {e}" for e in site.error_outputs(nb)]
                        problems += [f"{stem}: {e}" for e in site.figure_alt_problems(nb)]
                        if "Outputs on this page:" not in text:
                            problems.append(f"{stem}: the page does not say which mode, machine and day made it")
                problems += [f"request to a host outside this machine: {u}" for u in sorted(set(outside))]
                context.close()
            browser.close()
        for url in sorted(links):
            try:
                urllib.request.urlopen(url, timeout=10).close()
            except OSError as err:
                problems.append(f"broken link {url}: {err}")
    finally:
        server.shutdown()
    print(f"[site] {len(pages)} pages, {len(links)} internal links checked; screenshots in {shots}")
    print(
        f"[site] axe-core {axe_version(axe)} ran on every page at {len(SIZES)} widths in {axe_seconds:.0f} s; "
        f"{axe_minor} moderate or minor rule violation(s) listed above (they do not fail the check)"
    )
    if problems:
        print("[site] PROBLEMS:\n  " + "\n  ".join(problems), file=sys.stderr)
        sys.exit(1)
    print("[site] browser check passed")


if __name__ == "__main__":
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    main()
