"""End to end: a real 3-broker cluster under load loses a leader, its metrics go to files, the Spark job
(run as the real CLI) builds the lag tables, and the tables tell the story of the kill."""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from client.cluster_client import ClusterClient
from client.producer import send_batch
from cluster.chaos import CHAOS_OVERRIDES
from cluster.local_cluster import free_ports, restart_broker, start_cluster, stop_cluster
from protocol.errors import ErrorCode
from protocol.messages import TopicPartition
from protocol.record_batch import build_batch
from tests.integration.processes import ROOT, wait_until
from tests.lagapp.browser import CHROMIUM, chart_lines, is_flat, rendered_dom

pytestmark = [pytest.mark.slow, pytest.mark.timeout(400)]


def table(out: Path, name: str) -> list[dict[str, object]]:
    return pq.read_table(out / name).to_pylist()  # type: ignore[no-any-return]


BATCH = [b"x" * 200] * 20
BATCH_BYTES = len(build_batch(BATCH))


async def run_cluster_with_one_kill(cluster_dir: Path) -> tuple[int, int]:
    """The killed broker, and the bytes of the batches the cluster acknowledged."""
    ports = free_ports(4)
    overrides = {**CHAOS_OVERRIDES, "metrics.interval.ms": "200", "metrics.file.roll.ms": "1000"}
    state = await start_cluster(cluster_dir, 3, controller_port=ports[3], overrides=overrides, broker_ports=ports[:3])
    client = ClusterClient(state.bootstrap)
    stop = asyncio.Event()
    acked = 0
    try:
        resp = await client.create_topic("lag", 3, 3, {"min.insync.replicas": "2"})
        assert resp.topics[0].error_code == ErrorCode.NONE
        await client.wait_for_leaders("lag")

        async def load() -> None:
            nonlocal acked
            i = 0
            while not stop.is_set():
                tp = TopicPartition("lag", i % 3)
                outcome, _, _ = await send_batch(client, tp, BATCH, acks=-1, retries=3, timeout_ms=3000)
                acked += BATCH_BYTES if outcome == "acked" else 0
                i += 1

        task = asyncio.create_task(load())
        await asyncio.sleep(3.0)
        victim = client.leader_of(TopicPartition("lag", 0)).leader_id
        os.kill(state.broker(victim).pid, signal.SIGKILL)

        async def moved() -> bool:
            await client.refresh_metadata(["lag"])
            return client.leader_of(TopicPartition("lag", 0)).leader_id not in (-1, victim)

        await wait_until(moved, what="a new leader for lag-0")
        await asyncio.sleep(3.0)
        await restart_broker(state, victim)

        async def isr_full() -> bool:
            await client.refresh_metadata(["lag"])
            return all(len(client.leader_of(TopicPartition("lag", p)).isr) == 3 for p in range(3))

        await wait_until(isr_full, timeout_s=30, what="full ISRs after the restart")
        await asyncio.sleep(2.0)
        stop.set()
        await task
        # The load has stopped: the followers catch up within a fetch, and the metrics emitter (every
        # 200 ms) needs a few intervals to write a sample that shows it, or the last one read still holds
        # the batch in flight when the brokers are killed.
        await asyncio.sleep(1.0)
        # Stop every broker at the same instant, so none looks stopped (STOP) next to the others: a
        # controlled shutdown of three brokers one after the other spreads their last samples over seconds.
        for b in state.brokers:
            os.kill(b.pid, signal.SIGKILL)
        return victim, acked
    finally:
        stop.set()
        await client.close()
        stop_cluster(state)


def test_a_leader_kill_shows_up_in_the_lag_tables(tmp_path: Path) -> None:
    cluster_dir = tmp_path / "cluster"
    victim, acked_bytes = asyncio.run(run_cluster_with_one_kill(cluster_dir))
    out = tmp_path / "dashboard"
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "cluster",
            "dashboard",
            "--metrics",
            str(cluster_dir / "metrics"),
            "--out",
            str(out),
            "--master",
            "local[2]",
            "--window-s",
            "2",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=ROOT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    summary = json.loads(result.stdout.strip().splitlines()[-1])
    assert summary["records"] > 100
    assert (out / "dashboard.html").stat().st_size > 100_000

    timeline = [r for r in table(out, "leader_timeline") if r["topic"] == "lag" and r["partition"] == 0]
    epochs = sorted({(r["leader_epoch"], r["leader_id"]) for r in timeline if r["leader_id"] != -1})
    assert epochs[0] == (0, victim), epochs
    assert any(epoch > 0 and leader != victim for epoch, leader in epochs), "the election is on the timeline"

    lag = table(out, "follower_lag")
    followers = {(r["partition"], r["follower_id"]) for r in lag if r["topic"] == "lag"}
    assert len(followers) >= 6, "every partition's two followers were sampled"
    assert all(r["lag_messages"] is None or r["lag_messages"] >= 0 for r in lag)

    statuses = {
        (r["partition"], r["follower_id"]): r["status"] for r in table(out, "follower_status") if r["topic"] == "lag"
    }
    assert statuses, "a status per follower"
    assert set(statuses.values()) <= {"OK", "WARN", "STALL", "TRUNCATE"}, statuses  # never REWIND or STOP

    under = {r["partition"]: r for r in table(out, "under_replicated") if r["topic"] == "lag"}
    assert under[0]["under_replicated_ms"] > 0, "lag-0 ran without the killed replica for seconds"

    rates = [r for r in table(out, "byte_rates") if r["topic"] == "lag"]
    assert sum(r["replication_in_bytes"] for r in rates) > 0
    # every byte produced appears, the first samples of each broker included (within 10%: a batch that
    # timed out may still be in the log, and the killed leader's last ~200 ms were never reported)
    client_in = sum(r["client_in_bytes"] for r in rates)
    assert acked_bytes > 100_000
    assert client_in == pytest.approx(acked_bytes, rel=0.10)

    # The leader's view: while the victim was down (3 s and more under load), the leaders of the
    # partitions it followed reported it falling behind, out of the ISR, then caught up and back in.
    seen = [r for r in table(out, "replica_lag") if r["topic"] == "lag" and r["follower_id"] == victim]
    assert seen, "the leaders reported the killed follower"
    peak = max(r["lag_messages"] or 0 for r in seen)
    assert peak >= 100, f"lag peaked at {peak} messages while it was down"
    by_time = sorted(seen, key=lambda r: r["ts_ms"])
    went_out = next(i for i, r in enumerate(by_time) if r["in_sync"] is False)
    came_back = next(i for i, r in enumerate(by_time) if i > went_out and r["in_sync"] is True)
    assert by_time[came_back]["lag_messages"] == 0 or by_time[came_back]["lag_messages"] < peak
    assert by_time[-1]["lag_messages"] == 0, "caught up by the end"
    catch_up_ms = by_time[came_back]["ts_ms"] - by_time[went_out]["ts_ms"]
    assert catch_up_ms > 3000, "out of the ISR for at least the time it was down"
    changes = {
        r["partition"]: r for r in table(out, "isr_changes") if r["topic"] == "lag" and r["follower_id"] == victim
    }
    assert any(r["shrinks"] >= 1 and r["expands"] >= 1 for r in changes.values()), changes

    # and the page's lag charts draw it: the victim's series (the leader's view) climbs above zero
    page = (out / "dashboard.html").read_text()
    traces = chart_values(page, f"follower {victim}")
    in_messages = [v for ys in traces[::2] for v in ys]  # each chart: lag in messages, then in ms
    assert in_messages and max(in_messages) >= 100, f"the chart of follower {victim} is flat: {traces}"

    # the health row: the partitions the victim followed were under-replicated while it was down
    health = table(out, "cluster_health")
    assert max(r["under_replicated_partitions"] for r in health) >= 1
    assert health[-1]["partitions"] == 3 and health[-1]["under_replicated_partitions"] == 0

    # a card gives the victim's catch-up: from its restart until it was back in every ISR it had left
    card = re.search(rf'<div class="v">([^<]+)</div><div class="k">broker {victim} catch-up after restart</div>', page)
    assert card, "a catch-up card for the restarted broker"
    assert re.fullmatch(r"\d+(\.\d)? m?s", card.group(1)), card.group(1)

    # and a browser draws it: the lag charts and the health row are not flat lines
    if CHROMIUM.exists():
        dom = rendered_dom(out / "dashboard.html", tmp_path / "profile")
        lag_charts = chart_lines(dom, "lag-chart")
        assert {f"lag-{p}" for p in range(3)} <= set(lag_charts), sorted(lag_charts)
        moving = [name for name, lines in lag_charts.items() if any(not is_flat(line) for line in lines)]
        assert moving, "every lag chart the browser drew is flat"
        health_lines = [line for lines in chart_lines(dom, "health-chart").values() for line in lines]
        assert any(not is_flat(line) for line in health_lines), "the health row is flat"


def chart_values(page: str, series: str) -> list[list[float]]:
    """The y values plotly was given for each trace named `series` in the page, in page order."""
    traces: list[list[float]] = []
    for match in re.finditer(r'"name":\s*"' + re.escape(series) + r'"', page):
        ys = re.search(r'"y":\s*\[([^\]]*)\]', page[match.end() : match.end() + 200_000])
        if ys:
            traces.append([float(v) for v in ys.group(1).split(",") if v.strip() not in ("", "null")])
    return traces
