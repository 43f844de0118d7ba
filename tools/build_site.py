"""Build the course website: every lesson executed by the course itself, rendered with Jupyter Book 1.

    make site                                   # smoke mode (a few minutes), into build/site
    make site SITE_MODE=full                    # the full figures (as long as the lessons in full mode)
    python tools/build_site.py --mode smoke 00_start_here.ipynb   # only some lessons (quick look)

The notebooks in git stay without outputs: the pages are made from the executed copies in
build/executed/<mode> (utils/execution.py), which the notebook tests write (`make test`: smoke mode); a
lesson is executed here only when it has no copy in that mode made from its code as it is now. Nothing is
fetched from the internet, at build time or when a page is opened (MathJax is served from the site).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import nbformat

from utils import course, execution, site
from utils.paths import NOTEBOOKS, REPO_ROOT

CONFIG = """\
title: Distributed training with TensorFlow, Horovod and Amazon SageMaker
author: the course's contributors
only_build_toc_files: true
execute:
  execute_notebooks: "off"
launch_buttons:
  notebook_interface: ""
  thebe: false
html:
  use_repository_button: false
  use_issues_button: false
  use_edit_page_button: false
  use_download_button: true
sphinx:
  config:
    # Jupyter Book's default list without Thebe (it loads code from unpkg.com, and sphinx-thebe 0.3.1
    # declares its script twice on each page) and intersphinx (it fetches inventories from the internet);
    # MathJax from the site itself; utils.site gives each figure the text alternative recorded with it (its title).
    extensions: [sphinx_togglebutton, sphinx_copybutton, myst_nb, jupyter_book, sphinx_comments, sphinx_external_toc,
                 sphinx_design, sphinx_book_theme, sphinx-mathjax-offline, sphinx_multitoc_numbering, utils.site]
    # pydata-sphinx-theme logs a console error on a first visit unless a default mode is given.
    html_context:
      default_mode: light
    html_show_copyright: false
    # Markdown outputs (lesson 00's course map, generated sentences) as GitHub-flavoured Markdown, as JupyterLab
    # renders them: tables included, and no dollar-sign math.
    nb_render_markdown_format: gfm
    html_last_updated_fmt: ""
"""

#: The course's additions to the theme, so that no page is wider than a phone's screen (tools/check_site.py checks).
CSS = """\
/* A word longer than its line (a class name in a heading, a path in inline code) breaks instead of widening the
   page; Sphinx keeps each word of inline code on one line (span.pre is white-space: nowrap). */
.bd-article { overflow-wrap: break-word; }
.bd-article code.literal span.pre { white-space: pre-wrap; }
.bd-article code.literal { max-width: 100%; } /* the theme makes code in headings an inline-block */
/* Tables and cell outputs wider than the text column scroll inside their own box. */
.bd-article .cell_output, .bd-article .pst-scrollable-table-container { max-width: 100%; overflow-x: auto; }
"""


#: The theme's header button that opens the list of pages does nothing: pydata-sphinx-theme 0.17 and
#: sphinx-book-theme 1.3 bind their handlers to the first `.primary-toggle` of the page, which is the navbar's own
#: button that the book theme hides, so on a phone the pages could only be left by "Previous" and "Next". Each
#: other toggle passes its click to the first one (tools/check_site.py opens the list at a phone's width).
JS = """\
document.addEventListener("DOMContentLoaded", () => {
  for (const kind of [".primary-toggle", ".secondary-toggle"]) {
    const [bound, ...others] = document.querySelectorAll(kind);
    for (const button of others) {
      button.addEventListener("click", (event) => { event.preventDefault(); event.stopPropagation(); bound.click(); });
    }
  }
});
"""


def execute(name: str, mode: str, dest: Path) -> None:
    """Copy the lesson's executed copy in this mode to dest, executing the lesson first only when it has no
    current copy (one made from its code as it is now: the notebook tests' copy, or an earlier build's)."""
    if execution.is_current(name, mode):
        print(f"[site] {name}: executed copy is current ({mode}), reused", flush=True)
    else:
        print(f"[site] {name}: executing ({mode}) ...", flush=True)
    try:
        copy, seconds = execution.ensure(name, mode, cell_timeout=1800)
    except execution.LessonFailed as err:
        sys.exit(f"[site] {err}")
    if seconds is not None:
        print(f"[site] {name}: {seconds:.0f} s", flush=True)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(copy, dest)


def main() -> None:
    """Execute the lessons, write the book's sources and build the HTML."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--mode", choices=["smoke", "full"], default=os.environ.get("SITE_MODE", "smoke"))
    parser.add_argument("--out", type=Path, default=REPO_ROOT / "build" / "site")
    parser.add_argument("notebooks", nargs="*", help="file names in notebooks/ (default: every lesson)")
    args = parser.parse_args()
    names = args.notebooks or [lesson.notebook for lesson in course.lessons()]
    src = args.out / "src"
    start = time.perf_counter()
    for name in names:
        if not (NOTEBOOKS / name).exists():
            sys.exit(f"notebooks/{name} does not exist; give file names from notebooks/.")
        dest = src / "notebooks" / name
        execute(name, args.mode, dest)
        # the lesson's prose and cell tags as they are now (hide-input), with the executed copy's outputs
        nb = site.with_current_cells(nbformat.read(dest, as_version=4), nbformat.read(NOTEBOOKS / name, as_version=4))
        site.drop_widgets(nb)  # progress bars keep their text; the page loads no widget library from a CDN
        site.link_pages_in_outputs(nb)  # links to lessons in Markdown outputs, as in the lessons' own text
        nb = site.with_provenance(nb)  # which mode, machine and day produced the outputs
        site.unlink_lessons_not_built(nb, set(names))  # a build of some lessons: no link to a missing page
        nbformat.write(nb, dest)
    docs = tuple(sorted(p.name for p in (REPO_ROOT / "docs").glob("*.md")))
    (src / "docs").mkdir(parents=True, exist_ok=True)
    for name in docs:  # pages beside the lessons (the instructor's guide); their links to lessons resolve as in git
        (src / "docs" / name).write_text((REPO_ROOT / "docs" / name).read_text())
    pages = {f"notebooks/{name}" for name in names} | {f"docs/{name}" for name in docs}
    (src / "index.md").write_text(site.front_page((REPO_ROOT / "README.md").read_text(), pages))
    (src / "_toc.yml").write_text(site.toc(names, docs))
    (src / "_config.yml").write_text(CONFIG)
    (src / "_static").mkdir(exist_ok=True)
    (src / "_static" / "course.css").write_text(CSS)  # Jupyter Book adds every stylesheet in _static to each page
    (src / "_static" / "course.js").write_text(JS)  # and every script
    html = args.out / "html"
    shutil.rmtree(src / "_build", ignore_errors=True)
    book = Path(sys.executable).with_name("jupyter-book")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), os.environ.get("PYTHONPATH")]))}
    result = subprocess.run(
        [str(book), "build", str(src), "--builder", "html", "--keep-going", "-W"], check=False, env=env
    )  # the course's utils on the path: utils.site is one of the book's extensions
    if result.returncode != 0:
        sys.exit(
            "[site] jupyter-book reported warnings or errors (above); the site was not published to build/site/html."
        )
    shutil.rmtree(html, ignore_errors=True)
    shutil.copytree(src / "_build" / "html", html)
    print(f"[site] built {len(names)} lessons in {time.perf_counter() - start:.0f} s: open {html / 'index.html'}")


if __name__ == "__main__":
    main()
