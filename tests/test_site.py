"""The website helpers: figure and error counting, the front page's links, the TOC, link extraction; the browser
check's width and length measurements in Chromium."""

import shutil
import sys
from pathlib import Path

import nbformat
import pytest
import yaml
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output

from utils import site


def _notebook() -> nbformat.NotebookNode:
    plot = new_output("display_data", data={"image/png": "iVBORw0KGgo=", "text/plain": "<Figure>"})
    table = new_output("execute_result", data={"text/html": "<table></table>", "text/plain": "df"}, execution_count=2)
    svg = new_output("display_data", data={"image/svg+xml": "<svg/>"})
    printed = new_output("stream", name="stdout", text="epoch 1 loss 0.3\n")
    caught = new_output("stream", name="stderr", text="Traceback (most recent call last):\n  ...\nValueError: x\n")
    error = new_output("error", ename="KeyError", evalue="'a'", traceback=[])
    return new_notebook(
        cells=[
            new_markdown_cell("# Title"),
            new_code_cell("plot()", outputs=[plot, printed]),
            new_code_cell("df", outputs=[table]),
            new_code_cell("svg()", outputs=[svg, caught]),
            new_code_cell("d['a']", outputs=[error]),
        ]
    )


def test_figure_count_counts_image_outputs_only():
    assert site.figure_count(_notebook()) == 2  # the PNG and the SVG; the HTML table is not a figure


def test_error_outputs_name_the_cells():
    found = site.error_outputs(_notebook())
    assert found == ["cell 3: a traceback printed to stderr", "cell 4: KeyError: 'a'"]
    assert site.error_outputs(new_notebook(cells=[new_code_cell("1")])) == []


def test_front_page_keeps_lesson_links_and_unlinks_repository_files():
    readme = (
        "See [lesson 0](notebooks/00_start_here.ipynb#top), [the data](data/README.md), "
        "[`tools/setup_env.sh`](tools/setup_env.sh), [Horovod](https://horovod.ai) and ![logo](img.png)."
    )
    page = site.front_page(readme, {"notebooks/00_start_here.ipynb"})
    assert page == (
        "See [lesson 0](notebooks/00_start_here.ipynb#top), `the data`, "
        "`tools/setup_env.sh`, [Horovod](https://horovod.ai) and ![logo](img.png)."
    )


def test_toc_lists_the_lessons_in_order_then_other_pages():
    parsed = yaml.safe_load(site.toc(["00_start_here.ipynb", "01_why_distributed.ipynb"], ("instructor.md",)))
    assert parsed == {
        "format": "jb-book",
        "root": "index",
        "chapters": [
            {"file": "notebooks/00_start_here"},
            {"file": "notebooks/01_why_distributed"},
            {"file": "docs/instructor"},
        ],
    }


def test_internal_links_resolve_relative_paths_and_drop_other_hosts():
    html = (
        '<a href="../index.html#map">home</a><a href="01_why.html">next</a>'
        '<a href="https://github.com/horovod/horovod">gh</a><a href="#objectives">here</a><a>no href</a>'
    )
    links = site.internal_links(html, "http://127.0.0.1:8000/notebooks/00_start.html")
    assert links == {
        "http://127.0.0.1:8000/index.html",
        "http://127.0.0.1:8000/notebooks/01_why.html",
        "http://127.0.0.1:8000/notebooks/00_start.html",
    }


def test_is_local():
    assert site.is_local("http://127.0.0.1:8000/_static/mathjax/tex-chtml.js")
    assert site.is_local("data:image/png;base64,AAAA")
    assert not site.is_local("https://unpkg.com/thebe@0.8.2/lib/index.js")
    assert not site.is_local("https://127.0.0.1.example.com/x")


def test_drop_widgets_keeps_the_text_of_a_progress_bar():
    bar = new_output(
        "display_data",
        data={"application/vnd.jupyter.widget-view+json": {"model_id": "abc"}, "text/plain": "epochs: 100% 3/3"},
    )
    nb = new_notebook(cells=[new_code_cell("for e in tqdm(range(3)): pass", outputs=[bar])])
    nb.metadata["widgets"] = {"application/vnd.jupyter.widget-state+json": {"state": {}}}
    assert site.drop_widgets(nb) == 1
    assert nb.cells[0].outputs[0].data == {"text/plain": "epochs: 100% 3/3"}
    assert "widgets" not in nb.metadata
    assert site.drop_widgets(nb) == 0


def test_a_page_has_the_lessons_current_prose_and_tags_with_the_executed_outputs():
    executed = _notebook()
    executed.cells[1].metadata["execution"] = {"iopub.execute_input": "2026-01-01T00:00:00Z"}
    source = _notebook()
    for cell in source.cells:  # stored without outputs, as in git
        if cell.cell_type == "code":
            cell.outputs = []
    source.cells[0].source = "# Title, reworded since the copy was executed"
    source.cells[1].metadata["tags"] = ["hide-input"]
    source.cells.insert(2, new_markdown_cell("A paragraph added since."))
    page = site.with_current_cells(executed, source)
    assert [c.source for c in page.cells] == [c.source for c in source.cells]
    assert page.cells[1].metadata == {"tags": ["hide-input"], "execution": executed.cells[1].metadata["execution"]}
    assert [c.get("outputs") for c in page.cells if c.cell_type == "code"] == [
        c.outputs for c in executed.cells if c.cell_type == "code"
    ]
    assert site.figure_count(page) == 2 and not source.cells[1].outputs  # the source itself is left as it was
    source.cells[3].source = "df.head()"
    with pytest.raises(ValueError, match="execute the lesson again"):
        site.with_current_cells(executed, source)


# --- the browser check itself, in Chromium: a page wider than a phone, the course's stylesheet, a page's length

TOOLS = Path(__file__).resolve().parent.parent / "tools"


@pytest.fixture(scope="module")
def browser_check():
    """tools/check_site.py with a Chromium page at a phone's width (skipped where no Chromium is installed)."""
    if not any(shutil.which(name) for name in ("chromium", "chromium-browser", "google-chrome")):
        pytest.skip("no Chromium here (sudo apt-get install -y chromium)")
    sys.path.insert(0, str(TOOLS))
    import build_site
    import check_site
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=check_site.chromium(), args=check_site.CHROMIUM_FLAGS)
        page = browser.new_page(viewport={"width": 390, "height": 844})
        yield check_site, build_site.CSS, page
        browser.close()


#: As Sphinx writes them: inline code in span.pre, which Sphinx's own stylesheet keeps on one line; a heading with
#: a word longer than a phone's line, and one in inline code (the theme makes it an inline-block in headings).
WIDE_ARTICLE = (
    "<style>span.pre { white-space: nowrap; } h2, h3 { font-size: 2em; } h2 code { display: inline-block; }</style>"
    '<article class="bd-article"><h3>(b) MultiWorkerMirroredStrategy</h3>'
    '<h2>5. <code class="docutils literal"><span class="pre">tf.distribute.MultiWorkerMirroredStrategy</span></code></h2>'
    '<p>Set <code class="docutils literal"><span class="pre">' + "x" * 120 + "</span>"
    ' <span class="pre">y</span></code> first.</p>'
    '<div class="pst-scrollable-table-container"><table><tr>'
    + "<td>column&nbsp;of&nbsp;a&nbsp;wide&nbsp;table</td>" * 6
    + "</tr></table></div></article>"
)


def test_the_browser_check_finds_a_page_wider_than_a_phone(browser_check):
    check_site, css, page = browser_check
    page.set_content(f"<html><body>{WIDE_ARTICLE}</body></html>")
    found = check_site.overflow(page)
    assert found is not None and "on a 390 px screen" in found
    assert "code.docutils.literal" in found and "; table " in found  # the culprits, not their boxes
    assert "text of h3 runs to" in found
    page.set_content(f"<html><body><p>{'word ' * 400}</p></body></html>")
    assert check_site.overflow(page) is None


def test_the_course_stylesheet_keeps_long_code_and_wide_tables_within_a_phone(browser_check):
    check_site, css, page = browser_check
    page.set_content(f"<html><head><style>{css}</style></head><body>{WIDE_ARTICLE}</body></html>")
    assert check_site.overflow(page) is None
    scrolls = page.evaluate(
        "() => { const t = document.querySelector('.pst-scrollable-table-container'); "
        "return t.scrollWidth > t.clientWidth; }"
    )
    assert scrolls, "the wide table should scroll inside its own box"


def test_a_page_length_counts_screens_with_and_without_its_deep_dives(browser_check):
    check_site, _, page = browser_check
    block = '<div style="height: {}px"></div>'
    page.set_content(
        "<html><body style='margin: 0'><section><h1>Lesson</h1>"
        + block.format(1600)
        + "<section><h2>The network lab (deep dive)</h2>"
        + block.format(2400)
        + "<section><h3>Inside it</h3>"
        + block.format(800)
        + "</section></section>"
        + "<section><h2>Summary</h2>"
        + block.format(400)
        + "</section></section></body></html>"
    )
    whole, core = check_site.length_in_screens(page)
    height = page.evaluate("() => document.documentElement.scrollHeight")
    deep = page.evaluate("() => document.querySelectorAll('section')[1].getBoundingClientRect().height")
    assert deep > 3200  # the deep dive with the section nested in it, counted once
    assert whole == pytest.approx(height / 844) and core == pytest.approx((height - deep) / 844)
    assert 2 < core < 3 < 6 < whole


def test_links_to_notebooks_in_markdown_outputs_point_at_their_pages():
    course_map = "- [01 · Why](01_why.ipynb)\n| [02](02_b.ipynb#top) | [data](../data/x.csv) | [AWS](https://aws.amazon.com/a.ipynb) |"
    table = new_output("display_data", data={"text/markdown": course_map, "text/plain": "<Markdown>"})
    printed = new_output("stream", name="stdout", text="see [x](01_why.ipynb)\n")
    nb = new_notebook(cells=[new_markdown_cell("[next](01_why.ipynb)"), new_code_cell("m", outputs=[table, printed])])
    assert site.link_pages_in_outputs(nb) == 2
    assert table.data["text/markdown"] == (
        "- [01 · Why](01_why.html)\n| [02](02_b.html#top) | [data](../data/x.csv) | [AWS](https://aws.amazon.com/a.ipynb) |"
    )
    assert nb.cells[0].source == "[next](01_why.ipynb)"  # Markdown cells are resolved by the site's own parser
    assert printed.text == "see [x](01_why.ipynb)\n"


def test_a_page_says_which_mode_machine_and_day_made_its_outputs():
    import nbformat

    from utils import execution

    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_markdown_cell("# 01 · Title"), nbformat.v4.new_code_cell("1")])
    with pytest.raises(ValueError, match="execute the lesson again"):
        site.with_provenance(nb)
    nb.metadata["course_run"] = execution.run_record("full", 754.0)
    page = site.with_provenance(nb)
    assert [c.cell_type for c in page.cells] == ["markdown", "markdown", "code"] and len(nb.cells) == 2
    note = page.cells[1].source
    run = nb.metadata["course_run"]
    assert note.startswith("*Outputs on this page: full mode (the lessons' own data and epochs")
    assert f"executed on {run['date']} on {run['machine']} with TensorFlow {run['tensorflow']}, in 12.6 minutes" in note
    assert "beside another lesson" not in note
    nb.metadata["course_run"]["mode"] = "smoke"
    assert "too rough for the lessons' verdicts" in site.provenance_note(nb)
    nb.metadata["course_run"]["shared"] = True  # executed two at a time (make test): its time is not its own
    assert site.provenance_note(nb).endswith("minutes, beside another lesson (alone it takes less).*")


def test_a_build_of_some_lessons_keeps_no_link_to_a_lesson_it_leaves_out():
    nb = new_notebook(
        cells=[
            new_markdown_cell("Next: [lesson 02](02_b.ipynb); back to [lesson 00](00_a.ipynb#map)."),
            new_markdown_cell("See [the docs](https://example.org/x.ipynb) and [a script](../scripts/t.ipynb)."),
        ]
    )
    assert site.unlink_lessons_not_built(nb, {"00_a.ipynb", "01_x.ipynb"}) == 1
    assert nb.cells[0].source == "Next: lesson 02; back to [lesson 00](00_a.ipynb#map)."
    assert nb.cells[1].source == "See [the docs](https://example.org/x.ipynb) and [a script](../scripts/t.ipynb)."


# --- figures' text alternatives: recorded with each figure by the lessons, given to its image by the site


def _figure(**titles):
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.figure import Figure

    fig = Figure()
    left, right = fig.subplots(1, 2)
    left.set(xlabel="workers N", ylabel="hours")
    if "suptitle" in titles:
        fig.suptitle(titles["suptitle"])
    left.set_title(titles.get("left", ""))
    right.set_title(titles.get("right", ""))
    return fig


def test_a_figures_text_alternative_is_its_title():
    assert site.figure_alt(_figure(suptitle="The scale doubles\nafter 10 steps", left="float16")) == (
        "The scale doubles after 10 steps"  # the suptitle states the finding; panel names are left out
    )
    assert site.figure_alt(_figure(left="Time per run: 4 workers", right="Cost per day: $12")) == (
        "Time per run: 4 workers; Cost per day: $12"
    )
    untitled = site.figure_alt(_figure())
    assert untitled == f"{site.UNTITLED}: hours against workers N"


def _figure_output(png: bytes, alt: str | None) -> nbformat.NotebookNode:
    import base64

    out = new_output("display_data", data={"image/png": base64.b64encode(png).decode(), "text/plain": "<Figure>"})
    if alt is not None:
        out.metadata = {"image/png": {"alt": alt}}
    return out


def test_figures_without_a_title_or_a_recorded_alternative_are_problems():
    nb = new_notebook(
        cells=[
            new_code_cell("a", outputs=[_figure_output(b"a", "2 ranks train 1.9x faster than 1")]),
            new_code_cell("b", outputs=[_figure_output(b"b", f"{site.UNTITLED}: hours against workers N")]),
            new_code_cell("c", outputs=[_figure_output(b"c", None)]),
        ]
    )
    assert [alt for _, alt in site.figure_alts(nb)] == [
        "2 ranks train 1.9x faster than 1",
        f"{site.UNTITLED}: hours against workers N",
        None,
    ]
    problems = site.figure_alt_problems(nb)
    assert len(problems) == 2
    assert problems[0].startswith("cell 1: its figure has no title") and "ax.set_title or fig.suptitle" in problems[0]
    assert problems[1].startswith("the figure(s) of cell(s) 2 carry no text alternative: execute the lesson again")
    from utils import execution

    nb.metadata["course_run"] = execution.run_record("smoke", 60.0)
    page = site.with_provenance(nb)  # a page's cells are numbered as in its lesson: its provenance note not counted
    assert site.figure_alts(page) == site.figure_alts(nb)
    alts = site.image_alts(nb)  # by the name of the image's file: the SHA-256 of its bytes, as myst-nb names it
    import hashlib

    assert alts[hashlib.sha256(b"a").hexdigest()] == "2 ranks train 1.9x faster than 1"
    assert alts[hashlib.sha256(b"c").hexdigest()] == site.NO_ALT


def test_a_lessons_figures_carry_their_title_in_their_outputs_metadata():
    """In a real kernel with the inline backend, as the lessons run: after the lesson's set-up, plt.show(), a figure
    as a cell's value and display(fig) all record the figure's title as its text alternative."""
    setup = "from utils import lesson\nlesson._record_figure_alts()\nimport matplotlib.pyplot as plt"
    cells = [
        setup,
        "fig, ax = plt.subplots()\nax.plot([1, 2])\nax.set_title('Loss falls by half')\nplt.show()",
        "fig, ax = plt.subplots()\nfig.suptitle('2 workers\\nend level')\nplt.close(fig)\nfig",
        "fig, ax = plt.subplots()\nax.plot([1, 2])\nplt.show()",
    ]
    nb = new_notebook(cells=[new_code_cell(c) for c in cells])
    from nbclient import NotebookClient

    from utils.paths import NOTEBOOKS

    NotebookClient(nb, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    alts = site.figure_alts(nb)
    assert alts == [
        (1, "Loss falls by half"),
        (2, "2 workers end level"),
        (3, f"{site.UNTITLED}: 1 plot(s) without labels"),
    ]
    assert nb.cells[1].outputs[0].metadata["image/png"]["alt"] == "Loss falls by half"
    assert nb.cells[1].outputs[0].metadata["image/png"]["course"]["axes"][0]["title"] == "Loss falls by half"


def test_the_site_gives_each_figure_the_text_alternative_recorded_with_it(tmp_path):
    """A small book built by Sphinx with myst-nb and utils.site, as tools/build_site.py's book lists them."""
    import base64
    import subprocess

    import matplotlib

    matplotlib.use("Agg")
    import io

    pngs = []
    for title in ("one", "two"):
        fig = _figure(suptitle=title)
        buffer = io.BytesIO()
        fig.savefig(buffer, format="png", dpi=20)
        pngs.append(buffer.getvalue())
    nb = new_notebook(
        cells=[
            new_markdown_cell("# A lesson"),
            new_code_cell("plot()", outputs=[_figure_output(pngs[0], "Loss falls by half")]),
            new_code_cell("plot()", outputs=[_figure_output(pngs[1], None)]),
        ]
    )
    nb.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3", "language": "python"}
    src = tmp_path / "src"
    src.mkdir()
    nbformat.write(nb, src / "lesson.ipynb")
    (src / "conf.py").write_text(
        "extensions = ['myst_nb', 'utils.site']\nnb_execution_mode = 'off'\nroot_doc = 'lesson'\n"
        "exclude_patterns = ['_build']\n"
    )
    repo = Path(__file__).resolve().parent.parent
    env = {"PYTHONPATH": str(repo), "PATH": "/usr/bin:/bin"}
    out = subprocess.run(
        [sys.executable, "-m", "sphinx", "-q", "-b", "html", str(src), str(tmp_path / "html")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert out.returncode == 0, out.stderr
    page = (tmp_path / "html" / "lesson.html").read_text()
    assert 'alt="Loss falls by half"' in page
    assert f'alt="{site.NO_ALT}"' in page
    assert base64.b64encode(pngs[0]).decode() not in page  # as files, named by their hash


# --- axe-core in the browser check

#: A page with two serious or critical faults axe-core reports (an image with no text alternative, grey text on
#: white that fails the contrast ratio) and the same page with them fixed.
FAULTY_PAGE = (
    "<!doctype html><html lang='en'><head><title>Lesson</title></head><body><main><h1>Lesson</h1>"
    "<p style='color: #bbb; background: #fff'>A sentence too pale to read.</p>"
    "<div class='cell_output'><img src='data:image/gif;base64,R0lGODlhAQABAAAAACw=' width='40' height='40'></div>"
    "</main></body></html>"
)
FIXED_PAGE = FAULTY_PAGE.replace("#bbb", "#444").replace("<img ", "<img alt='Loss falls by half' ")


def test_the_browser_check_runs_axe_and_fails_on_serious_violations(browser_check):
    from axe_playwright_python.sync_playwright import Axe

    check_site, _, page = browser_check
    axe = Axe()
    for size in ("desktop", "phone"):
        page.set_content(FAULTY_PAGE)
        failing, _ = check_site.accessibility(page, axe, check_site.AXE_OPTIONS[size])
        rules = sorted(line.split("'")[1] for line in failing)
        assert rules == (["color-contrast", "image-alt"] if size == "desktop" else ["image-alt"])
        image = next(line for line in failing if "'image-alt'" in line)
        assert image.startswith("axe critical 'image-alt': Images must have alternative text (1 element(s): img)")
        page.set_content(FIXED_PAGE)
        assert check_site.accessibility(page, axe, check_site.AXE_OPTIONS[size])[0] == []
    page.set_content(FIXED_PAGE.replace("<main>", "<div>").replace("</main>", "</div>"))
    assert check_site.accessibility(page, axe, check_site.AXE_OPTIONS["desktop"]) == (
        [],
        ["landmark-one-main (moderate, 1 element(s))", "region (moderate, 1 element(s))"],
    )  # listed, not failing
    assert check_site.axe_version(axe).startswith("4.")


def test_the_browser_check_finds_figures_whose_text_alternative_is_a_file_name(browser_check):
    check_site, _, page = browser_check
    figure = "<div class='cell_output'><img alt='{}' src='data:image/gif;base64,R0lGODlhAQABAAAAACw='></div>"
    page.set_content(figure.format("../_images/ce40c5f4.png") + figure.format("") + figure.format("Loss falls by half"))
    assert check_site.figures_without_alt(page) == ["../_images/ce40c5f4.png", ""]
