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


def test_per_batch_counts_by_hand():
    records = [
        {"rank": 1, "runs": {"DATA": {"ids": [2, 3, 6]}}},
        {"rank": 0, "runs": {"DATA": {"ids": [0, 1, 4, 5]}}},
    ]
    # batches of 4: {0..3}, {4..7}; rank 0 first
    assert sharding.per_batch_counts(records, "DATA", 4).tolist() == [[2, 2], [2, 1]]
    with pytest.raises(ValueError, match="failed on a worker"):
        sharding.per_batch_counts(RECORDS, "BAD", 4)


def test_same_examples_compares_every_worker():
    assert sharding.same_examples(RECORDS, "OFF", "OFF")
    assert not sharding.same_examples(RECORDS, "OFF", "FILE")
    assert not sharding.same_examples(RECORDS, "BAD", "BAD")  # a failed run is no match


def test_the_worker_program_shards_as_the_lesson_says(tmp_path):
    """scripts/workers/shard_policies.py on 2 real MultiWorkerMirroredStrategy workers, 3 files of 300 hours."""
    from utils import data, launch, paths

    hours = 900
    data.write_files(np.arange(hours, dtype=float), tmp_path / "three", 3)
    data.write_files(np.arange(hours, dtype=float), tmp_path / "one", 1)
    args = ["--files", str(tmp_path / "three"), "--one-file", str(tmp_path / "one"), "--batch", "100"]
    recs = launch.launch_tf_workers(paths.WORKERS / "shard_policies.py", 2, args=args, timeout=240, stream=False)
    recs = sorted(recs.records(), key=lambda r: r["rank"])
    rows = {r["policy, files"]: r for r in sharding.coverage(recs, hours)}
    assert rows["OFF, three"]["seen by 2+ workers"] == hours
    # FILE: worker 0 reads files 0 and 2, worker 1 file 1, and nobody reads a line it does not keep
    owner = sharding.owner_map(recs, "FILE, three", hours)
    assert (owner[:300] == 0).all() and (owner[300:600] == 1).all() and (owner[600:] == 0).all()
    assert rows["FILE, three"]["lines read per worker"] == [600, 300]
    # DATA: every worker reads every line and keeps half of every batch of 100
    assert rows["DATA, three"]["lines read per worker"] == [hours, hours]
    assert (sharding.per_batch_counts(recs, "DATA, three", 100) == 50).all()
    assert rows["DATA, three"]["never seen"] == 0 and rows["DATA, three"]["seen by 2+ workers"] == 0
    # AUTO on a pipeline that reads files: the same examples as FILE, not DATA's
    assert sharding.same_examples(recs, "AUTO, three", "FILE, three")
    assert not sharding.same_examples(recs, "AUTO, three", "DATA, three")
    assert "FILE based sharding" in rows["FILE, one"]["error"]
    # the default, AUTO, on one file and 2 workers: it finds a file reader, so it shards by FILE and fails the same way
    args += ["--runs", "AUTO:one"]
    auto = launch.launch_tf_workers(paths.WORKERS / "shard_policies.py", 2, args=args, timeout=240, stream=False)
    (row,) = sharding.coverage(auto.records(), hours)
    assert row["policy, files"] == "AUTO, one" and "FILE based sharding" in row["error"]
