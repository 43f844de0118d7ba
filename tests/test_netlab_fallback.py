"""The lessons where the network lab cannot run: they take the loopback fallback and say so.

Executed with COURSE_NETLAB=off (what a machine without namespaces gets), in smoke mode: lesson 03 (the
shaped-link measurements and fits), whose fallback is code of the lesson itself. Only the cells the lab's section
reads run (FALLBACK_CELLS: the set-up, the loopback measurements it falls back on, the section itself, and the
lesson's last cell); the rest of the lesson runs in the notebook tests, and a whole second run cost two minutes of
the unit tests. Lesson 00 only prints netlab.support()'s answer (test_netlab.py checks it with the lab switched
off); lesson 08's calibration is checked without the lab in test_capstone.py, on the function the lesson calls (a
whole second run of the capstone would cost three minutes); lessons 04 and 06 only skip their lab runs there and
compute the prediction alone."""

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


#: Lesson 03's cells that the fallback needs, by id, in the lesson's order: the set-up, the socket ring (ELEMENTS),
#: the Horovod measurements on loopback and their fits, then every code cell of "On a network", and the last cell
#: (L.finish(): the lesson's scratch folder goes with it, as it does at the end of the lesson).
FALLBACK_CELLS = {
    "03_allreduce_cost.ipynb": [
        *("9f61aa36", "85b42662", "a54acfd2", "a07dbfff"),
        *("9637dc5f", "f76592f1", "621a02a4", "9eed59f1", "c5a25470", "b89efaa6", "1edf67a3", "d57bbfff"),
        "eb3116d0",
    ],
}


@pytest.mark.timeout(600)
@pytest.mark.parametrize(
    "name, says",
    [
        (
            "03_allreduce_cost.ipynb",
            [
                "no lab here: the allreduces below run on loopback",
                "loopback (no lab here): fitted B",
                "no set rate",
                "no lab here: see the loopback fusion table above",
            ],
        ),
    ],
)
def test_a_lesson_without_the_lab_falls_back_to_loopback_and_says_so(monkeypatch, name, says):
    monkeypatch.setenv("COURSE_NETLAB", "off")
    monkeypatch.setenv("COURSE_SMOKE", "1")
    assert os.environ["COURSE_NETLAB"] == "off"
    nb = nbformat.read(NOTEBOOKS / name, as_version=4)
    by_id = {cell.get("id"): cell for cell in nb.cells}
    missing = [i for i in FALLBACK_CELLS[name] if i not in by_id]
    assert not missing, f"{name} has no cell {missing}: update FALLBACK_CELLS to the cells its lab section reads"
    nb.cells = [by_id[i] for i in FALLBACK_CELLS[name]]
    NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(NOTEBOOKS)}}).execute()
    text = outputs(nb)
    for phrase in says:
        assert phrase in text, f"{name} does not say {phrase!r} without the lab"
