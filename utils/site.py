"""The course website: its table of contents, the README as a front page, and what a page must show; its figures'
text alternatives, recorded by the lessons and given to the images by this module as a Sphinx extension (setup)."""

from __future__ import annotations

import base64
import copy
import hashlib
import os
import re
from html.parser import HTMLParser
from pathlib import Path, PurePosixPath
from typing import Any
from urllib.parse import urldefrag, urljoin, urlparse

# Output types that a built page shows as an image (matplotlib figures arrive as image/png).
IMAGE_MIMES = ("image/png", "image/jpeg", "image/svg+xml")
_LINK = re.compile(r"(?<!!)\[([^\]]+)\]\(([^)\s]+)\)")


def figure_count(nb: Any) -> int:
    """Number of image outputs in an executed notebook: the figures its page must show."""
    count = 0
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            if out.get("output_type") in ("display_data", "execute_result"):
                if any(mime in out.get("data", {}) for mime in IMAGE_MIMES):
                    count += 1
    return count


#: How a figure's text alternative begins when the figure has no title to state its finding (figure_alt).
UNTITLED = "Untitled figure"
#: The text alternative a page gives a figure whose executed copy recorded none (figure_alt_problems reports it).
NO_ALT = "A figure (no text alternative was recorded with it: its title, in the image, states its finding)"


def _clean(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip()


def figure_alt(fig: Any) -> str:
    """A matplotlib figure's text alternative: its suptitle, or else the titles of its plots, which in this course
    state the figure's finding. A figure with neither gets UNTITLED and what its plots show (their axis labels)."""
    if _clean(fig.get_suptitle()):
        return _clean(fig.get_suptitle())
    titles = [_clean(ax.get_title(loc)) for ax in fig.axes for loc in ("left", "center", "right")]
    if any(titles):
        return "; ".join(t for t in titles if t)
    plots = [(_clean(ax.get_ylabel()), _clean(ax.get_xlabel())) for ax in fig.axes]
    shown = [f"{y or 'values'} against {x or 'position'}" for y, x in plots if x or y]
    return f"{UNTITLED}: " + ("; ".join(shown) if shown else f"{len(fig.axes)} plot(s) without labels")


def record_figure_alts(shell: Any) -> None:
    """From now on, each matplotlib figure the IPython shell displays carries its text alternative (figure_alt) in
    its output's metadata, where the notebook format keeps it: {"image/png": {"alt": ...}}. The website gives it to
    the figure's image; a screen reader reads it there. Beside it, under "course", what the figure draws and the
    findings its titles state (utils.figures.facts), which tools/check_lab.py holds the titles to."""
    from utils import figures

    def alt_metadata(fig: Any) -> tuple[dict, dict]:
        formatters = shell.display_formatter.formatters
        mimes = []
        for mime in IMAGE_MIMES:
            try:
                formatters[mime].lookup(fig)  # the image formats the inline backend renders figures to
            except KeyError:
                continue
            mimes.append(mime)
        shown = {"alt": figure_alt(fig)}
        try:
            shown[figures.KEY] = figures.facts(fig)
        except Exception as err:  # a summary that cannot be made never hides the plot; the check says why
            shown[figures.KEY] = {"error": f"{type(err).__name__}: {err}"}
        return {}, {mime: shown for mime in mimes}

    shell.display_formatter.mimebundle_formatter.for_type_by_name("matplotlib.figure", "Figure", alt_metadata)


def figure_alts(nb: Any) -> list[tuple[int, str | None]]:
    """(cell index in the lesson, recorded text alternative or None) for each image output of an executed notebook
    or of its page (whose provenance note is not counted)."""
    found = []
    cells = [c for c in nb["cells"] if c.get("id") != PROVENANCE_ID]
    for index, cell in enumerate(cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") in ("display_data", "execute_result"):
                mimes = [m for m in IMAGE_MIMES if m in out.get("data", {})]
                if mimes:
                    alt = out.get("metadata", {}).get(mimes[0], {}).get("alt")
                    found.append((index, _clean(alt) if isinstance(alt, str) and alt.strip() else None))
    return found


def figure_alt_problems(nb: Any) -> list[str]:
    """The figures of an executed notebook whose text alternative does not state a finding, in lines: one for each
    figure with no title, one for all those that carry no text alternative."""
    alts = figure_alts(nb)
    found = [
        f"cell {index}: its figure has no title, so its text alternative only reads '{alt}': give it a title that "
        "states its finding (ax.set_title or fig.suptitle)"
        for index, alt in alts
        if alt is not None and alt.startswith(UNTITLED)
    ]
    bare = [str(index) for index, alt in alts if alt is None]
    if bare:
        found.append(
            f"the figure(s) of cell(s) {', '.join(bare)} carry no text alternative: execute the lesson again "
            "(the lessons record each figure's title with it)"
        )
    return found


def _image_file_stem(mime: str, content: Any) -> str:
    """The name myst-nb gives an image output's file, without its extension: the SHA-256 of its bytes."""
    if mime == "image/svg+xml":
        text = content if isinstance(content, str) else "".join(content)
        data = os.linesep.join(text.splitlines()).encode("utf-8")
    else:
        data = base64.b64decode(content if isinstance(content, str) else "".join(content))
    return hashlib.sha256(data).hexdigest()


def image_alts(nb: Any) -> dict[str, str]:
    """Image file name (without extension) -> the text alternative its page gives it, for each image output of a
    notebook: the recorded one, or NO_ALT."""
    alts = {}
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            if out.get("output_type") not in ("display_data", "execute_result"):
                continue
            for mime in IMAGE_MIMES:
                if mime in out.get("data", {}):
                    alt = out.get("metadata", {}).get(mime, {}).get("alt")
                    alt = _clean(alt) if isinstance(alt, str) and alt.strip() else NO_ALT
                    alts[_image_file_stem(mime, out["data"][mime])] = alt
    return alts


def _give_figures_their_alts(app: Any, doctree: Any) -> None:
    """Sphinx, on reading a page: each image of a notebook's outputs gets the text alternative recorded with it
    (Sphinx would otherwise use the image's file name)."""
    import nbformat
    from docutils import nodes

    path = Path(app.env.doc2path(app.env.docname))
    if path.suffix != ".ipynb":
        return
    alts = image_alts(nbformat.read(path, as_version=4))
    for node in doctree.findall(nodes.image):
        stem = PurePosixPath(node["uri"]).stem
        if stem in alts and not node.get("alt"):
            node["alt"] = alts[stem]


def setup(app: Any) -> dict:
    """This module as a Sphinx extension (tools/build_site.py's book configuration): figures' text alternatives."""
    app.connect("doctree-read", _give_figures_their_alts)
    return {"parallel_read_safe": True, "parallel_write_safe": True}


def error_outputs(nb: Any) -> list[str]:
    """Each output of an executed notebook that is an error or prints a traceback, described in one line."""
    found = []
    for index, cell in enumerate(nb["cells"]):
        for out in cell.get("outputs", []):
            kind = out.get("output_type")
            if kind == "error":
                found.append(f"cell {index}: {out.get('ename')}: {out.get('evalue')}")
            elif kind == "stream" and "Traceback (most recent call last)" in out.get("text", ""):
                found.append(f"cell {index}: a traceback printed to {out.get('name')}")
    return found


WIDGET_MIME = "application/vnd.jupyter.widget-view+json"


def drop_widgets(nb: Any) -> int:
    """Remove interactive widget views (progress bars) and the saved widget state from an executed notebook,
    keeping each output's text form: a static page would otherwise load the widget libraries from a CDN.
    Returns the number of views removed."""
    removed = 0
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            if WIDGET_MIME in out.get("data", {}):
                del out["data"][WIDGET_MIME]
                removed += 1
    nb.get("metadata", {}).pop("widgets", None)
    return removed


def front_page(readme: str, pages: set[str]) -> str:
    """The README as the site's front page: links to lessons stay links, links to other repository
    files (which are not pages of the site) become their text in code style."""

    def fix(match: re.Match) -> str:
        text, target = match.group(1), match.group(2)
        if urlparse(target).scheme or target.startswith("#"):
            return match.group(0)
        path = target.split("#", 1)[0]
        if path in pages:
            return match.group(0)
        return text if text.startswith("`") else f"`{text}`"

    return _LINK.sub(fix, readme)


def unlink_lessons_not_built(nb: Any, built: set[str]) -> int:
    """In a lesson's Markdown cells, turn each link to another lesson that this build leaves out (a quick build of
    some lessons) into its text, so that the book has no missing reference. Returns the links changed."""
    changed = 0

    def fix(match: re.Match) -> str:
        nonlocal changed
        target = match.group(2).split("#", 1)[0]
        if urlparse(match.group(2)).scheme or "/" in target or not target.endswith(".ipynb") or target in built:
            return match.group(0)
        changed += 1
        return match.group(1)

    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            cell["source"] = _LINK.sub(fix, "".join(cell["source"]))
    return changed


def toc(notebooks: list[str], docs: tuple[str, ...] = ()) -> str:
    """A Jupyter Book table of contents (_toc.yml): the front page, each lesson in order, then other pages."""
    lines = ["format: jb-book", "root: index", "chapters:"]
    lines += [f"  - file: notebooks/{PurePosixPath(name).stem}" for name in notebooks]
    lines += [f"  - file: docs/{PurePosixPath(name).stem}" for name in docs]
    return "\n".join(lines) + "\n"


class _Links(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.hrefs: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "a":
            href = dict(attrs).get("href")
            if href:
                self.hrefs.append(href)


def internal_links(html: str, page_url: str) -> set[str]:
    """Absolute URLs (fragment removed) of the links on a page that stay on the page's own host."""
    parser = _Links()
    parser.feed(html)
    host = urlparse(page_url).netloc
    found = set()
    for href in parser.hrefs:
        url = urldefrag(urljoin(page_url, href)).url
        parsed = urlparse(url)
        if parsed.scheme in ("http", "https") and parsed.netloc == host:
            found.add(url)
    return found


def is_local(url: str) -> bool:
    """True for a request that stays on this machine (loopback, data: or blob: URLs)."""
    parsed = urlparse(url)
    if parsed.scheme in ("data", "blob", "about"):
        return True
    return parsed.hostname in ("127.0.0.1", "localhost", "::1")


def with_current_cells(executed: Any, source: Any) -> Any:
    """The lesson as it is now in git with the outputs of its executed copy: prose and cell metadata (tags such as
    hide-input, a collapsed source) come from `source`, outputs and timings from `executed`. A copy is reused while
    its code is unchanged, so this is how edits to prose or metadata since its execution reach the page."""
    code = [c for c in executed["cells"] if c["cell_type"] == "code"]
    wanted = [c for c in source["cells"] if c["cell_type"] == "code"]
    if [c["source"] for c in code] != [c["source"] for c in wanted]:
        raise ValueError("the executed copy ran other code than the lesson has now: execute the lesson again")
    ran = iter(code)
    cells = []
    for cell in source["cells"]:
        cell = copy.deepcopy(cell)
        if cell["cell_type"] == "code":
            done = next(ran)
            cell["outputs"], cell["execution_count"] = done["outputs"], done["execution_count"]
            if "execution" in done["metadata"]:
                cell["metadata"]["execution"] = done["metadata"]["execution"]
        cells.append(cell)
    page = copy.deepcopy(executed)
    page["cells"] = cells
    return page


_NOTEBOOK_LINK = re.compile(r"(\]\()([^)\s:#]+)\.ipynb(#[^)\s]*)?\)")


def link_pages_in_outputs(nb: Any) -> int:
    """Point the relative links to notebooks in Markdown outputs (lesson 00's course map) at their pages: the
    site renders those outputs as they are, so `01_x.ipynb` would be a missing file. Returns the links changed."""
    changed = 0
    for cell in nb["cells"]:
        for out in cell.get("outputs", []):
            text = out.get("data", {}).get("text/markdown")
            if isinstance(text, str):
                new, n = _NOTEBOOK_LINK.subn(lambda m: f"{m[1]}{m[2]}.html{m[3] or ''})", text)
                out["data"]["text/markdown"], changed = new, changed + n
    return changed


#: What each mode means for the figures a page shows.
MODE_MEANING = {
    "full": "the lessons' own data and epochs, as a learner runs them",
    "smoke": "the shortened runs of the course's tests (less data, fewer epochs): figures too rough for the "
    "lessons' verdicts; the full-mode site shows the real ones",
}


#: The id of the provenance note's cell on a lesson's page.
PROVENANCE_ID = "course-provenance"


def provenance_note(nb: Any) -> str:
    """One line for the top of a lesson's page: which mode, machine and day produced its outputs, and how long
    the lesson took (from the executed copy's `course_run`, utils.execution)."""
    run = nb["metadata"].get("course_run")
    if not run:
        raise ValueError("the executed copy does not say how it was run (no course_run): execute the lesson again")
    return (
        f"*Outputs on this page: {run['mode']} mode ({MODE_MEANING[run['mode']]}), executed on {run['date']} on "
        f"{run['machine']} with TensorFlow {run['tensorflow']}, in {run['seconds'] / 60:.1f} minutes"
        + (", beside another lesson (alone it takes less).*" if run.get("shared") else ".*")
    )


def with_provenance(nb: Any) -> Any:
    """The page with its provenance note as a Markdown cell right after the title cell."""
    import nbformat

    page = copy.deepcopy(nb)
    note = nbformat.v4.new_markdown_cell(provenance_note(nb))
    note["id"] = PROVENANCE_ID
    page["cells"].insert(1, note)
    return page
