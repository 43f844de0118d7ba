"""The lessons where the network lab cannot run: they take the loopback fallback, say so, and still run through.

Executed with COURSE_NETLAB=off (what a machine without namespaces gets), in smoke mode: lesson 03 (the
shaped-link measurements and fits), whose fallback is code of the lesson itself. Lesson 00 only prints
netlab.support()'s answer (test_netlab.py checks it with the lab switched off); lesson 08's calibration is checked
without the lab in test_capstone.py, on the function the lesson calls (a whole second run of the capstone would
cost three minutes); lessons 04 and 06 only skip their lab runs there and compute the prediction alone."""

from __future__ import annotations

import os
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

NOTEBOOKS = Path(__file__).resolve().parent.parent / "notebooks"


def outputs(nb) -> str:
    text = []
    for cell in nb.cells:
        for out in cell.get("outputs", []):
            text.append(out.get("text", "") or "".join(out.get("data", {}).get("text/plain", "")))
    return "\n".join(text)


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "name, says",
    [
        (
            "03_allreduce_cost.ipynb",
            ["no lab here: the allreduces below run on loopback", "loopback (no lab here): fitted B", "no set rate"],
        ),
    ],
)
def test_a_lesson_without_the_lab_falls_back_to_loopback_and_says_so(monkeypatch, name, says):
    monkeypatch.setenv("COURSE_NETLAB", "off")
    monkeypatch.setenv("COURSE_SMOKE", "1")
    assert os.environ["COURSE_NETLAB"] == "off"
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    text = outputs(nb)
    for phrase in says:
        assert phrase in text, f"{name} does not say {phrase!r} without the lab"
