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
