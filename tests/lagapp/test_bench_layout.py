"""The lag job bench's two file layouts: the same records, and ``--by-broker`` in the emitter's layout."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest
from pyspark.sql import SparkSession

import bench.lag_job as bench
from bench.lag_job import T0, write_metrics_dir
from metrics import file_sink

pytestmark = [pytest.mark.slow]


def replica(record: dict[str, object]) -> tuple[object, ...]:
    return (record["topic"], record["partition"], record["broker_id"])


@pytest.mark.timeout(300)
def test_by_broker_files_hold_one_brokers_samples_in_time_order(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 3 brokers of 4 replicas, 6 samples: two files per broker in the emitter's layout.
    small = functools.partial(bench.generated_records, brokers=3, replicas_per_broker=4)
    monkeypatch.setattr(bench, "generated_records", small)
    slices = write_metrics_dir(spark, 6, tmp_path / "slices")
    by_broker = write_metrics_dir(spark, 6, tmp_path / "by-broker", files_per_broker=2)

    files = sorted(by_broker.glob("broker-*.jsonl"))
    assert len(files) == 3 * 2
    for path in files:
        records = file_sink.read_file_records(path)
        broker, first_ts = path.stem.split("-")[1:3]
        assert {r["broker_id"] for r in records} == {int(broker)}
        assert records[0]["ts_ms"] == int(first_ts)
        assert len(records) == 3 * 4
        last: dict[tuple[object, ...], int] = {}
        for record in records:
            ts_ms = record["ts_ms"]
            assert isinstance(ts_ms, int)
            assert ts_ms >= last.get(replica(record), T0)
            last[replica(record)] = ts_ms

    def key(record: dict[str, object]) -> str:
        return repr(sorted(record.items()))

    everything = sorted(map(key, file_sink.read_records(slices)))
    assert sorted(map(key, file_sink.read_records(by_broker))) == everything
    assert len(everything) == 6 * 3 * 4
