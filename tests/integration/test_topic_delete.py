"""`minibroker topic delete` on a real 3-broker cluster: DELETE_TOPICS through a broker, STOP_REPLICA with
delete to every replica, and re-creation under the same name starting clean, including on a broker that
was down while the topic was deleted (it discards its stale log by topic id when it comes back)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.integration.test_broker_lifecycle import broker
from tests.integration.test_cli import cli, cluster_up, error_line, eventually

pytestmark = [pytest.mark.slow]


def log_dirs(cluster_dir: Path, broker_id: int, topic: str) -> list[Path]:
    return sorted((cluster_dir / f"broker-{broker_id}" / "data").glob(f"{topic}-*"))


def topic_id_of(log_dir: Path) -> str | None:
    try:
        text = (log_dir / "partition.metadata").read_text()
    except OSError:
        return None
    return next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("topic_id")), None)


def cluster_brokers(d: tuple[str, str]) -> set[int]:
    status = cli("cluster", "status", *d, "--json")
    return {b["id"] for b in json.loads(status.stdout)["brokers"] if b["registered"]}  # as the controller lists them


@pytest.mark.timeout(180)
def test_a_deleted_topic_leaves_no_log_and_comes_back_empty_even_on_a_broker_that_was_down(tmp_path: Path) -> None:
    cluster_dir = tmp_path / "c"
    d = cluster_up(
        cluster_dir, 3, "--override", "broker.session.timeout.ms=3000", "--override", "broker.heartbeat.interval.ms=500"
    )
    try:
        assert cli("topic", "create", "orders", "--partitions", "2", "--replication-factor", "3", *d).returncode == 0
        produced = cli("produce", "orders", "--count", "200", "--acks", "all", "--json", *d)
        assert produced.returncode == 0, produced.stderr
        eventually(lambda: all(len(log_dirs(cluster_dir, b, "orders")) == 2 for b in (1, 2, 3)), what="3 replicas")
        old_ids = {topic_id_of(p) for b in (1, 2, 3) for p in log_dirs(cluster_dir, b, "orders")}
        assert len(old_ids) == 1 and None not in old_ids

        # broker 3 is down while the topic is deleted, so it never hears of it
        assert broker("kill", 3, cluster_dir)["result"] == "killed"
        deleted = cli("topic", "delete", "orders", "--json", *d)
        assert deleted.returncode == 0, deleted.stderr
        assert json.loads(deleted.stdout) == [{"topic": "orders", "error": None, "message": None}]
        eventually(lambda: not log_dirs(cluster_dir, 1, "orders") and not log_dirs(cluster_dir, 2, "orders"))
        assert "orders" not in json.loads(cli("topic", "list", "--json", *d).stdout)
        missing = cli("topic", "delete", "orders", *d)
        assert missing.returncode == 4
        assert error_line(missing) == (
            "minibroker: error: cannot delete orders: UNKNOWN_TOPIC_OR_PARTITION: topic orders does not exist"
        )

        # re-created under the same name once broker 3 is fenced (so on brokers 1 and 2): a new id, empty logs
        eventually(lambda: 3 not in cluster_brokers(d), what="broker 3 fenced")
        assert cli("topic", "create", "orders", "--partitions", "1", "--replication-factor", "2", *d).returncode == 0
        assert log_dirs(cluster_dir, 3, "orders"), "broker 3 still holds the deleted topic's logs while down"
        assert broker("start", 3, cluster_dir)["result"] == "started"
        assert cli("produce", "orders", "--count", "5", "--acks", "all", *d).returncode == 0
        consumed = cli("consume", "orders", "--from-beginning", "--max-messages", "100", "--timeout-ms", "2000", *d)
        assert consumed.returncode == 0, consumed.stderr
        assert len(consumed.stdout.splitlines()) == 5

        # broker 3 got the deletion it missed when it came back: no stale partition anywhere
        def only_new_topic_logs() -> bool:
            dirs = [p for b in (1, 2, 3) for p in log_dirs(cluster_dir, b, "orders")]
            return {p.name for p in dirs} == {"orders-0"} and {topic_id_of(p) for p in dirs}.isdisjoint(old_ids)

        eventually(only_new_topic_logs, what="only the new topic's logs")
    finally:
        cli("cluster", "down", *d, timeout=60)
