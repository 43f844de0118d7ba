"""Generated Markdown keeps its dollar amounts: `$` outside code written so that no renderer reads a formula.
(How JupyterLab shows it is checked in Chromium by tests/test_check_lab.py.)"""

from __future__ import annotations

import markdown_it
from mdit_py_plugins.dollarmath import dollarmath_plugin

from utils import prose

VERDICT = "B meets the hour at $3,945 a day on demand; at $2.00 a worker-hour the answer changes."


def rendered(text: str) -> str:
    """HTML of Markdown as Jupyter Book's MyST reads it (CommonMark with dollar math and inline HTML)."""
    return markdown_it.MarkdownIt("commonmark").use(dollarmath_plugin).render(text)


def test_amounts_are_escaped_and_render_as_dollar_signs():
    escaped = prose.escape_dollars(VERDICT)
    assert escaped == VERDICT.replace("$", prose.DOLLAR)
    assert "$" not in escaped  # nothing left for a math renderer to pair
    html = rendered(escaped)
    assert "math" not in html.replace("mathjax_ignore", "")
    assert 'at <span class="mathjax_ignore">$</span>3,945 a day' in html  # the entity, read as a plain $


def test_backslash_escapes_code_and_a_second_pass_are_handled():
    text = "Costs \\$5, see `echo $HOME` and\n```bash\nexport A=$B\n```\nthen $6 more."
    escaped = prose.escape_dollars(text)
    assert escaped == text.replace("\\$5", prose.DOLLAR + "5").replace("$6", prose.DOLLAR + "6")
    assert prose.escape_dollars(escaped) == escaped
    assert "<code>echo $HOME</code>" in rendered(escaped)


def test_markdown_gives_ipythons_markdown_of_the_escaped_text():
    shown = prose.markdown(VERDICT)
    assert type(shown).__name__ == "Markdown" and shown._repr_markdown_() == prose.escape_dollars(VERDICT)
