"""Chaos load through a real Kafka client: `chaos leader-kill|run --client CLIENT`.

How this works
--------------
The experiment, its faults and its oracle are cluster/chaos.py's; only the load changes. Instead of
minibroker's own producer on the msgpack listener, each producer is a real Kafka client on the brokers'
Kafka listeners (acks=all; idempotent unless `--no-idempotence`), writing the same unique values
(`p<producer>-<seq>`) to the same partitions: librdkafka through confluent-kafka, kafka-python and
aiokafka in this process, KafkaJS in a Node.js process beside it (cluster/chaos_kafkajs.py). Its delivery
reports are the client's claims: a value reported delivered at (partition, offset). The brokers' journals
decide which of them a broker really acknowledged (cluster/chaos_verdict.py): those must be there after
the faults, once; the rest are the client's false claims, reported as such. A value reported failed is
indeterminate (a client that gave up after its delivery timeout cannot say whether the last attempt was
written), so the oracle does not count it either way.

What the client saw goes into the report: the longest time between two delivery reports while the load
ran (how long the application stalled), after each kill the time until the next report, the client's own
counts of retried requests and metadata requests (librdkafka's statistics for confluent-kafka, KafkaJS's
request events and retry log lines), and the errors it surfaced to the application, by name.

A consumer group rides through the same run: `--group-consumers` members (confluent-kafka, subscribe())
read the topic and commit synchronously every few hundred records, while a watcher reads the group's
committed offsets from its coordinator twice a second. The report checks that no partition's
committed offset ever went backwards, across coordinator moves, and, once the load has stopped and the
group has read to the end of every partition, that every acknowledged value was read by the group (at
least once: a member that dies or is rebalanced away may be re-read from its last commit, which the
report counts as `group_reread`).
"""

from __future__ import annotations

import asyncio
import json
import tempfile
import time
from collections import Counter, defaultdict
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cluster.chaos_kafkajs import KafkaJsMissing, KafkaJsProducers, check_kafkajs
from protocol.messages import TopicPartition
from server_common.poll import wait_until
from server_common.time import SYSTEM_TIME

if TYPE_CHECKING:
    from cluster.chaos import ChaosRun

CLIENTS = ("minibroker", "confluent-kafka", "kafka-python", "aiokafka", "kafkajs")
OUTSTANDING = 64  # records a client producer may have unanswered before the load waits for reports
FAILING_PAUSE_S = 0.05  # the load's pause after a partition's sends while its client reports errors
COMMIT_EVERY = 200  # records a group member reads between synchronous commits
DRAIN_TIMEOUT_S = 60.0


class ClientMissing(RuntimeError):
    """The chosen client library is not installed."""


def check_client(name: str) -> None:
    """Raise ClientMissing when `--client name` cannot run here (the library is an optional install)."""
    if name == "minibroker":
        return
    if name == "kafkajs":
        try:
            check_kafkajs()
        except KafkaJsMissing as exc:
            raise ClientMissing(str(exc)) from None
    module = {"confluent-kafka": "confluent_kafka", "kafka-python": "kafka", "aiokafka": "aiokafka"}.get(name)
    try:
        if module is not None:
            __import__(module)
    except ImportError:
        raise ClientMissing(f"--client {name} needs the {name} package: pip install {name}") from None
    if name != "confluent-kafka":
        try:
            __import__("confluent_kafka")
        except ImportError:
            raise ClientMissing("the consumer group rides on confluent-kafka: pip install confluent-kafka") from None


class KafkaClientLoad:
    """The load of one chaos run, through `run.args.client`."""

    def __init__(self, run: ChaosRun) -> None:
        self.run = run
        self.client = run.args.client
        self.bootstrap = run.state.kafka_bootstrap
        if not self.bootstrap:
            raise ClientMissing("the cluster has no Kafka listeners (a cluster started before they existed?)")
        self.delivered_at: list[float] = []
        self.errors: Counter[str] = Counter()
        self.client_stats: dict[str, int] = defaultdict(int)
        self.group_members = getattr(run.args, "group_consumers", 2)
        self.group_read: dict[str, int] = defaultdict(int)  # value -> times the group read it
        self.group_positions: dict[TopicPartition, int] = {}  # next offset the group will read
        self.committed: dict[TopicPartition, int] = {}
        self.commit_regressions: list[dict[str, Any]] = []
        self.group_errors: Counter[str] = Counter()
        self.stop_group = asyncio.Event()
        self.drained = False
        self.idempotent = not getattr(run.args, "no_idempotence", False)
        self.producer_failures: list[str] = []
        self.kafkajs: KafkaJsProducers | None = None
        if self.client == "kafkajs":
            # KafkaJS's own warnings, beside the cluster's logs when there is a cluster dir
            logs = Path(run.state.dir) if run.state.dir else Path(tempfile.gettempdir())
            self.kafkajs = KafkaJsProducers(
                self.bootstrap, run.args.topic, run.args.producers, self.idempotent, logs / "chaos-kafkajs.log"
            )

    # -- producers ------------------------------------------------------------------------------------

    async def producer(self, index: int, partitions: list[TopicPartition]) -> None:
        loop = asyncio.get_running_loop()
        outstanding = 0
        room = asyncio.Event()
        room.set()
        failing = False  # a report since the last pause was an error

        def settle(tp: TopicPartition, key: str, t0: float, offset: int, error: str | None) -> None:
            nonlocal outstanding, failing
            outstanding -= 1
            failing = failing or error is not None
            if outstanding < OUTSTANDING:
                room.set()
            if error is None:
                self.delivered_at.append(time.time())
                self.run.outcomes.acked[key] = (tp, offset)
                self.run.outcomes.ack_latencies_ms.append((time.monotonic() - t0) * 1000.0)
                self.run.outcomes.ack_events.append((time.monotonic(), tp, -1))
            else:
                self.errors[error] += 1
                self.run.outcomes.errors[error] += 1
                self.run.outcomes.indeterminate.add(key)

        def report(tp: TopicPartition, key: str, t0: float) -> Any:
            def delivered(offset: int, error: str | None) -> None:
                loop.call_soon_threadsafe(settle, tp, key, t0, offset, error)

            return delivered

        try:
            send, close = await self._open_producer(index, loop)
        except Exception as exc:  # noqa: BLE001 - a client that cannot start fails the run, said in its report
            self.producer_failures.append(f"producer {index} did not start: {type(exc).__name__}: {exc}")
            return
        order = partitions[index % len(partitions) :] + partitions[: index % len(partitions)]
        seq = 0
        try:
            while not self.run.stop_load.is_set():
                for tp in order:
                    if self.run.stop_load.is_set():
                        break
                    for _ in range(self.run.rng.randint(1, 5)):
                        key = f"p{index}-{seq}"
                        seq += 1
                        outstanding += 1
                        send(tp, key, report(tp, key, time.monotonic()))
                    if outstanding >= OUTSTANDING:
                        room.clear()
                        await room.wait()
                    # A client that fails at once (KafkaJS's idempotent producer after OUT_OF_ORDER_SEQUENCE_NUMBER
                    # fails every later send to that partition) would otherwise spin the load, and the machine.
                    pause, failing = failing, False
                    await asyncio.sleep(FAILING_PAUSE_S if pause else 0)
        finally:
            await close()
            await asyncio.sleep(0)  # let the last reports' callbacks run

    async def _open_producer(self, index: int, loop: asyncio.AbstractEventLoop) -> tuple[Any, Any]:
        """(send(tp, value, on_report), async close()) of one client producer."""
        topic = self.run.args.topic
        if self.kafkajs is not None:
            return await self.kafkajs.open(index)
        if self.client == "aiokafka":
            return await self._open_aiokafka(index, topic, loop)
        if self.client == "confluent-kafka":
            import confluent_kafka

            producer = confluent_kafka.Producer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "client.id": f"chaos-producer-{index}",
                    "acks": "all",
                    "enable.idempotence": self.idempotent,
                    "linger.ms": 5,
                    "statistics.interval.ms": 1000,
                    "stats_cb": lambda raw: loop.call_soon_threadsafe(self._librdkafka_stats, index, raw),
                    "error_cb": lambda err: loop.call_soon_threadsafe(self._client_error, err.name()),
                }
            )
            polling = True

            def send(tp: TopicPartition, value: str, on_report: Any) -> None:
                def delivered(err: Any, msg: Any) -> None:
                    on_report(msg.offset(), None if err is None else err.name())

                while True:
                    try:
                        producer.produce(topic, value=value.encode(), partition=tp.partition, on_delivery=delivered)
                        break
                    except BufferError:
                        producer.poll(0.05)
                producer.poll(0)

            async def close() -> None:
                nonlocal polling
                polling = False
                await asyncio.to_thread(producer.flush, 30)

            async def poller() -> None:
                while polling:
                    producer.poll(0)
                    await asyncio.sleep(0.005)

            self.run.background.append(loop.create_task(poller()))
            return send, close
        from kafka import KafkaProducer

        kp = KafkaProducer(**self._producer_config(index))

        def send_kp(tp: TopicPartition, value: str, on_report: Any) -> None:
            future = kp.send(topic, value=value.encode(), partition=tp.partition)
            future.add_callback(lambda meta: on_report(meta.offset, None))
            future.add_errback(lambda exc: on_report(-1, type(exc).__name__))

        def close_kp() -> None:
            kp.flush(30)
            metrics = kp.metrics()
            for group in metrics.values():
                for name in ("record-retry-total", "record-error-total"):
                    if name in group:
                        self.client_stats[name.replace("-", "_")] += int(group[name])
            kp.close(5)

        async def close_kp_async() -> None:
            await asyncio.to_thread(close_kp)

        return send_kp, close_kp_async

    def _producer_config(self, index: int) -> dict[str, Any]:
        """kafka-python's and aiokafka's producer settings (the same names in both)."""
        return {
            "bootstrap_servers": self.bootstrap,
            "client_id": f"chaos-producer-{index}",
            "acks": "all",
            "enable_idempotence": self.idempotent,
            "linger_ms": 5,
        }

    async def _open_aiokafka(self, index: int, topic: str, loop: asyncio.AbstractEventLoop) -> tuple[Any, Any]:
        """aiokafka runs on this event loop: each record is a task that awaits its delivery (tasks this load
        owns, awaited by close)."""
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(**self._producer_config(index), request_timeout_ms=30000)
        await producer.start()
        sending: set[asyncio.Task[None]] = set()

        async def deliver(tp: TopicPartition, value: str, on_report: Any) -> None:
            try:
                delivery = await producer.send(topic, value.encode(), partition=tp.partition)
                metadata = await delivery
            except Exception as exc:  # noqa: BLE001 - whatever the client surfaces is the record's outcome
                on_report(-1, type(exc).__name__)
                return
            on_report(metadata.offset, None)

        def send(tp: TopicPartition, value: str, on_report: Any) -> None:
            task = loop.create_task(deliver(tp, value, on_report))
            sending.add(task)
            task.add_done_callback(sending.discard)

        async def close() -> None:
            await asyncio.gather(*sending, return_exceptions=True)
            await producer.stop()

        return send, close

    def _librdkafka_stats(self, index: int, raw: str) -> None:
        """librdkafka's statistics are totals since the client started: keep each producer's latest."""
        stats = json.loads(raw)
        retries = sum(b.get("txretries", 0) for b in stats.get("brokers", {}).values())
        metadata = sum(
            b.get("req", {}).get("Metadata", 0) for b in stats.get("brokers", {}).values() if isinstance(b, dict)
        )
        self.client_stats[f"retries_{index}"] = retries
        self.client_stats[f"metadata_requests_{index}"] = metadata

    def _client_error(self, name: str) -> None:
        self.errors[f"client:{name}"] += 1

    # -- the consumer group ---------------------------------------------------------------------------

    async def group(self, partitions: list[TopicPartition]) -> None:
        """`group_members` confluent-kafka consumers in one group, polled in turn until `stop_group`."""
        import confluent_kafka

        members = [
            confluent_kafka.Consumer(
                {
                    "bootstrap.servers": self.bootstrap,
                    "group.id": f"chaos-{self.run.args.seed}",
                    "client.id": f"chaos-member-{i}",
                    "enable.auto.commit": False,
                    "auto.offset.reset": "earliest",
                    "session.timeout.ms": 6000,
                    "heartbeat.interval.ms": 500,
                }
            )
            for i in range(self.group_members)
        ]
        for member in members:
            member.subscribe([self.run.args.topic])
        since_commit = [0] * len(members)
        watcher = asyncio.create_task(self.watch_committed(partitions))
        try:
            while not self.stop_group.is_set():
                for i, member in enumerate(members):
                    message: Any = await asyncio.to_thread(member.poll, 0.05)
                    if message is None:
                        continue
                    if message.error() is not None:
                        self.group_errors[message.error().name()] += 1
                        continue
                    tp = TopicPartition(message.topic(), message.partition())
                    self.group_read[message.value().decode()] += 1
                    self.group_positions[tp] = max(self.group_positions.get(tp, 0), message.offset() + 1)
                    since_commit[i] += 1
                    if since_commit[i] >= COMMIT_EVERY:
                        since_commit[i] = 0
                        await self._commit(member)
            for member in members:
                await self._commit(member)
        finally:
            self.stop_group.set()
            await asyncio.gather(watcher, return_exceptions=True)
            for member in members:
                await asyncio.to_thread(member.close)

    async def _commit(self, member: Any) -> None:
        try:
            await asyncio.to_thread(member.commit, asynchronous=False)
        except Exception as exc:  # noqa: BLE001 - a commit refused during a rebalance is an outcome, not a bug
            error: Any = exc.args[0] if exc.args else None
            self.group_errors[f"commit:{error.name() if hasattr(error, 'name') else type(exc).__name__}"] += 1

    async def watch_committed(self, partitions: list[TopicPartition]) -> None:
        """Read the group's committed offsets from its coordinator (OffsetFetch) every half second while the
        group runs, and note any that is lower than one read before: the coordinator must never lose a
        commit, whichever broker it runs on."""
        import confluent_kafka

        observer = confluent_kafka.Consumer(
            {"bootstrap.servers": self.bootstrap, "group.id": f"chaos-{self.run.args.seed}", "client.id": "watcher"}
        )
        asked = [confluent_kafka.TopicPartition(tp.topic, tp.partition) for tp in partitions]
        try:
            while not self.stop_group.is_set():
                try:
                    answer = await asyncio.to_thread(observer.committed, asked, 5)
                except Exception as exc:  # noqa: BLE001 - the coordinator moving: try again later
                    self.group_errors[f"offset-fetch:{type(exc).__name__}"] += 1
                    answer = []
                for tp in answer:
                    if tp.error is not None or tp.offset < 0:
                        continue  # nothing committed yet
                    key = TopicPartition(tp.topic, tp.partition)
                    previous = self.committed.get(key, -1)
                    if tp.offset < previous:
                        self.commit_regressions.append({"partition": str(key), "from": previous, "to": tp.offset})
                    self.committed[key] = max(previous, tp.offset)
                await asyncio.sleep(0.5)
        finally:
            await asyncio.to_thread(observer.close)

    async def drain(self, ends: dict[TopicPartition, int]) -> None:
        """After the load: let the group read to `ends` (each partition's high watermark), then stop it."""
        self.drained = await wait_until(
            lambda: all(self.group_positions.get(tp, 0) >= end for tp, end in ends.items() if end > 0),
            DRAIN_TIMEOUT_S,
            clock=SYSTEM_TIME,
            interval_s=0.2,
        )
        self.stop_group.set()

    # -- the report -----------------------------------------------------------------------------------

    def longest_stall_ms(self) -> float | None:
        times = sorted(self.delivered_at)
        if len(times) < 2:
            return None
        return round(max(b - a for a, b in zip(times, times[1:], strict=False)) * 1000.0, 1)

    def after(self, moment: float) -> float | None:
        """Milliseconds from `moment` (wall-clock seconds, as a kill is stamped) to the next delivery report."""
        later = [t for t in self.delivered_at if t >= moment]
        return round((min(later) - moment) * 1000.0, 1) if later else None

    def report(self, acked: dict[str, tuple[TopicPartition, int]]) -> dict[str, Any]:
        skipped = [key for key in acked if key not in self.group_read]
        totals: dict[str, int] = defaultdict(int)
        if self.kafkajs is not None:
            self.client_stats.update(self.kafkajs.stats)
        for name, value in self.client_stats.items():
            totals[name.rsplit("_", 1)[0] if name[-1].isdigit() else name] += value
        return {
            "client": self.client,
            "longest_stall_ms": self.longest_stall_ms(),
            "client_stats": dict(totals),
            "errors_surfaced": dict(self.errors),
            "group": {
                "members": self.group_members,
                "read_to_the_end": self.drained,
                "records_read": sum(self.group_read.values()),
                "acked_not_read": len(skipped),
                "acked_not_read_examples": skipped[:5],
                "group_reread": sum(n - 1 for n in self.group_read.values() if n > 1),
                "committed": {str(tp): offset for tp, offset in sorted(self.committed.items())},
                "commit_regressions": self.commit_regressions,
                "errors": dict(self.group_errors),
            },
        }

    def problems(self, acked: dict[str, tuple[TopicPartition, int]]) -> list[str]:
        """What makes the run invalid on the client's side."""
        found = list(self.producer_failures)
        if self.commit_regressions:
            found.append(f"{len(self.commit_regressions)} committed offsets went backwards")
        if not self.drained:
            found.append("the consumer group did not read to the end of the topic")
        skipped = sum(1 for key in acked if key not in self.group_read)
        if skipped:
            found.append(f"{skipped} acknowledged records were never read by the group")
        return found
