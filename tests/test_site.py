"""The website helpers: figure and error counting, the front page's links, the TOC, link extraction."""

import nbformat
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
