"""A property of the workspace's merge (utils/workspace.py), over random learners and random course updates: for any
edits a learner makes to a lesson (edit, add, delete, move a cell, a cell pasted with the same id as another) and any
course update (edit, add, delete, move), after `sync` every line the learner wrote is in their working copy (and so in
it or a saved copy), every cell the course added is there, and a second sync changes nothing."""

from __future__ import annotations

import json
import tempfile
from pathlib import Path

import pytest

hypothesis = pytest.importorskip(
    "hypothesis", reason="hypothesis is not installed (requirements.txt pins it: make env installs it)"
)
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from utils import workspace  # noqa: E402

NAME = "01_lesson.ipynb"


def cell(cid: str, text: str) -> dict:
    return {"cell_type": "code", "execution_count": None, "id": cid, "metadata": {}, "outputs": [], "source": text}


def notebook(cells: list[dict]) -> dict:
    return {"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}


def save(path: Path, nb: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(nb, indent=1, sort_keys=True) + "\n")


OPS = ["edit", "add", "delete", "move", "duplicate"]
op = st.tuples(st.sampled_from(OPS), st.integers(0, 50), st.integers(0, 50))
course_op = st.tuples(st.sampled_from(OPS[:4]), st.integers(0, 50), st.integers(0, 50))


def apply(cells: list[dict], ops, who: str, counter: list[int]) -> list[str]:
    """Applies `ops` to `cells` in place; returns the lines written (each unique: `<who>-<n>`)."""
    written = []

    def line() -> str:
        counter[0] += 1
        written.append(f"{who}-{counter[0]}")
        return written[-1]

    for kind, a, b in ops:
        if not cells and kind != "add":
            continue
        i = a % max(len(cells), 1)
        if kind == "edit":
            cells[i]["source"] = cells[i]["source"] + "\n" + line()
        elif kind == "add":
            cells.insert(i, cell(f"{who}{counter[0] + 1}", line()))
        elif kind == "delete":
            cells.pop(i)
        elif kind == "move":
            cells.insert(b % len(cells), cells.pop(i))
        else:  # a copy of a cell pasted with the same id, then edited
            twin = json.loads(json.dumps(cells[i]))
            twin["source"] = line()
            cells.insert(i + 1, twin)
    return written


@settings(max_examples=50, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    n=st.integers(1, 6),
    mine_ops=st.lists(op, max_size=6),
    course_ops=st.lists(course_op, max_size=5),
)
def test_the_merge_keeps_every_line_the_learner_wrote_and_a_second_sync_changes_nothing(n, mine_ops, course_ops):
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        v1 = notebook([cell(f"c{i}", f"base {i}") for i in range(n)])
        save(tmp / "notebooks" / NAME, v1)
        ws = workspace.Workspace(tmp / "workspace", tmp / "notebooks")
        assert [c.action for c in ws.sync()] == ["added"]
        mine_p = tmp / "workspace" / NAME
        mine = json.loads(mine_p.read_text())
        apply(mine["cells"], mine_ops, "learner", [0])
        # the lines the learner wrote and kept (not those in a cell they then deleted)
        written = [ln for c in mine["cells"] for ln in c["source"].splitlines() if ln.startswith("learner-")]
        save(mine_p, mine)
        v2 = json.loads(json.dumps(v1))
        apply(v2["cells"], course_ops, "course", [0])
        save(tmp / "notebooks" / NAME, v2)

        change = ws.sync()[0]
        assert change.action != "left as it was", change
        merged = mine_p.read_text()
        text = "\n".join("".join(c["source"]) for c in json.loads(merged)["cells"])
        lost = [line for line in written if line not in text]
        assert not lost, f"lines the learner wrote are not in the working copy: {lost}"
        added = [c for c in v2["cells"] if c["id"].startswith("course")]
        assert all("".join(c["source"]) in text for c in added), "a cell the course added is missing"
        if not written and not any(k in ("delete", "move") for k, _, _ in mine_ops):
            # a learner who changed nothing has the course's version, cell for cell
            assert [c["id"] for c in json.loads(merged)["cells"]] == [c["id"] for c in v2["cells"]]
        if v2["cells"] == v1["cells"]:
            assert merged == json.dumps(mine, indent=1, sort_keys=True) + "\n"  # no course change: left as it is
        else:
            ids = [c["id"] for c in json.loads(merged)["cells"]]
            assert len(ids) == len(set(ids)), "the merged copy repeats a cell id"

        assert {c.action for c in ws.sync()} == {"unchanged"}
        assert mine_p.read_text() == merged
