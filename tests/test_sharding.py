"""The sharding summary counts duplicates, gaps and reads from what each worker reported."""

import numpy as np
import pytest

from utils import sharding

RECORDS = [
    {
        "rank": 0,
        "runs": {
            "OFF": {"ids": [0, 1, 2, 3], "lines_read": 4},
            "FILE": {"ids": [0, 1], "lines_read": 2},
            "BAD": {"error": "InvalidArgumentError: not enough files"},
        },
    },
    {
        "rank": 1,
        "runs": {
            "OFF": {"ids": [0, 1, 2, 3], "lines_read": 4},
            "FILE": {"ids": [2], "lines_read": 1},
            "BAD": {"ids": [], "lines_read": 0},
        },
    },
]


def test_coverage_counts_duplicates_gaps_and_reads():
    rows = {r["policy, files"]: r for r in sharding.coverage(RECORDS, total=4)}
    assert rows["OFF"]["seen by 2+ workers"] == 4 and rows["OFF"]["never seen"] == 0
    assert rows["FILE"]["examples per worker"] == [2, 1] and rows["FILE"]["never seen"] == 1
    assert rows["FILE"]["lines read per worker"] == [2, 1]
    assert rows["BAD"]["error"].startswith("worker 0: InvalidArgumentError")
    with pytest.raises(ValueError, match="no worker records"):
        sharding.coverage([], 4)


def test_owner_map_marks_each_example():
    assert sharding.owner_map(RECORDS, "FILE", 4).tolist() == [0, 0, 1, -1]
    assert np.all(sharding.owner_map(RECORDS, "OFF", 4) == -2)
