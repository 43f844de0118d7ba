"""Check the built website in a real headless browser (Playwright driving Debian's Chromium).

    make site-check                     # after make site
    python tools/check_site.py --site build/site

For every page: it loads with no console error, no failed request and no request that leaves this
machine; every lesson page shows as many figures as its executed notebook has plot outputs, each image
actually decoded; no output is an error or a traceback; every link between pages resolves; the front page
and lesson 00 name every lesson. Screenshots at a desktop and a phone width go to build/site/screenshots.
"""

from __future__ import annotations

import argparse
import functools
import http.server
import os
import shutil
import sys
import threading
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
SIZES = {"desktop": (1366, 900), "phone": (390, 844)}


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


def main() -> None:
    """Run every check; exit 1 with the list of problems when any is found."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--site", type=Path, default=REPO_ROOT / "build" / "site")
    args = parser.parse_args()
    html_dir, src = args.site / "html", args.site / "src"
    if not (html_dir / "index.html").exists():
        sys.exit(f"No site in {html_dir}: run `make site` first.")
    from playwright.sync_api import sync_playwright

    names = [p.name for p in sorted((src / "notebooks").glob("*.ipynb"))]
    lessons = [lesson.notebook for lesson in course.lessons()]
    problems: list[str] = [f"notebooks/{n} is a lesson with no page" for n in lessons if n not in names]
    shots = args.site / "screenshots"
    shots.mkdir(parents=True, exist_ok=True)
    server, base = serve(html_dir)
    links: set[str] = set()
    pages = [("index", base + "index.html", None)]
    pages += [(Path(n).stem, f"{base}notebooks/{Path(n).stem}.html", src / "notebooks" / n) for n in names]
    pages += [(f"docs-{p.stem}", f"{base}docs/{p.stem}.html", None) for p in sorted((src / "docs").glob("*.md"))]
    try:
        with sync_playwright() as pw:
            browser = pw.chromium.launch(executable_path=chromium(), args=CHROMIUM_FLAGS)
            for size, (width, height) in SIZES.items():
                context = browser.new_context(viewport={"width": width, "height": height})
                outside: list[str] = []
                context.route("**/*", functools.partial(keep_local, outside))
                for stem, url, notebook in pages:
                    page = context.new_page()
                    html, images = check_page(page, url, problems)
                    page.screenshot(path=str(shots / f"{stem}.{size}.png"), full_page=True)
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
    if problems:
        print("[site] PROBLEMS:\n  " + "\n  ".join(problems), file=sys.stderr)
        sys.exit(1)
    print("[site] browser check passed")


if __name__ == "__main__":
    os.environ.setdefault("PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD", "1")
    main()
