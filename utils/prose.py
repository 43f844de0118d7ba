"""Markdown that a lesson writes from its results: dollar amounts shown as dollar amounts.

JupyterLab typesets any `$…$` pair in Markdown as a formula, so two amounts in one sentence ("$3,945 a day …
at $2.00") turn the words between them into run-together italics; an escaped `\\$` shows as a dollar sign
there and on the website (Jupyter Book's MyST). `tools/check_lab.py` fails on Markdown that loses text so.
"""

from __future__ import annotations

import re

# Code spans and fenced blocks (runs of backticks), where a backslash would show as typed.
_CODE = re.compile(r"(`+).+?(?<!`)\1(?!`)", re.S)
_DOLLAR = re.compile(r"(?<!\\)\$")


def escape_dollars(text: str) -> str:
    """The text with each `$` outside code written `\\$`, so that Markdown renderers show it as a dollar sign
    and never read two of them as the ends of a formula; `$` already escaped stays as it is."""
    parts, last = [], 0
    for code in _CODE.finditer(text):
        parts += [_DOLLAR.sub(r"\\$", text[last : code.start()]), code.group(0)]
        last = code.end()
    parts.append(_DOLLAR.sub(r"\\$", text[last:]))
    return "".join(parts)


def markdown(text: str):
    """Generated prose for display(): IPython's Markdown of the text with its dollar signs escaped."""
    from IPython.display import Markdown

    return Markdown(escape_dollars(text))
