"""Markdown that a lesson writes from its results: dollar amounts shown as dollar amounts.

JupyterLab typesets any `$…$` pair in Markdown as a formula, so two amounts in one sentence ("$3,945 a day …
at $2.00") turn the words between them into run-together italics. A backslash does not prevent it there
(jupyterlab/jupyterlab#8645: `\\$` becomes `$` before MathJax reads the page), and the double backslash that
JupyterLab needs shows on the website (jupyter-book/jupyter-book#750). What works in both, checked in
Chromium by tools/check_lab.py and on a built page: the sign as an HTML entity in an element that MathJax is
told to skip, `<span class="mathjax_ignore">&#36;</span>`, which every Markdown renderer shows as "$".
"""

from __future__ import annotations

import re

#: A dollar sign that neither JupyterLab's MathJax nor Jupyter Book's dollar math reads as a delimiter.
DOLLAR = '<span class="mathjax_ignore">&#36;</span>'
# Code spans and fenced blocks (runs of backticks), where a dollar sign is shown as typed anyway.
_CODE = re.compile(r"(`+).+?(?<!`)\1(?!`)", re.S)
_SIGN = re.compile(r"\\?\$")


def escape_dollars(text: str) -> str:
    """Prose (Markdown with no formulas) with each `$` (or `\\$`) outside code written as DOLLAR."""
    parts, last = [], 0
    for code in _CODE.finditer(text):
        parts += [_SIGN.sub(DOLLAR, text[last : code.start()]), code.group(0)]
        last = code.end()
    parts.append(_SIGN.sub(DOLLAR, text[last:]))
    return "".join(parts)


def markdown(text: str):
    """Generated prose for display(): IPython's Markdown of the text with its dollar signs escaped."""
    from IPython.display import Markdown

    return Markdown(escape_dollars(text))
