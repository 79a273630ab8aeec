"""The incremental ``--follow`` job: merged micro-batch by micro-batch, it writes what the batch job computes.

The scenario is ``test_dashboard.cluster_records`` (a leader killed and restarted, a truncation, a
stalled follower, a leader change), with two gaps in one incarnation (SIGSTOP, not a restart): leader 1
paused for 16 s while broker 2 takes over, follower 3 for 22 s. Delivered as brokers' files arrive:
brokers 1 and 2 every 5 s, broker 3's file of each 5 s one batch late. Small windows make the settled
horizon move many times over its 40 s, so rows settle, the tail carries context across gaps, and the
partials merge.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import DataFrame, SparkSession

from lagapp import dashboard_data, follow, follow_round, spark_app
from lagapp import schema as s
from lagapp import tables as tb
from lagapp.tables import LagJobConfig
from tests.lagapp.test_dashboard import T0, cluster_records, roll_active_files, write_metrics_dir
from tests.lagapp.test_tables import follower, leader

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

CONFIG = LagJobConfig(window_ms=4000, health_bucket_ms=1000)
WATERMARK_MS = 5000  # broker 3's records arrive up to 5 s behind the newest
SLICE_MS = 5000
PAUSED_MS = {1: range(T0 + 20_000, T0 + 36_000), 3: range(T0 + 8_000, T0 + 30_000)}


def arrivals() -> list[list[dict[str, Any]]]:
    """Micro-batches: brokers 1 and 2's records of each 5 s, and broker 3's of the 5 s before."""
    by_broker = cluster_records()
    for broker, paused in PAUSED_MS.items():
        start = by_broker[broker][0][s.BROKER_START_MS]  # the same incarnation throughout
        by_broker[broker] = [{**r, s.BROKER_START_MS: start} for r in by_broker[broker] if r[s.TS_MS] not in paused]
    end = max(r[s.TS_MS] for rs in by_broker.values() for r in rs)
    slices = (end - T0) // SLICE_MS + 2

    def of(broker: int, k: int) -> list[dict[str, Any]]:
        return [r for r in by_broker[broker] if k * SLICE_MS <= r[s.TS_MS] - T0 < (k + 1) * SLICE_MS]

    return [of(1, k) + of(2, k) + of(3, k - 1) for k in range(slices)]


def all_rows() -> list[dict[str, Any]]:
    return [r for batch in arrivals() for r in batch]


def records(spark: SparkSession, rows: list[dict[str, Any]]) -> DataFrame:
    """The rows as a micro-batch of the stream: read with the whole record schema."""
    names = s.RECORD_SCHEMA.fieldNames()
    return spark.createDataFrame([tuple(row.get(n) for n in names) for row in rows], s.RECORD_SCHEMA)


def table_rows(folder: Path) -> list[tuple[Any, ...]]:
    """A written table's rows, sorted (a map's entries too: a map has no order), hidden files left aside."""

    def value(v: Any) -> Any:
        return sorted(v) if isinstance(v, list) else v

    return sorted((tuple(value(v) for v in r.values()) for r in pq.read_table(folder).to_pylist()), key=repr)


def assert_tables_as_the_batch_job_computes(out: Path, rows: list[dict[str, Any]]) -> None:
    expected = tb.compute_tables(pa.Table.from_pylist(rows, schema=follow_round.RECORDS), CONFIG)
    for name in s.TABLES:
        assert pq.read_schema(next((out / name).glob("*.parquet"))) == s.TABLE_SCHEMAS[name], name
        want = expected[name]
        assert want.num_rows > 0 or name == s.TABLE_BROKER_HEALTH, name
        assert table_rows(out / name) == sorted(
            (tuple(sorted(v) if isinstance(v, list) else v for v in r.values()) for r in want.to_pylist()), key=repr
        ), name


def assert_same_tables(got: Path, want: Path) -> None:
    for name in s.TABLES:
        assert table_rows(want / name), name
        assert table_rows(got / name) == table_rows(want / name), name


def merge_all(
    spark: SparkSession, out: Path, batches: list[list[dict[str, Any]]], first_id: int = 0, fan_in: int = 2
) -> follow.Round:
    job = follow.FollowJob(out, CONFIG, WATERMARK_MS, fold_fan_in=fan_in)
    result = None
    for i, batch in enumerate(batches):
        result = job.merge(records(spark, batch), first_id + i)
    assert result is not None
    return result


class Crash(Exception):
    pass


def test_merged_batch_by_batch_through_a_crash_and_a_rerun_the_tables_are_the_batch_jobs(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Settled parts are folded two at a time, so every round that settles rows also folds some.
    batches = arrivals()
    merge_all(spark, tmp_path, batches[:4])

    def crash(step: str) -> None:
        if step == "written":  # every table file written, the state not yet committed
            raise Crash

    job = follow.FollowJob(tmp_path, CONFIG, WATERMARK_MS, fold_fan_in=2)
    with pytest.raises(Crash):
        job.merge(records(spark, batches[4]), 4, on_step=crash)
    # a new process: the stream reruns batch 4 (its commit never happened), then batch 5 twice
    job = follow.FollowJob(tmp_path, CONFIG, WATERMARK_MS, fold_fan_in=2)
    assert job.state is not None and job.state.batch_id == 3
    result = None
    for i, batch in enumerate(batches[4:7], start=4):
        result = job.merge(records(spark, batch), i)
        if i == 5:
            again = job.merge(records(spark, batch), i)
            assert again.records == sum(len(b) for b in batches[:6])

    # the next round that folds commits, then its fold stops halfway: the output written, one input deleted
    def interrupted(folder: Path, hidden: Path) -> None:
        covered = follow.parse_settled_part(hidden.name[len(follow.FOLDING_PREFIX) :])
        assert covered is not None
        first = next(p for p in follow.settled_parts(folder) if covered[0] <= p.start_ms)
        first.path.unlink()
        raise Crash

    crashed_at = None
    with monkeypatch.context() as patch:
        patch.setattr(follow, "finish_fold", interrupted)
        for i, batch in enumerate(batches[7:], start=7):
            try:
                result = job.merge(records(spark, batch), i)
            except Crash:
                crashed_at = i
                break
    assert crashed_at is not None and crashed_at < len(batches) - 1, "no later round folded"
    # a new process finishes the fold before the stream goes on with the next batch
    job = follow.FollowJob(tmp_path, CONFIG, WATERMARK_MS, fold_fan_in=2)
    assert job.state is not None and job.state.batch_id == crashed_at
    for i, batch in enumerate(batches[crashed_at + 1 :], start=crashed_at + 1):
        result = job.merge(records(spark, batch), i)

    # the horizon moved many times: settled rows were written once and folded, the rest replaced each round
    assert result is not None and result.settled_ms is not None and result.settled_ms > T0 + 20_000
    for name in follow.TIMED_TABLES:
        folder = tmp_path / name
        parts = follow.settled_parts(folder)
        assert [p.start_ms for p in parts[1:]] == [p.end_ms for p in parts[:-1]], f"{name}: a gap or an overlap"
        assert parts[-1].end_ms == result.settled_ms
        assert max(p.level for p in parts) >= 2, f"{name}: folded fewer than 4 parts into one"
        levels = [p.level for p in parts]
        assert all(levels.count(level) < 2 for level in levels), f"{name}: two parts of one level left: {levels}"
        assert not any(p.name.startswith(".") for p in folder.iterdir())
    assert result.records == sum(len(b) for b in batches)
    assert_tables_as_the_batch_job_computes(tmp_path, all_rows())


def write_part(folder: Path, start_ms: int, end_ms: int) -> None:
    rows = pa.table({s.TS_MS: pa.array(range(start_ms, end_ms), pa.int64())})
    pq.write_table(rows, folder / follow.settled_part_name(start_ms, end_ms, 0))


def test_settled_parts_fold_like_a_counter_and_keep_every_row_once(tmp_path: Path) -> None:
    # given 20 rounds, each adding the next 10 ms as a part, folded three at a time after each round
    for k in range(20):
        write_part(tmp_path, 10 * k, 10 * (k + 1))
        follow.fold_settled(tmp_path, fan_in=3)

    # then 20 = 2·9 + 0·3 + 2·1: two parts of level 2, then two of level 0, spanning [0, 200) in order
    parts = follow.settled_parts(tmp_path)
    assert [(p.start_ms, p.end_ms, p.level) for p in parts] == [(0, 90, 2), (90, 180, 2), (180, 190, 0), (190, 200, 0)]
    rows = sorted(v for p in parts for v in pq.read_table(p.path)[s.TS_MS].to_pylist())
    assert rows == list(range(200))
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.path.name for p in parts)


def test_a_fold_stopped_after_writing_its_output_is_finished_without_losing_or_doubling_rows(tmp_path: Path) -> None:
    # given three parts and their fold's output written under its hidden name, one input already deleted
    for k in range(3):
        write_part(tmp_path, 10 * k, 10 * (k + 1))
    hidden = tmp_path / f"{follow.FOLDING_PREFIX}{follow.settled_part_name(0, 30, 1)}"
    pq.write_table(pa.table({s.TS_MS: pa.array(range(30), pa.int64())}), hidden)
    (tmp_path / follow.settled_part_name(0, 10, 0)).unlink()

    follow.finish_fold(tmp_path, hidden)

    parts = follow.settled_parts(tmp_path)
    assert [(p.start_ms, p.end_ms, p.level) for p in parts] == [(0, 30, 1)]
    assert pq.read_table(parts[0].path)[s.TS_MS].to_pylist() == list(range(30))
    assert [p.name for p in tmp_path.iterdir()] == [parts[0].path.name]


def test_a_state_of_another_config_is_rebuilt_from_the_records(spark: SparkSession, tmp_path: Path) -> None:
    merge_all(spark, tmp_path, arrivals()[:3])
    job = follow.FollowJob(tmp_path, LagJobConfig(window_ms=2000), WATERMARK_MS)
    assert job.needs_rebuild
    assert not any(p.name.startswith(("s", "r")) for p in (tmp_path / s.TABLE_FOLLOWER_LAG).iterdir())


def test_follow_switches_from_recomputing_to_merging_and_ends_with_the_batch_jobs_tables(
    spark: SparkSession, tmp_path: Path
) -> None:
    metrics = tmp_path / "metrics"
    rolled, active = write_metrics_dir(metrics)
    out = tmp_path / "out"

    def follow_once() -> spark_app.DashboardResult:
        return spark_app.run_dashboard(
            metrics, out, follow=True, trigger_s=1, max_batches=1, spark=spark, incremental_from=rolled + 1
        )

    first = follow_once()  # fewer records than the threshold: recomputed, no state yet
    assert first.records == rolled and not (out / s.STREAM_DIR / "state" / follow.STATE_FILE).exists()
    roll_active_files(metrics)
    second = follow_once()  # past the threshold: the state is built from every stored record, then merged
    assert second.records == rolled + active
    assert (out / s.STREAM_DIR / "state" / follow.STATE_FILE).exists()
    batch = spark_app.run_dashboard(metrics, tmp_path / "batch", window_s=10, spark=spark)
    assert batch.records == second.records
    assert_same_tables(out, tmp_path / "batch")
    assert second.row_counts == batch.row_counts
    page = (out / spark_app.DASHBOARD_FILE).read_text()
    assert "orders-0" in page and "Follower lag" in page


# ---- the tail: what a later round needs from before the cut ----


def _leader_row(ts_s: int, broker: int, followers: tuple[int, ...]) -> dict[str, Any]:
    return leader(T0 + ts_s * 1000, broker_id=broker, in_sync={f: True for f in followers})


def _tail_times(spark: SparkSession, rows: list[dict[str, Any]], cut_s: int) -> set[tuple[int, int]]:
    ordered = follow_round.ordered(follow_round.conform(follow.as_records(records(spark, rows)).toArrow()))
    tail = follow_round.tail_of(ordered, T0 + cut_s * 1000, CONFIG).to_pylist()
    return {(r[s.BROKER_ID], (r[s.TS_MS] - T0) // 1000) for r in tail if r[s.KIND] == s.KIND_PARTITION}


def test_the_tail_keeps_each_replicas_newest_row_before_the_cut(spark: SparkSession) -> None:
    # given broker 1 leads until 5 s and pauses; broker 2 leads from 6 s on; both list follower 3
    rows = [_leader_row(t, 1, (3,)) for t in range(6)] + [_leader_row(t, 2, (3,)) for t in range(6, 21)]
    kept = _tail_times(spark, rows, cut_s=15)
    # every row from the cut; broker 1's newest row (the previous row of its next sample, whenever that
    # comes); broker 2's newest before the cut (also the leader sequence's and follower 3's listing)
    assert kept == {(1, 5), (2, 14), *((2, t) for t in range(15, 21))}


def test_the_tail_keeps_the_partitions_newest_leader_row_before_the_cut(spark: SparkSession) -> None:
    # given broker 2 leads until 10 s, listing no follower, then follows
    rows = [_leader_row(t, 2, ()) for t in range(11)]
    rows += [follower(T0 + t * 1000, fetch_offset=t, lag_messages=0) for t in range(11, 21)]
    kept = _tail_times(spark, rows, cut_s=15)
    # the leader sequence's newest row (10 s) and the replica's newest (14 s) before the cut
    assert kept == {(2, 10), (2, 14), *((2, t) for t in range(15, 21))}


def test_the_tail_keeps_the_newest_leader_row_listing_each_follower(spark: SparkSession) -> None:
    # given broker 1 lists follower 3 until 5 s, then stops listing it (3 was moved away) and goes on
    rows = [_leader_row(t, 1, (2, 3)) for t in range(6)] + [_leader_row(t, 1, (2,)) for t in range(6, 21)]
    kept = _tail_times(spark, rows, cut_s=15)
    assert kept == {(1, 5), (1, 14), *((1, t) for t in range(15, 21))}


def test_the_tail_keeps_the_newest_row_listing_each_of_several_followers(spark: SparkSession) -> None:
    # given broker 1 lists 2 and 3 until 5 s, then 2 alone until 10 s, then 4 alone: each follower's newest
    # listing is another row
    rows = [_leader_row(t, 1, (2, 3)) for t in range(6)] + [_leader_row(t, 1, (2,)) for t in range(6, 11)]
    rows += [_leader_row(t, 1, (4,)) for t in range(11, 21)]
    kept = _tail_times(spark, rows, cut_s=15)
    assert kept == {(1, 5), (1, 10), (1, 14), *((1, t) for t in range(15, 21))}


def test_the_tail_keeps_a_replicas_newest_row_with_a_role_when_offline_rows_follow_it(spark: SparkSession) -> None:
    # given broker 2 leads until 10 s, then reports the partition offline (no leader) while broker 3,
    # back from a restart, leads from 12 s: broker 2's follower status reads its newest role that is not
    # offline (leader, at 10 s), which no other rule keeps once broker 3's rows are the leader sequence's
    rows = [_leader_row(t, 2, ()) for t in range(11)]
    rows += [
        {**follower(T0 + t * 1000, fetch_offset=t, lag_messages=None), s.ROLE: s.ROLE_OFFLINE, s.LEADER_ID: -1}
        for t in range(11, 21)
    ]
    rows += [_leader_row(t, 3, ()) for t in range(12, 21)]
    kept = _tail_times(spark, rows, cut_s=15)
    assert kept == {(2, 10), (2, 14), (3, 14), *((b, t) for b in (2, 3) for t in range(15, 21))}


def test_the_tail_keeps_a_followers_last_window_and_the_two_samples_before_it(spark: SparkSession) -> None:
    # given follower 2 samples every second until 12 s, then stops; the window is 4 s
    rows = [follower(T0 + t * 1000, fetch_offset=t, lag_messages=1) for t in range(13)]
    kept = _tail_times(spark, rows, cut_s=30)
    assert kept == {(2, t) for t in range(7, 13)}  # 9..12 s in its last window (> 8 s), 7 and 8 s before


@pytest.mark.timeout(900)  # five rounds of --follow, each a streaming query of its own
def test_follow_round_by_round_over_arriving_files_ends_with_the_batch_jobs_tables(
    spark: SparkSession, tmp_path: Path
) -> None:
    # Rolled files arrive as in ``arrivals``, two of its batches a round: each round brokers 1 and 2's files
    # of 10 s, broker 3's 5 s behind. Every round merges (incremental_from=0): its facts come from the
    # carried tail and its new records; the horizon settles rows round after round (windows of 2 s, the
    # watermark three of them).
    metrics = tmp_path / "metrics"
    (metrics / "_active").mkdir(parents=True)
    out = tmp_path / "out"
    batches = arrivals()
    for k in range(0, len(batches), 2):
        for batch in batches[k : k + 2]:
            by_broker: dict[int, list[dict[str, Any]]] = {}
            for r in batch:
                by_broker.setdefault(r[s.BROKER_ID], []).append(r)
            for broker, rows in by_broker.items():
                lines = "".join(json.dumps(r) + "\n" for r in rows)
                (metrics / f"broker-{broker}-{rows[0][s.TS_MS]}.jsonl").write_text(lines)
        spark_app.run_dashboard(
            metrics, out, follow=True, window_s=2, trigger_s=1, max_batches=1, spark=spark, incremental_from=0
        )
    state = follow.FollowJob(out, LagJobConfig(window_ms=2000), 6000).state
    assert state is not None and state.batch_id >= 4 and state.settled_ms > T0 + 20_000
    batch = spark_app.run_dashboard(metrics, tmp_path / "batch", window_s=2, spark=spark)
    assert batch.records == len(all_rows())
    assert_same_tables(out, tmp_path / "batch")
    # Each round builds its page from its tables, as the batch job does: over the follow's folders of
    # settled, recent and folded parts, hidden files left aside, it is the batch job's page.
    config = LagJobConfig(window_ms=2000)
    written = follow.FollowJob(out, config, 6000)._as_written()
    (out / s.TABLE_FOLLOWER_LAG / ".tmp-left-by-a-crash.parquet").write_bytes(b"half a file")

    def page(where: Path) -> Any:
        paths = {name: str(where / name) for name in s.TABLES}
        return dashboard_data.collect_dashboard_data(
            "t", paths, config.window_ms, written.runs, health_bucket_ms=config.health_bucket_ms
        )

    by_follow = page(out)
    assert by_follow.summary and by_follow.lag and by_follow.health is not None
    assert by_follow == page(tmp_path / "batch")
