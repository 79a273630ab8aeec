"""The lag job end to end: a metrics dir written the way brokers write it, to tables and a page."""

from __future__ import annotations

import dataclasses
import json
import re
import shutil
import struct
import subprocess
import sys
import time
import zlib
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from pyspark.sql import SparkSession

from lagapp import dashboard, dashboard_data, spark_app
from lagapp import schema as s
from lagapp.tables import LagJobConfig
from tests.integration.processes import ROOT
from tests.integration.test_cli import clean_env
from tests.lagapp.browser import CHROMIUM, chart_lines, is_flat, rendered_dom, run_chromium

pytestmark = pytest.mark.slow

T0 = 1_700_000_000_000
SAMPLES = 40
KILLED = range(20, 30)  # broker 1 is down for these samples and restarts before sample 30
STALL_FROM = 25  # broker 3 stops fetching partition 1 here


def _partition_record(
    i: int,
    broker: int,
    partition: int,
    *,
    role: str,
    leader: int,
    epoch: int,
    start_ms: int,
    leo: int,
    fetch: int | None = None,
    lag: int | None = None,
    in_sync: dict[int, bool] | None = None,
    role_since_ms: int = 0,
) -> dict[str, Any]:
    ts = T0 + i * 1000
    since_start = (ts - max(start_ms, role_since_ms)) // 1000  # counters grow only while in the role
    record: dict[str, Any] = {
        "kind": "partition",
        "ts_ms": ts,
        "broker_id": broker,
        "broker_start_ms": start_ms,
        "topic": "orders",
        "partition": partition,
        "role": role,
        "leader_id": leader,
        "leader_epoch": epoch,
        "log_start_offset": 0,
        "log_end_offset": leo,
        "high_watermark": leo,
        "fetch_offset": fetch,
        "lag_messages": lag,
        "lag_ms": None if lag is None else lag * 20,
        "isr_size": None,
        "replica_count": None,
        "under_replicated": None,
        "under_min_isr": None,
        "followers": None,
        "BytesInPerSec": 0,
        "BytesOutPerSec": 0,
        "ReplicationBytesInPerSec": 0,
        "ReplicationBytesOutPerSec": 0,
        "MessagesInPerSec": 0,
        "IsrShrinksPerSec": 0,
        "IsrExpandsPerSec": 0,
    }
    if role == "leader":
        isr = 1 + sum((in_sync or {}).values())
        record.update(
            isr_size=isr,
            replica_count=3,
            under_replicated=isr < 3,
            under_min_isr=isr < 2,
            BytesInPerSec=since_start * 10_000,
            BytesOutPerSec=since_start * 8000,
            ReplicationBytesOutPerSec=since_start * 20_000,
            MessagesInPerSec=since_start * 10,
            # the leader's view: an out-of-sync follower (only while broker 1 is down, from sample 20 on, or
            # broker 3 stalled) falls 10 messages and 1 s further behind per sample
            followers=[
                {
                    "broker_id": b,
                    "log_end_offset": leo,
                    "last_caught_up_ms": ts,
                    "in_sync": ok,
                    "lag_messages": 0 if ok else 10 * (i - 19),
                    "time_since_caught_up_ms": 0 if ok else 1000 * (i - 19),
                }
                for b, ok in (in_sync or {}).items()
            ],
        )
    else:
        record.update(ReplicationBytesInPerSec=since_start * 10_000)
    return record


LOOP_STALL = 12
QUORUM_ELECTION = 20  # the sample at which no broker sees a controller quorum leader


def cluster_records() -> dict[int, list[dict[str, Any]]]:
    """A 3-broker run of 40 s: broker 1 (leader of orders-0) is killed at 20 s and back at 30 s.

    orders-0: leader 1 (epoch 0) until the kill, then leader 2 (epoch 1); broker 3 truncates right
    after the epoch change; broker 1 returns as a follower and catches up.
    orders-1: leader 2 throughout; broker 3 stalls (fetch offset stuck) from 25 s on.
    """
    out: dict[int, list[dict[str, Any]]] = {1: [], 2: [], 3: []}
    restart_ms = T0 + 29_500
    for i in range(SAMPLES):
        ts = T0 + i * 1000
        leo = 100 + 10 * i
        start1 = T0 - 5000 if i < KILLED.start else restart_ms
        alive1 = i not in KILLED
        # orders-0
        if i < KILLED.start:
            out[1].append(
                _partition_record(
                    i,
                    1,
                    0,
                    role="leader",
                    leader=1,
                    epoch=0,
                    start_ms=start1,
                    leo=leo,
                    in_sync={2: True, 3: True},
                )
            )
        epoch0, leader0 = (0, 1) if i <= KILLED.start else (1, 2)
        if i <= KILLED.start:
            out[2].append(
                _partition_record(
                    i, 2, 0, role="follower", leader=1, epoch=0, start_ms=T0 - 5000, leo=leo, fetch=leo, lag=0
                )
            )
        else:
            out[2].append(
                _partition_record(
                    i,
                    2,
                    0,
                    role="leader",
                    leader=2,
                    epoch=1,
                    start_ms=T0 - 5000,
                    leo=leo,
                    in_sync={1: i >= 35, 3: True},
                    role_since_ms=T0 + 20_500,
                )
            )
        fetch3 = leo - 20 if i == KILLED.start + 2 else leo
        out[3].append(
            _partition_record(
                i,
                3,
                0,
                role="follower",
                leader=leader0,
                epoch=epoch0,
                start_ms=T0 - 5000,
                leo=fetch3,
                fetch=fetch3,
                lag=0,
            )
        )
        if i >= KILLED.stop:
            lag = max(0, 50 - 10 * (i - KILLED.stop))
            out[1].append(
                _partition_record(
                    i,
                    1,
                    0,
                    role="follower",
                    leader=2,
                    epoch=1,
                    start_ms=start1,
                    leo=leo - lag,
                    fetch=leo - lag,
                    lag=lag,
                )
            )
        # orders-1
        out[2].append(
            _partition_record(
                i,
                2,
                1,
                role="leader",
                leader=2,
                epoch=0,
                start_ms=T0 - 5000,
                leo=leo,
                in_sync={1: alive1, 3: i < STALL_FROM + 10},
            )
        )
        if alive1:
            out[1].append(
                _partition_record(
                    i, 1, 1, role="follower", leader=2, epoch=0, start_ms=start1, leo=leo, fetch=leo, lag=0
                )
            )
        stuck = min(leo, 100 + 10 * STALL_FROM)
        out[3].append(
            _partition_record(
                i,
                3,
                1,
                role="follower",
                leader=2,
                epoch=0,
                start_ms=T0 - 5000,
                leo=stuck,
                fetch=stuck,
                lag=leo - stuck,
            )
        )
        for broker in (1, 2, 3):
            if broker == 1 and not alive1:
                continue
            out[broker].append(
                {
                    "kind": "broker",
                    "ts_ms": ts,
                    "broker_id": broker,
                    "broker_start_ms": start1 if broker == 1 else T0 - 5000,
                    "FetchPurgatorySize": 2,
                    "ProducePurgatorySize": 0,
                    "ActiveConnections": 3,
                    "RequestsPerSec": i * 40,
                    "UnderReplicatedPartitions": 0,
                    "MaxLag": 0,
                    "MetricsDropped": 0,
                    # broker 3's loop is held 1.8 s once, at sample LOOP_STALL
                    "LoopLagMaxMs": 1800.0 if (broker, i) == (3, LOOP_STALL) else 2.5,
                    "LoopLagAvgMs": 0.4,
                    **_metadata_quorum(i, broker),
                }
            )
    return out


def _metadata_quorum(i: int, broker: int) -> dict[str, int]:
    """A broker's view of the controller quorum at sample ``i``: controller 3000 leads in epoch 1, none
    leads at QUORUM_ELECTION (epoch 2), then 3001 in epoch 3; broker 3 is 25 records (800 ms) behind right
    after, and broker 1, back from its restart, 60 records (400 ms) at its first sample."""
    leader, epoch = (3000, 1) if i < QUORUM_ELECTION else (-1, 2) if i == QUORUM_ELECTION else (3001, 3)
    behind = {(3, QUORUM_ELECTION + 1): (25, 800), (1, KILLED.stop): (60, 400)}.get((broker, i), (0, 0))
    return {
        "MetadataLeaderId": leader,
        "MetadataLeaderEpoch": epoch,
        "MetadataOffset": 500 + i,
        "MetadataLagRecords": behind[0],
        "MetadataLagMs": behind[1],
    }


def write_metrics_dir(root: Path) -> tuple[int, int]:
    """Rolled files every 10 s per broker, the last 10 s in _active/, and a line cut by a crash.

    Returns (records in rolled files, records in active files), the cut line not counted.
    """
    (root / "_active").mkdir(parents=True)
    rolled = active = 0
    for broker, records in cluster_records().items():
        chunks: dict[int, list[dict[str, Any]]] = {}
        for r in records:
            chunks.setdefault((r["ts_ms"] - T0) // 10_000, []).append(r)
        last = max(chunks)
        for n, chunk in sorted(chunks.items()):
            lines = "".join(json.dumps(r) + "\n" for r in chunk)
            if n == last:
                (root / "_active" / f"broker-{broker}.jsonl").write_text(lines + '{"kind": "partition", "ts_ms": 17')
                active += len(chunk)
            else:
                (root / f"broker-{broker}-{chunk[0]['ts_ms']}.jsonl").write_text(lines)
                rolled += len(chunk)
    return rolled, active


@pytest.fixture(scope="module")
def batch_run(spark: SparkSession, tmp_path_factory: pytest.TempPathFactory) -> tuple[spark_app.DashboardResult, int]:
    root = tmp_path_factory.mktemp("lag")
    rolled, active = write_metrics_dir(root / "metrics")
    result = spark_app.run_dashboard(root / "metrics", root / "out", window_s=10, spark=spark)
    return result, rolled + active


@pytest.mark.timeout(300)
def test_the_batch_job_reads_rolled_and_active_files_and_skips_the_cut_line(
    batch_run: tuple[spark_app.DashboardResult, int],
) -> None:
    result, written = batch_run
    assert result.records == written
    assert result.files == 11  # per broker 3 rolled files and 1 active one, minus the 10 s broker 1 was down


@pytest.mark.timeout(300)
def test_every_table_is_written_as_parquet_with_the_expected_rows(
    spark: SparkSession,
    batch_run: tuple[spark_app.DashboardResult, int],
) -> None:
    result, _ = batch_run
    assert sorted(result.tables) == sorted(s.TABLES)
    for name, path in result.tables.items():
        assert any(Path(path).glob("*.parquet")), name
    # orders-0: broker 2 until promoted (21), broker 3 (40), broker 1 after its restart (10);
    # orders-1: broker 1 while alive (30), broker 3 (40)
    assert result.row_counts[s.TABLE_FOLLOWER_LAG] == 21 + 40 + 10 + 30 + 40
    timeline = spark.read.parquet(result.tables[s.TABLE_LEADER_TIMELINE])
    rows = timeline.where("partition = 0").orderBy("first_seen_ms").select("leader_epoch", "leader_id").collect()
    assert [tuple(r) for r in rows] == [(0, 1), (1, 2)]
    status = spark.read.parquet(result.tables[s.TABLE_FOLLOWER_STATUS])
    assert sorted(tuple(r) for r in status.select("partition", "follower_id", "status").collect()) == [
        (0, 1, "OK"),
        (0, 3, "OK"),
        (1, 1, "OK"),
        (1, 3, "STALL"),
    ]
    assert result.status_counts == {"OK": 3, "STALL": 1}
    truncations = status.where("partition = 0 AND follower_id = 3").select("truncations").first()
    assert truncations is not None and truncations[0] == 0  # the truncation at 22 s is outside the last window
    rates = spark.read.parquet(result.tables[s.TABLE_BYTE_RATES])
    assert rates.where("client_in_bytes_per_s < 0 OR replication_in_bytes_per_s < 0").count() == 0
    leader_rate = rates.where("broker_id = 2 AND partition = 1").agg({"client_in_bytes_per_s": "max"}).first()
    assert leader_rate is not None and leader_rate[0] == pytest.approx(10_000.0)
    health = spark.read.parquet(result.tables[s.TABLE_BROKER_HEALTH])
    broker_records = sum(1 for records in cluster_records().values() for r in records if r["kind"] == "broker")
    assert health.count() == broker_records
    stalls = health.where("loop_lag_max_ms > 1000").select("broker_id", "ts_ms", "loop_lag_max_ms").collect()
    assert [tuple(r) for r in stalls] == [(3, T0 + LOOP_STALL * 1000, 1800.0)]


@pytest.mark.timeout(300)
def test_the_page_is_one_self_contained_file_with_the_summary_first_and_the_figures(
    batch_run: tuple[spark_app.DashboardResult, int],
) -> None:
    result, _ = batch_run
    page = Path(result.dashboard_html).read_text(encoding="utf-8")
    assert page.count("plotly.js v") == 1  # the bundle's banner: inlined once, not per figure
    assert page.count("Plotly.newPlot(") == 4  # health, lag for orders-0 and orders-1, byte rates
    assert "<script src=" not in page and "<link " not in page  # nothing fetched from the network
    assert (
        page.index("<h2>Cluster health</h2>")
        < page.index("<h2>Partitions</h2>")
        < page.index("<h2>Follower lag</h2>")
        < page.index("<h2>Byte rates per broker</h2>")
        < page.index("<h2>Follower status</h2>")
    )
    # leader changes and broker events, abbreviated so that close ones fit
    assert "e1 L2" in page and "b1 up" in page and "b1 down" in page
    # the metadata quorum as the brokers saw it: its leaders, the election between them, a broker behind
    for text in ("epoch 1: leader 3000", "epoch 3: leader 3001", "no active controller (epoch 2)"):
        assert text in page, text
    assert "broker 3: 25 records, 800 ms behind" in page


@pytest.mark.timeout(300)
def test_the_headline_cards_give_the_worst_values_and_the_catch_up_of_the_restart(
    batch_run: tuple[spark_app.DashboardResult, int],
) -> None:
    result, _ = batch_run
    page = Path(result.dashboard_html).read_text(encoding="utf-8")
    cards = page[page.index('<div class="cards">') : page.index("<section>")]
    texts = [re.sub(r"<[^>]+>", "|", c).strip("|").replace("||", "|") for c in cards.split('<div class="card">')[1:]]
    # the leader's view of broker 1 on orders-1 is 200 messages and 20 s behind at 39 s, more than any own view
    assert "200|worst lag (messages)|orders-1" in texts
    assert "20.0 s|worst time behind|orders-1" in texts
    # orders-0 ran on ISR 2 of 3 from its new leader's first sample at 21 s to 35 s; orders-1 from 20 s to 30 s
    # and from 35 s (the last sample, at 39 s, stands for 0 ms); neither went under min ISR (2)
    assert any(t.startswith("14.0 s|longest under-replicated|orders-") for t in texts), texts
    assert "0 ms|longest under min ISR" in texts
    # broker 1 went down after 19 s, restarted at 29.5 s; back in the ISR of orders-1 at 30 s, orders-0 at 35 s
    catch_up = [t for t in texts if "broker 1 catch-up" in t]
    assert catch_up and catch_up[0].startswith("5.5 s|"), texts
    assert "down at 22:13:39, 10.5 s; out of 2 ISRs" in catch_up[0]
    assert "metric records" not in cards and "records" not in texts[0]  # the count moved to the header


def _png_distinct_pixels(png: bytes) -> int:
    """Distinct RGB(A) pixel values of an 8-bit, non-interlaced PNG (what Chromium writes)."""
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat, width, height, channels = 8, b"", 0, 0, 0
    while pos < len(png):
        (length,) = struct.unpack(">I", png[pos : pos + 4])
        kind, body = png[pos + 4 : pos + 8], png[pos + 8 : pos + 8 + length]
        if kind == b"IHDR":
            width, height, depth, colour = struct.unpack(">IIBB", body[:10])
            assert depth == 8 and colour in (2, 6)
            channels = 3 if colour == 2 else 4
        elif kind == b"IDAT":
            idat += body
        pos += 12 + length
    raw, stride = zlib.decompress(idat), width * channels
    prev, seen = bytearray(stride), set()
    for y in range(height):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1 : (y + 1) * (stride + 1)])
        for x in range(stride):
            a = line[x - channels] if x >= channels else 0
            b, c = prev[x], prev[x - channels] if x >= channels else 0
            if f == 1:
                line[x] = (line[x] + a) & 255
            elif f == 2:
                line[x] = (line[x] + b) & 255
            elif f == 3:
                line[x] = (line[x] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[x] = (line[x] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        if y % 4 == 0:
            seen.update(bytes(line[i : i + 3]) for i in range(0, stride, channels * 2))
        prev = line
    return len(seen)


@pytest.mark.timeout(300)
@pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is not installed (scripts/test.sh installs it)")
def test_the_page_renders_in_a_headless_browser_without_network(
    batch_run: tuple[spark_app.DashboardResult, int],
    tmp_path: Path,
) -> None:
    result, _ = batch_run
    shot = tmp_path / "dashboard.png"
    run_chromium(Path(result.dashboard_html), tmp_path / "profile", f"--screenshot={shot}")
    keep = Path(result.out_dir) / "dashboard.png"
    shutil.copy(shot, keep)  # left next to the page for a person to look at
    # a blank or error page has a handful of colours; text, badges and plotted lines give hundreds
    assert _png_distinct_pixels(shot.read_bytes()) > 200


@pytest.mark.timeout(300)
@pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is not installed (scripts/test.sh installs it)")
def test_the_browser_draws_lag_that_moves_in_every_lag_chart_and_the_health_row(
    batch_run: tuple[spark_app.DashboardResult, int],
    tmp_path: Path,
) -> None:
    result, _ = batch_run
    dom = rendered_dom(Path(result.dashboard_html), tmp_path / "profile")
    lag = chart_lines(dom, "lag-chart")
    assert sorted(lag) == ["orders-0", "orders-1"]
    for partition, lines in lag.items():
        # per follower: the leader's view and its own, each in messages and in ms
        assert len(lines) >= 4, (partition, len(lines))
        assert any(not is_flat(line) for line in lines), f"every line of {partition} is flat"
    health = chart_lines(dom, "health-chart")
    assert any(not is_flat(line) for lines in health.values() for line in lines), "the health row is flat"
    # the event-loop lag chart is drawn, broker 3's 1.8 s stall on it
    assert re.search(r'class="annotation-text"[^>]*>event-loop lag, max \(ms\)<', dom), "no event-loop lag chart"


@pytest.mark.timeout(300)
def test_follow_mode_streams_the_rolled_files_only_and_refreshes_the_page(
    spark: SparkSession,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rolled, _ = write_metrics_dir(tmp_path / "metrics")
    pages: list[str] = []
    real_write_page = spark_app.write_page

    def write_page(out_dir: Path, data: dashboard.DashboardData) -> Path:
        page = real_write_page(out_dir, data)
        pages.append(page.read_text())
        return page

    monkeypatch.setattr(spark_app, "write_page", write_page)
    result = spark_app.run_dashboard(
        tmp_path / "metrics", tmp_path / "out", follow=True, trigger_s=1, max_batches=1, spark=spark
    )
    assert result.batches == 1
    assert result.records == rolled
    assert Path(result.dashboard_html).exists()
    assert result.row_counts[s.TABLE_LEADER_TIMELINE] == 3  # orders-0 epochs 0 and 1, orders-1 epoch 0
    # while following, the page reloads itself every trigger interval; once following stops it is written
    # again, the same page without the reload
    refresh = '<meta http-equiv="refresh" content="1">'
    assert len(pages) == 2 and refresh in pages[0]
    assert Path(result.dashboard_html).read_text() == pages[1]
    uuid = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")  # plotly's div ids
    assert uuid.sub("id", pages[1]) == uuid.sub("id", pages[0].replace(refresh, ""))


def roll_active_files(metrics_dir: Path) -> None:
    """What the emitters do meanwhile: roll their active files (the line cut by a crash stays behind)."""
    for path in (metrics_dir / "_active").iterdir():
        complete = path.read_text().rsplit("\n", 1)[0] + "\n"
        first_ts = json.loads(complete.splitlines()[0])["ts_ms"]
        (metrics_dir / f"{path.stem}-{first_ts}.jsonl").write_text(complete)
        path.unlink()


@pytest.mark.timeout(300)
def test_a_follow_restart_after_max_batches_adds_the_new_rolled_files_and_nothing_twice(
    spark: SparkSession, tmp_path: Path
) -> None:
    rolled, active = write_metrics_dir(tmp_path / "metrics")
    out = tmp_path / "out"
    first = spark_app.run_dashboard(tmp_path / "metrics", out, follow=True, trigger_s=1, max_batches=1, spark=spark)
    assert first.records == rolled
    roll_active_files(tmp_path / "metrics")

    again = spark_app.run_dashboard(tmp_path / "metrics", out, follow=True, trigger_s=1, max_batches=1, spark=spark)
    assert again.records == rolled + active


@pytest.mark.timeout(300)
def test_follow_folds_its_batch_folders_into_one_and_keeps_every_record_once(
    spark: SparkSession, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(spark_app, "COMPACT_AFTER_BATCHES", 2)
    rolled, active = write_metrics_dir(tmp_path / "metrics")
    out = tmp_path / "out"
    records = out / s.STREAM_DIR / "records"
    first = spark_app.run_dashboard(tmp_path / "metrics", out, follow=True, trigger_s=1, max_batches=1, spark=spark)
    assert first.records == rolled
    assert [p.name for p in spark_app.accumulated_parts(records)] == [p.name for p in records.iterdir()]
    [first_batch] = spark_app.accumulated_parts(records)
    roll_active_files(tmp_path / "metrics")

    again = spark_app.run_dashboard(tmp_path / "metrics", out, follow=True, trigger_s=1, max_batches=1, spark=spark)
    assert again.records == rolled + active
    # the second batch made two folders: they were folded into one, and the two batch folders are gone
    [folded] = list(records.iterdir())
    assert folded.name.startswith(f"{spark_app.FOLDED_PREFIX}0-") and folded.name.endswith("-1")
    assert not first_batch.exists()
    assert spark_app.accumulated_parts(records) == [folded]
    stored = spark.read.parquet(str(folded))
    assert stored.count() == stored.dropDuplicates(list(s.DEDUP_KEY)).count() == rolled + active


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_a_follow_that_reaches_max_batches_while_files_keep_arriving_stops_cleanly(tmp_path: Path) -> None:
    """Under a steady arrival of files a batch may be starting when --max-batches is reached: the follow
    still stops, exits 0 and prints no JVM exception. A query stopped inside a batch made Spark print a
    StackOverflowError and 1,024 frames; each round now ends by itself (``availableNow``)."""
    metrics = tmp_path / "metrics"
    write_metrics_dir(metrics)
    rolled = sorted(metrics.glob("broker-*.jsonl"))
    command = [sys.executable, "-m", "cluster", "dashboard", "--metrics", str(metrics), "--out", str(tmp_path / "out")]
    err_path = tmp_path / "stderr.txt"
    with err_path.open("w") as err:  # a file, not a pipe: nothing reads a pipe while the files are fed
        follow = subprocess.Popen(
            [*command, "--follow", "--trigger-s", "1", "--max-batches", "2"],
            cwd=ROOT,
            env=clean_env(MINIBROKER_QUIET="1"),
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
    try:
        # a new rolled file every second (the same records 1000 s later each time) until it stops
        shift = 0
        while follow.poll() is None:
            shift += 1_000_000
            source = rolled[shift // 1_000_000 % len(rolled)]
            lines = [json.loads(line) for line in source.read_text().splitlines()]
            for record in lines:
                record["ts_ms"] += shift
            broker = source.stem.split("-")[1]
            (metrics / f"broker-{broker}-{lines[0]['ts_ms']}.jsonl").write_text(
                "".join(json.dumps(r) + "\n" for r in lines)
            )
            time.sleep(1.0)  # the arrival rate of the files, not a wait for a condition
    finally:
        follow.kill()
    stderr = err_path.read_text()
    assert follow.returncode == 0, stderr[-2000:]
    assert shift >= 3_000_000, "files kept arriving while it ran"
    assert "StackOverflowError" not in stderr and "Exception in thread" not in stderr, stderr[-2000:]


def test_the_accumulated_records_are_read_once_from_the_widest_folders(tmp_path: Path) -> None:
    # A fold cut short between its rename and its deletes leaves folders it already holds (batch-3,
    # span-6-7-1, and the older upto-1 an earlier version's compaction replaced): none is read again, and
    # half-built folders never are.
    names = ("upto-1", "batch-3", "upto-5", "span-6-7-1", "batch-6", "span-6-9-2", "batch-12", "_building-span-12")
    for name in names:
        (tmp_path / name).mkdir()
    assert [p.name for p in spark_app.accumulated_parts(tmp_path)] == ["upto-5", "span-6-9-2", "batch-12"]
    assert spark_app.folded_upto(tmp_path) == 9
    assert spark_app.accumulated_parts(tmp_path / "none") == []


@pytest.mark.timeout(300)
def test_stored_batches_fold_level_by_level_and_every_record_stays_once(spark: SparkSession, tmp_path: Path) -> None:
    # given 11 micro-batches of 3 records each, stored and compacted (three at a time) after each one
    written = []
    for batch_id in range(11):
        rows = [(batch_id, batch_id * 10 + k) for k in range(3)]
        spark_app.write_batch(spark.createDataFrame(rows, "batch long, ts_ms long"), tmp_path, batch_id)
        written += spark_app.compact(spark, tmp_path, fan_in=3)

    # then 11 = 1·9 + 0·3 + 2·1: one fold of two levels, then the last two batches as they came
    assert [p.name for p in spark_app.accumulated_parts(tmp_path)] == ["span-0-8-2", "batch-9", "batch-10"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["batch-10", "batch-9", "span-0-8-2"]
    assert [p.name for p in written] == ["span-0-2-1", "span-3-5-1", "span-6-8-1", "span-0-8-2"]
    stored = spark.read.parquet(*(str(p) for p in spark_app.accumulated_parts(tmp_path)))
    assert sorted(r.ts_ms for r in stored.collect()) == sorted(b * 10 + k for b in range(11) for k in range(3))
    # a rerun of a batch already folded in is not stored again
    assert spark_app.folded_upto(tmp_path) == 8


@pytest.mark.timeout(300)
def test_a_follow_restart_that_reruns_a_batch_stores_its_records_once(spark: SparkSession, tmp_path: Path) -> None:
    """The sink ran but the batch's commit never reached the checkpoint (stopped, or killed, in between):
    the restarted query reruns that batch, and the records it holds are still there once."""
    rolled, _ = write_metrics_dir(tmp_path / "metrics")
    out = tmp_path / "out"
    first = spark_app.run_dashboard(tmp_path / "metrics", out, follow=True, trigger_s=1, max_batches=1, spark=spark)
    assert first.records == rolled
    # As if the query died between the sink and the commit of the batch that stored the records: no
    # commit for it, and nothing planned after it (such as the no-data batch that moves the watermark).
    [stored_batch] = (out / s.STREAM_DIR / "records").glob(f"{spark_app.BATCH_PREFIX}*")
    batch_id = int(stored_batch.name.removeprefix(spark_app.BATCH_PREFIX))
    checkpoint = out / s.STREAM_DIR / "checkpoint"
    for log, after in (("commits", batch_id - 1), ("offsets", batch_id)):
        for entry in (checkpoint / log).iterdir():
            number = entry.name.lstrip(".").removesuffix(".crc")  # N or .N.crc (Spark's own temp files aside)
            if number.isdigit() and int(number) > after:
                entry.unlink()

    again = spark_app.run_dashboard(tmp_path / "metrics", out, follow=True, trigger_s=1, max_batches=1, spark=spark)
    assert again.records == rolled
    stored = spark.read.parquet(str(out / s.STREAM_DIR / "records" / f"{spark_app.BATCH_PREFIX}*"))
    assert stored.count() == rolled
    assert stored.dropDuplicates(list(s.DEDUP_KEY)).count() == rolled


def test_a_missing_metrics_dir_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code = spark_app.main(["--metrics", str(tmp_path / "nope"), "--out", str(tmp_path / "out")])
    assert code == 1
    assert "does not exist" in capsys.readouterr().err


def test_a_metrics_dir_without_files_is_a_clear_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "metrics" / "_active").mkdir(parents=True)
    code = spark_app.main(["--metrics", str(tmp_path / "metrics"), "--out", str(tmp_path / "out")])
    assert code == 1
    assert "no broker-*.jsonl files" in capsys.readouterr().err


@pytest.mark.timeout(300)
def test_the_command_line_prints_where_it_wrote_and_a_json_summary(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    spark: SparkSession,
) -> None:
    write_metrics_dir(tmp_path / "metrics")
    # the session fixture is already running, so main's getOrCreate reuses it rather than starting one
    code = spark_app.main(["--metrics", str(tmp_path / "metrics"), "--out", str(tmp_path / "out"), "--json"])
    assert code == 0
    captured = capsys.readouterr()
    # progress lines ("[HH:MM:SS] dashboard: ...") come first, then where it wrote
    written = [line for line in captured.err.splitlines() if not line.startswith("[")]
    assert written[0] == f"dashboard: {tmp_path / 'out' / 'dashboard.html'}"
    assert any(line.startswith("[") and "dashboard: building the page" in line for line in captured.err.splitlines())
    summary = json.loads(captured.out)  # stdout is one JSON document and nothing else
    assert summary["status_counts"] == {"OK": 3, "STALL": 1}


def test_a_fault_window_is_shaded_on_the_lag_charts(tmp_path: Path) -> None:
    faults = tmp_path / "faults.jsonl"
    faults.write_text(
        '{"fault": "partition:isolate-leader", "target": 2, "start_ms": 1700000001000, "end_ms": 1700000004000}\n'
        '{"fault": "pau'  # a line cut by a crash is skipped
    )
    [window] = dashboard.fault_events(faults)
    assert (window.kind, window.label, window.end_ts_ms) == ("fault", "partition:isolate-leader (2)", 1700000004000)
    series = [dashboard.FollowerSeries(2, [1700000000000, 1700000005000], [0, 40], [0, 4000], "leader")]
    change = dashboard.TimelineEvent(1700000002000, "epoch 1: leader 2", "leader")
    fig = dashboard._lag_figure(("t", 0), [*series, dataclasses.replace(series[0], view="follower")], [window, change])
    rects = [shape for shape in fig["layout"]["shapes"] if shape["type"] == "rect"]
    assert len(rects) == 2  # one per subplot: lag in messages and in ms
    assert any("isolate-leader" in a["text"] for a in fig["layout"]["annotations"])
    # The figure is written as plotly's JSON: plotly's own figure accepts it and validating it changes nothing.
    with dashboard._no_default_template():
        assert go.Figure(fig).to_plotly_json() == fig


@pytest.mark.timeout(300)
def test_every_series_the_page_draws_is_in_time_order(spark: SparkSession, tmp_path: Path) -> None:
    # The tables' rows come in the order the tasks wrote them (by broker, replica and time), not the charts':
    # every chart, event list and rate line must read left to right.
    write_metrics_dir(tmp_path / "metrics")
    files = spark_app.list_metric_files(tmp_path / "metrics")
    pages: list[dashboard.DashboardData] = []
    spark_app.publish_records(
        spark_app.read_records(spark, files),
        tmp_path / "out",
        LagJobConfig(window_ms=10_000, health_bucket_ms=1000),
        "t",
        on_page=pages.append,
    )
    (data,) = pages

    def increasing(values: list[int]) -> bool:
        return len(values) > 1 and all(a < b for a, b in zip(values, values[1:], strict=False))

    assert sorted(data.lag) == [("orders", 0), ("orders", 1)]
    for key, series in data.lag.items():
        assert [one.view for one in series][:1] == ["leader"], key  # the leader's view first
        for one in series:
            assert increasing(one.ts_ms), (key, one.view, one.follower_id, one.ts_ms)
    assert data.health is not None and increasing(data.health.bucket_start_ms), data.health.bucket_start_ms
    assert data.byte_rates and [b.broker_id for b in data.byte_rates] == sorted(b.broker_id for b in data.byte_rates)
    for rates in data.byte_rates:
        assert increasing(rates.window_start_ms), (rates.broker_id, rates.window_start_ms)
    changes = [e.ts_ms for events in data.events.values() for e in events]
    assert changes, "the new leader of orders-0 is a leader change"
    for key, events in data.events.items():
        assert [e.ts_ms for e in events] == sorted(e.ts_ms for e in events), key


@pytest.mark.timeout(60)
def test_the_series_are_ordered_even_when_the_tables_hold_their_rows_backwards(tmp_path: Path) -> None:
    # One partition whose rows are written newest first, in two files: the page reads them in that order.
    def write(name: str, rows: list[dict[str, Any]]) -> str:
        folder = tmp_path / name
        folder.mkdir()
        table = pa.Table.from_pylist(rows, schema=s.TABLE_SCHEMAS[name])
        half = table.num_rows // 2
        pq.write_table(table.slice(half), folder / "part-00000.parquet")
        pq.write_table(table.slice(0, half), folder / "part-00001.parquet")
        return str(folder)

    newest_first = range(9, -1, -1)
    lag: list[dict[str, Any]] = [
        {"topic": "orders", "partition": 0, "follower_id": 2, "ts_ms": T0 + 1000 * i, "lag_messages": 10 * i}
        for i in newest_first
    ]
    tables = dashboard_data.Tables(
        {
            s.TABLE_FOLLOWER_LAG: write(s.TABLE_FOLLOWER_LAG, [{**r, "lag_ms": 100 * r["lag_messages"]} for r in lag]),
            s.TABLE_REPLICA_LAG: write(
                s.TABLE_REPLICA_LAG, [{**r, "time_since_caught_up_ms": 100 * r["lag_messages"]} for r in lag]
            ),
            s.TABLE_CLUSTER_HEALTH: write(
                s.TABLE_CLUSTER_HEALTH,
                [
                    {"bucket_start_ms": T0 + 1000 * i, "under_replicated_partitions": i % 2, "leaders": [(1, 1)]}
                    for i in newest_first
                ],
            ),
            # newest first too, two brokers; re-bucketed to 2 s below, each bucket's largest wait
            s.TABLE_BROKER_HEALTH: write(
                s.TABLE_BROKER_HEALTH,
                [
                    {"broker_id": b, "ts_ms": T0 + 1000 * i, "loop_lag_max_ms": float(100 * b + i)}
                    for i in newest_first
                    for b in (2, 1)
                ]
                # broker 3 reports the metadata quorum but no loop lag: no loop lag series
                + [{"broker_id": 3, "ts_ms": T0 + 1000 * i, "metadata_leader_id": 3000} for i in newest_first],
            ),
        }
    )
    series = dashboard_data.lag(tables, [("orders", 0)], 1000)
    assert [(one.view, one.ts_ms) for one in series[("orders", 0)]] == [
        ("leader", [T0 + 1000 * i for i in range(10)]),
        ("follower", [T0 + 1000 * i for i in range(10)]),
    ]
    assert series[("orders", 0)][0].lag_messages == [10 * i for i in range(10)]
    health = dashboard_data.health(tables, T0, T0 + 9000, 1000)
    assert health.bucket_start_ms == [T0 + 1000 * i for i in range(10)]
    assert health.under_replicated == [i % 2 for i in range(10)]
    assert health.leaders == {1: [1] * 10}
    loop_lag = dashboard_data.loop_lag(tables, T0, T0 + 9000, 2000)
    assert sorted(loop_lag) == [1, 2]
    assert loop_lag[1] == ([T0 + 2000 * k for k in range(5)], [float(100 + 2 * k + 1) for k in range(5)])
    assert loop_lag[2][1] == [float(200 + 2 * k + 1) for k in range(5)]
