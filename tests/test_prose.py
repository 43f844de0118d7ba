"""Generated Markdown keeps its dollar amounts: `$` escaped outside code, so no renderer reads a formula."""

from __future__ import annotations

import markdown_it
from mdit_py_plugins.dollarmath import dollarmath_plugin

from utils import prose

VERDICT = "B meets the hour at $3,945 a day on demand; a worker-hour at $2.00 gives another answer."


def rendered(text: str) -> str:
    """HTML of Markdown as Jupyter Book's MyST reads it (CommonMark with dollar math)."""
    return markdown_it.MarkdownIt("commonmark").use(dollarmath_plugin).render(text)


def test_amounts_are_escaped_and_render_as_dollar_signs():
    escaped = prose.escape_dollars(VERDICT)
    assert escaped == VERDICT.replace("$", "\\$")
    html = rendered(escaped)
    assert "math" not in html and "$3,945 a day" in html and "$2.00 gives" in html


def test_code_is_left_as_typed_and_escaping_twice_changes_nothing():
    text = "Costs $5, see `echo $HOME` and\n```bash\nexport A=$B\n```\nthen $6 more."
    escaped = prose.escape_dollars(text)
    assert escaped == text.replace("$5", "\\$5").replace("$6", "\\$6")
    assert prose.escape_dollars(escaped) == escaped
    assert "<code>echo $HOME</code>" in rendered(escaped)


def test_markdown_gives_ipythons_markdown_of_the_escaped_text():
    shown = prose.markdown(VERDICT)
    assert type(shown).__name__ == "Markdown" and shown._repr_markdown_() == prose.escape_dollars(VERDICT)
