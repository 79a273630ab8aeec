"""`minibroker topic alter` and `minibroker configs` on a real 3-broker cluster: partitions added to a live
topic get leaders and take records; a topic config changed at runtime is honoured by the brokers at once
(min.insync.replicas decides the next acks=all produce) and falls back to the default when deleted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from client.cluster_client import ClusterClient
from client.producer import send_batch
from cluster.local_cluster import LocalClusterState
from protocol.messages import DescribeLogDirsRequest, TopicPartition
from tests.integration.processes import wait_until
from tests.integration.test_broker_lifecycle import broker
from tests.integration.test_cli import cli, cluster_up, error_line, eventually

pytestmark = [pytest.mark.slow]

FAST_FENCING = ("--override", "broker.session.timeout.ms=3000", "--override", "broker.heartbeat.interval.ms=500")


@pytest.mark.timeout(120)
def test_partitions_added_to_a_live_topic_get_leaders_and_take_records(tmp_path: Path) -> None:
    d = cluster_up(tmp_path / "c", 3)
    try:
        assert cli("topic", "create", "grow", "--partitions", "1", "--replication-factor", "3", *d).returncode == 0

        altered = cli("topic", "alter", "grow", "--partitions", "3", "--json", *d)

        assert altered.returncode == 0, altered.stderr
        assert json.loads(altered.stdout) == {"topic": "grow", "partitions": 3}
        (topic,) = json.loads(cli("topic", "describe", "grow", "--json", *d).stdout)
        assert (topic["partition_count"], topic["replication_factor"]) == (3, 3)
        assert [p["partition"] for p in topic["partitions"]] == [0, 1, 2]
        # placed round robin on from partition 0's leader, as Kafka does: one leader per broker
        assert sorted(p["leader"] for p in topic["partitions"]) == [1, 2, 3]
        produced = cli("produce", "grow", "--partition", "2", "--acks", "all", "--json", *d, stdin="a\nb\nc\n")
        assert produced.returncode == 0, produced.stderr
        assert json.loads(produced.stdout)["acked"] == 3
        consumed = cli(
            "consume",
            "grow",
            "--partition",
            "2",
            "--from-beginning",
            "--max-messages",
            "3",
            "--timeout-ms",
            "10000",
            *d,
        )
        assert consumed.stdout.splitlines() == ["a", "b", "c"], consumed.stderr

        fewer = cli("topic", "alter", "grow", "--partitions", "2", *d)
        assert fewer.returncode == 4
        assert error_line(fewer) == (
            "minibroker: error: cannot alter grow: INVALID_PARTITIONS: "
            "Topic currently has 3 partitions, which is higher than the requested 2."
        )
        unknown = cli("topic", "alter", "nope", "--partitions", "2", *d)
        assert (unknown.returncode, error_line(unknown)) == (
            4,
            "minibroker: error: cannot alter nope: UNKNOWN_TOPIC_OR_PARTITION: topic nope does not exist",
        )
    finally:
        cli("cluster", "down", *d, timeout=60)


@pytest.mark.timeout(120)
async def test_min_insync_replicas_changed_at_runtime_is_honoured_by_the_brokers_and_reverts_when_deleted(
    tmp_path: Path,
) -> None:
    cluster_dir = tmp_path / "c"
    d = cluster_up(cluster_dir, 3, *FAST_FENCING, "--secret", "s3cret")
    bootstrap = LocalClusterState.load(cluster_dir).bootstrap
    try:
        assert cli("topic", "create", "strict", "--partitions", "1", "--replication-factor", "3", *d).returncode == 0
        typo = cli("configs", "alter", "--topic", "strict", "--add-config", "min.insync.replica=3", *d)
        assert (typo.returncode, error_line(typo)) == (
            2,
            "minibroker: error: unknown topic config 'min.insync.replica'; did you mean min.insync.replicas?",
        )
        # changing configs needs the cluster secret (--dir supplies it); describing them does not
        anonymous = cli(
            "configs", "alter", "--topic", "strict", "--add-config", "x.y=1", "--bootstrap-server", bootstrap
        )
        assert anonymous.returncode == 2  # an unknown key never reaches the cluster
        anonymous = cli(
            "configs",
            "alter",
            "--topic",
            "strict",
            "--add-config",
            "min.insync.replicas=3",
            "--bootstrap-server",
            bootstrap,
        )
        assert anonymous.returncode == 4 and "CLUSTER_AUTHORIZATION_FAILED" in error_line(anonymous)

        altered = cli(
            *("configs", "alter", "--entity-type", "topics", "--entity-name", "strict"),
            *("--add-config", "min.insync.replicas=3", "--json", *d),
        )

        assert altered.returncode == 0, altered.stderr
        assert json.loads(altered.stdout) == {"topic": "strict", "set": {"min.insync.replicas": "3"}, "deleted": []}
        described = cli("configs", "describe", "--topic", "strict", "--json", "--bootstrap-server", bootstrap)
        assert described.returncode == 0, described.stderr
        (topic,) = json.loads(described.stdout)
        configs = {c["name"]: c for c in topic["configs"]}
        assert (configs["min.insync.replicas"]["value"], configs["min.insync.replicas"]["source"]) == (
            "3",
            "DYNAMIC_TOPIC_CONFIG",
        )
        assert configs["min.insync.replicas"]["synonyms"][-1] == {
            "name": "min.insync.replicas",
            "value": "1",
            "source": "DEFAULT_CONFIG",
        }
        assert (configs["retention.ms"]["value"], configs["retention.ms"]["source"]) == ("604800000", "DEFAULT_CONFIG")
        assert cli("topic", "describe", "strict", *d).stdout.splitlines()[0].endswith("Configs: min.insync.replicas=3")

        # a follower dies; once the leader has dropped it from the ISR (2 < 3), acks=all is refused
        tp = TopicPartition("strict", 0)
        async with ClusterClient(bootstrap) as client:
            await client.wait_for_leaders("strict")
            leader = client.leader_of(tp).leader_id
            follower = next(b for b in client.leader_of(tp).replicas if b != leader)
            assert broker("kill", follower, cluster_dir)["result"] == "killed"

            async def isr_shrunk() -> bool:
                dirs = await client.send_to(leader, DescribeLogDirsRequest(["strict"]))
                return len(dirs.replicas[0].isr) == 2

            await wait_until(isr_shrunk, timeout_s=30.0, what="the leader's ISR without the dead follower")
            outcome, _, error = await send_batch(client, tp, [b"refused"], acks=-1, retries=0)
            assert (outcome, error.split(":")[0]) == ("failed", "NOT_ENOUGH_REPLICAS"), error

        # deleting it falls back to the default, 1: acks=all goes through with two replicas in the ISR
        deleted = cli("configs", "alter", "--topic", "strict", "--delete-config", "min.insync.replicas", *d)
        assert deleted.returncode == 0, deleted.stderr
        produced = cli("produce", "strict", "--count", "3", "--acks", "all", "--json", *d)
        assert produced.returncode == 0, produced.stderr
        assert json.loads(produced.stdout)["acked"] == 3
        (after,) = json.loads(cli("configs", "describe", "--topic", "strict", "--json", *d).stdout)
        min_isr = {c["name"]: c for c in after["configs"]}["min.insync.replicas"]
        assert (min_isr["value"], min_isr["source"]) == ("1", "DEFAULT_CONFIG")

        missing = cli("configs", "describe", "--topic", "nope", *d)
        assert (missing.returncode, error_line(missing)) == (
            4,
            "minibroker: error: cannot describe configs of nope: UNKNOWN_TOPIC_OR_PARTITION: topic nope does not exist",
        )
    finally:
        cli("cluster", "down", *d, timeout=60)


@pytest.mark.timeout(120)
def test_broker_configs_describe_shows_each_brokers_runtime_rates_and_where_every_value_comes_from(
    tmp_path: Path,
) -> None:
    d = cluster_up(tmp_path / "c", 2)
    rate = "leader.replication.throttled.rate"
    try:
        for entity, value in ((["--entity-default"], "1000000"), (["--entity-name", "2"], "500000")):
            change = ("--add-config", f"{rate}={value}")
            altered = cli("configs", "alter", "--entity-type", "brokers", *entity, *change, *d)
            assert altered.returncode == 0, altered.stderr

        def describe(*entity: str) -> dict[str, object]:
            result = cli("configs", "describe", "--entity-type", "brokers", *entity, "--json", *d)
            assert result.returncode == 0, result.stderr
            data: dict[str, object] = json.loads(result.stdout)
            return data

        # the brokers learn dynamic configs from the controller's next push
        eventually(lambda: describe("--entity-name", "2")["configs"], 30.0, "broker 2 shows its own rate")
        # without --all: only what was set at runtime on broker 2, with what it overrides
        assert describe("--entity-name", "2") == {
            "broker": "2",
            "configs": [
                {
                    "name": rate,
                    "value": "500000",
                    "source": "DYNAMIC_BROKER_CONFIG",
                    "sensitive": False,
                    "synonyms": [
                        {"name": rate, "value": "500000", "source": "DYNAMIC_BROKER_CONFIG"},
                        {"name": rate, "value": "1000000", "source": "DYNAMIC_DEFAULT_BROKER_CONFIG"},
                        {"name": rate, "value": str(2**63 - 1), "source": "DEFAULT_CONFIG"},
                    ],
                }
            ],
        }
        # --all on broker 1 (asked of broker 1): the default rate in effect, its own static settings, the
        # secret without a value
        everything = describe("--entity-name", "1", "--all")
        configs = {c["name"]: c for c in everything["configs"]}  # type: ignore[attr-defined]
        assert (configs[rate]["value"], configs[rate]["source"]) == ("1000000", "DYNAMIC_DEFAULT_BROKER_CONFIG")
        assert (configs["broker.id"]["value"], configs["broker.id"]["source"]) == ("1", "STATIC_BROKER_CONFIG")
        assert configs["replica.fetch.max.bytes"]["source"] in ("DEFAULT_CONFIG", "STATIC_BROKER_CONFIG")
        assert (configs["cluster.secret"]["value"], configs["cluster.secret"]["sensitive"]) == (None, True)
        assert describe("--entity-default")["configs"] == [
            {
                "name": rate,
                "value": "1000000",
                "source": "DYNAMIC_DEFAULT_BROKER_CONFIG",
                "sensitive": False,
                "synonyms": [{"name": rate, "value": "1000000", "source": "DYNAMIC_DEFAULT_BROKER_CONFIG"}],
            }
        ]
        text = cli("configs", "describe", "--entity-type", "brokers", "--entity-name", "2", *d)
        assert text.stdout.splitlines() == [
            "Dynamic configs for broker 2 are:",
            f"  {rate}=500000 sensitive=false synonyms={{DYNAMIC_BROKER_CONFIG:{rate}=500000, "
            f"DYNAMIC_DEFAULT_BROKER_CONFIG:{rate}=1000000, DEFAULT_CONFIG:{rate}={2**63 - 1}}}",
        ]
        unknown = cli("configs", "describe", "--entity-type", "brokers", "--entity-name", "9", *d)
        assert (unknown.returncode, error_line(unknown)) == (4, "minibroker: error: broker 9 is not in the cluster")
        both = cli("configs", "describe", "--entity-type", "brokers", "--entity-name", "1", "--entity-default", *d)
        assert (both.returncode, error_line(both)) == (
            2,
            "minibroker: error: brokers: give --entity-default or --entity-name BROKER_ID",
        )
    finally:
        cli("cluster", "down", *d, timeout=60)
