"""scan_shuffled: rows with one key meet in one bucket wherever they sit in the table, spilled
to files beside it when the table is larger than one bucket, and the files are removed."""

from __future__ import annotations

import numpy as np
import pytest

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")


def _table(path, rows: int = 3000, keys: int = 97) -> None:
    """A two-file table whose keys repeat across files and row groups (small row groups)."""
    path.mkdir()
    rng = np.random.default_rng(5)
    for i in range(2):
        key = rng.integers(-(2**62), 2**62, keys)[rng.integers(0, keys, rows)]
        pq.write_table(
            pa.table({"h": key, "v": np.ones(rows, np.int64)}), path / f"part-{i}.parquet", row_group_size=250
        )


def _count(table):
    g = table.group_by("h").aggregate([("v", "sum")])
    return {"counts": g}


@pytest.mark.parametrize("rows_per_bucket", [10**9, 1000, 50])
def test_every_key_meets_in_one_bucket(tmp_path, monkeypatch, rows_per_bucket):
    from nbmq.spark import scan

    _table(tmp_path / "t")
    spill = tmp_path / "spill"
    spill.mkdir()
    monkeypatch.setattr(scan, "ROWS_PER_BUCKET", rows_per_bucket)
    pieces = scan.scan_shuffled(None, str(tmp_path / "t"), lambda t: t, ["h", "v"], "h", _count, True, str(spill))
    counts = pa.concat_tables([p["counts"] for p in pieces])
    want = pq.read_table(tmp_path / "t").group_by("h").aggregate([("v", "sum")])
    assert counts.num_rows == want.num_rows  # no key reduced in two buckets
    assert dict(zip(*counts.to_pydict().values())) == dict(zip(*want.to_pydict().values()))
    assert (len(pieces) == 1) == (rows_per_bucket > 6000)  # one bucket in memory, else spilled
    assert list(spill.iterdir()) == []  # the bucket files are gone
