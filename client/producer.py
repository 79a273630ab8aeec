"""Producing records: Kafka's producer in small, used by `minibroker produce` and the benches.

`Producer` gathers records per partition into batches (client/record_accumulator.py) and hands ready
batches to the client's sender (client/sender.py), which sends one PRODUCE per broker for all the
partitions it leads. `send_batch` sends one batch of records through the same sender and waits for it.

A batch is retried only when the broker said it was *not* written: NOT_LEADER_OR_FOLLOWER,
UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE, NOT_ENOUGH_REPLICAS (checked before the append),
FENCED/UNKNOWN_LEADER_EPOCH, or a connection that could not be opened. A timeout or a connection that
broke after the request was sent is indeterminate and is reported as failed, never resent, so the tool
cannot introduce duplicates. NOT_ENOUGH_REPLICAS is not retried when the topic's min.insync.replicas is
larger than its replication factor: no ISR change can ever satisfy it.

`produce_command` picks each record's partition as Kafka's producer does (`--partition`, else the
key's murmur2 hash, else a sticky partition that changes every batch.size bytes), reports the first
error of each kind with its reason as it happens, and prints progress to stderr while a long produce
runs.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import os
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from typing import Any

from client.cluster_client import REFRESH_ERRORS, ClusterClient, ClusterUnavailableError
from client.console import InputLineError, ProducerRecord
from client.errors import ClusterAnswerError, ClusterUnreachableError
from client.partitioner import partition_for_key
from client.record_accumulator import BATCH_OVERHEAD, ProducerBatch, RecordAccumulator
from protocol.errors import ErrorCode
from protocol.messages import TopicPartition
from protocol.record_batch import Header, build_batch, next_sequence
from server_common.time import SYSTEM_TIME, Time

NOT_WRITTEN = REFRESH_ERRORS | {ErrorCode.NOT_ENOUGH_REPLICAS}
# Answers to a batch that reached the leader before an earlier one of its partition: not written. A leader
# that has not seen the earlier one has no state for the producer yet (UNKNOWN_PRODUCER_ID), or expects
# a lower sequence (OUT_OF_ORDER_SEQUENCE_NUMBER); either way it is resent after the earlier one.
OUT_OF_TURN = frozenset({ErrorCode.OUT_OF_ORDER_SEQUENCE_NUMBER, ErrorCode.UNKNOWN_PRODUCER_ID})
# Answers after which the records may or may not be in the log: resent only by an idempotent producer.
MAYBE_WRITTEN = frozenset({ErrorCode.NOT_ENOUGH_REPLICAS_AFTER_APPEND, ErrorCode.REQUEST_TIMED_OUT})
ACKS = {"0": 0, "1": 1, "all": -1, "-1": -1}


PROGRESS_INTERVAL_S = 2.0
MAX_IN_FLIGHT_PER_PARTITION = 5  # an idempotent producer's unanswered batches per partition (Kafka's limit)


async def send_batch(
    client: ClusterClient,
    tp: TopicPartition,
    values: Sequence[bytes | ProducerRecord],
    acks: int,
    retries: int = 20,
    timeout_ms: int = 30000,
    on_retry: Callable[[str], None] | None = None,
) -> tuple[str, int, str]:
    """('acked' | 'failed', base offset, message). Retries only errors that mean "not written".

    A failure's message starts with the error's name (`NOT_ENOUGH_REPLICAS: ...`); `on_retry` hears
    each reason before the batch is sent again."""
    return await send_record_set(client, tp, build_batch(values), acks, retries, timeout_ms, on_retry)


async def send_record_set(
    client: ClusterClient,
    tp: TopicPartition,
    records: bytes,
    acks: int,
    retries: int = 20,
    timeout_ms: int = 30000,
    on_retry: Callable[[str], None] | None = None,
    idempotent: bool = False,
    order: BatchOrder | None = None,
) -> tuple[str, int, str]:
    """`send_batch` for a record set that is already built. `idempotent`: the records carry a producer id
    and sequence, so an answer that leaves them indeterminate (a timeout, a broken connection,
    NOT_ENOUGH_REPLICAS_AFTER_APPEND, REQUEST_TIMED_OUT) is resent too: the leader answers a copy it
    already has with the original offset instead of appending it again. OUT_OF_ORDER_SEQUENCE_NUMBER and
    UNKNOWN_PRODUCER_ID are resent too when `order` says an earlier batch of the partition is still
    unanswered or was answered meanwhile (it is being resent, and this one must follow it), as Kafka's
    producer does: at once after the earlier batch's answer, not after a backoff."""
    last = ""
    indeterminate = False
    for attempt in range(retries + 1):
        mark = order.mark() if order is not None else 0
        try:
            resp = await client.produce(tp, records, acks=acks, timeout_ms=timeout_ms)
        except (ConnectionRefusedError, ClusterUnavailableError) as exc:
            last = str(exc)
        except (TimeoutError, ConnectionError, OSError) as exc:
            if not idempotent:
                return "failed", -1, f"indeterminate: {exc or type(exc).__name__}"
            last, indeterminate = f"indeterminate: {exc or type(exc).__name__}", True
        else:
            if resp is None:
                return "acked", -1, ""
            p = resp.partitions[0] if resp.partitions else None
            code = resp.error_code or (p.error_code if p else ErrorCode.UNKNOWN_SERVER_ERROR)
            if code == ErrorCode.NONE and p is not None:
                return "acked", p.base_offset, ""
            name = ErrorCode(code).name
            reason = resp.error_message or (p.error_message if p else None)
            last = f"{name}: {reason}" if reason else name
            if idempotent and ErrorCode(code) in MAYBE_WRITTEN:
                last, indeterminate = f"indeterminate: {last}", True
            elif code in OUT_OF_TURN and order is not None and order.behind(mark):
                await order.wait()  # not written; resent as soon as the batch before it is answered
                continue
            elif ErrorCode(code) not in NOT_WRITTEN:
                return "failed", -1, last
            elif code == ErrorCode.NOT_ENOUGH_REPLICAS and acks == -1 and client.min_isr_unreachable(tp):
                return "failed", -1, last + " (permanent: min.insync.replicas exceeds the replication factor)"
        if on_retry is not None and attempt < retries:
            on_retry(last)
        await asyncio.sleep(min(0.05 * (attempt + 1), 0.5))
        try:
            await client.refresh_metadata([tp.topic])
        except ClusterUnavailableError as exc:
            last = str(exc)
    if indeterminate and not last.startswith("indeterminate"):
        last = f"indeterminate: {last}"  # an earlier attempt may have been written
    return "failed", -1, f"{last} (gave up after {retries} retries)"


DeliveryCallback = Callable[[int, str | None], None]


class BatchOrder:
    """Where an idempotent batch stands among the unanswered batches of its partition (Producer's window):
    `behind(mark)` is whether an earlier one is unanswered, or was answered since `mark()` was taken;
    `wait()` returns once an earlier one is answered (at once when none is left)."""

    def __init__(self, producer: Producer, batch: ProducerBatch) -> None:
        self._producer = producer
        self._batch = batch

    def mark(self) -> int:
        return self._producer._answers.get(self._batch.tp, 0)  # noqa: SLF001

    def behind(self, mark: int) -> bool:
        return self._producer._earlier_unanswered(self._batch) or self.mark() != mark  # noqa: SLF001

    async def wait(self) -> None:
        if self._producer._earlier_unanswered(self._batch):  # noqa: SLF001
            event = self._producer._progress.setdefault(self._batch.tp, asyncio.Event())  # noqa: SLF001
            await event.wait()


class Producer:
    """Kafka's producer in small: `send` adds a record to its partition's batch in the record accumulator
    (`batch.size`, `linger.ms`); ready batches go to the client's sender, which puts a batch for every
    partition a broker leads in one PRODUCE with `max.in.flight.requests.per.connection` outstanding
    (client/sender.py).

    Idempotent by default (`enable.idempotence`, as Kafka since 3.0): the producer gets an id and epoch
    from INIT_PRODUCER_ID before its first batch and numbers each partition's records from 0. A batch
    whose answer leaves it indeterminate (a timeout, a broken connection, NOT_ENOUGH_REPLICAS_AFTER_APPEND)
    is resent with the same sequence, and the leader answers a copy it already has with the original
    offset, so a retried write lands exactly once. Each partition has at most
    `MAX_IN_FLIGHT_PER_PARTITION` (5, Kafka's limit with idempotence, which is also how many batches the
    leader remembers per producer) batches unanswered; when an earlier one is being resent, a later one
    answered OUT_OF_ORDER_SEQUENCE_NUMBER is resent after it. A batch that finally fails leaves the
    partition's sequence unknown, so the producer bumps its epoch (INIT_PRODUCER_ID with its id, as
    KIP-360 does) and every partition starts again at sequence 0.

    Without idempotence a batch is retried only on answers that mean "not written", and with more than
    one request in flight a retried batch can land after a later one, as in Kafka.

    `callback(offset, None)` hears each acked record's offset (-1 for acks=0), `callback(-1, message)` a
    record that failed (the message starts with the error's name, `indeterminate:` when it may have been
    written). `send` waits while `buffer.memory` bytes are unacknowledged; `flush` sends everything now
    and waits for every answer."""

    def __init__(
        self,
        client: ClusterClient,
        acks: int = -1,
        batch_size: int = 16384,
        linger_ms: int = 5,
        buffer_memory: int = 32 * 1024 * 1024,
        request_timeout_ms: int = 30000,
        retries: int = 20,
        on_retry: Callable[[str], None] | None = None,
        time_source: Time = SYSTEM_TIME,
        enable_idempotence: bool | None = None,
    ) -> None:
        if enable_idempotence and acks != -1:
            # Kafka refuses this combination too: a batch not known to be replicated cannot be resent safely.
            raise ValueError("an idempotent producer needs acks=all (use enable_idempotence=False for acks 0 or 1)")
        if enable_idempotence is None:  # unset: on with acks=all, as Kafka's default
            enable_idempotence = acks == -1
        self.client = client
        self.acks = acks
        self.accumulator = RecordAccumulator(batch_size, linger_ms)
        self.buffer_memory = buffer_memory
        self.request_timeout_ms = request_timeout_ms
        self.retries = retries
        self.on_retry = on_retry
        self.time = time_source
        self.idempotent = enable_idempotence
        self.producer_id = -1
        self.producer_epoch = -1
        self._next_sequence: dict[TopicPartition, int] = {}
        # Idempotent only: each partition's unanswered batches in sequence order, and those waiting for room.
        self._in_flight: dict[TopicPartition, list[ProducerBatch]] = {}
        self._answered: set[int] = set()  # ids of batches in a window that are answered, behind one that is not
        self._answers: dict[TopicPartition, int] = {}  # batches answered so far, per partition
        self._progress: dict[TopicPartition, asyncio.Event] = {}  # set when a batch of the partition is answered
        self._waiting: dict[TopicPartition, list[ProducerBatch]] = {}
        self._epoch_lock = asyncio.Lock()
        self.batches_sent = 0
        self.batches_answered = 0  # batches whose outcome is known (acked or failed)
        self.bytes_sent = 0  # batch bytes handed to the sender (once per batch, retries not counted)
        self.epoch_bumps = 0
        self.resent_indeterminate = 0  # batches resent after an answer that left them indeterminate
        self._in_flight_bytes = 0  # record bytes of batches handed to the sender and not answered yet
        self._clock = time_source.hi_res_milliseconds
        self._space = asyncio.Event()
        self._space.set()
        self._linger_timer: asyncio.TimerHandle | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def send(
        self,
        tp: TopicPartition,
        value: bytes | None,
        key: bytes | None = None,
        headers: Sequence[Header] = (),
        callback: DeliveryCallback | None = None,
    ) -> None:
        if self.idempotent and self.producer_id < 0:
            async with self._epoch_lock:
                if self.producer_id < 0:
                    self.producer_id, self.producer_epoch = await self.client.init_producer_id()
        if tp not in self.client.partitions:
            # A partition the client has no metadata for: ask for its topic's first, as Kafka's producer
            # waits on metadata in send(). Without it every batch failed at once on a client that had not
            # looked the topic up (still unknown after this: the batch fails, naming the partition).
            with contextlib.suppress(ClusterUnavailableError):
                await self.client.refresh_metadata([tp.topic])
        while self.accumulator.bytes_held + self._in_flight_bytes >= self.buffer_memory:
            self._space.clear()
            await self._space.wait()
        now_ms = int(self._clock())
        batch = self.accumulator.append(tp, key, value, headers, now_ms, callback)
        if batch.closed or len(batch.records) == 1:
            # Full, or a new batch (so the one before it, if any, is full): what is ready goes now, as
            # Kafka's producer wakes its sender on batchIsFull || newBatchCreated; the rest lingers.
            self._dispatch_ready(now_ms)
        if self._linger_timer is None:
            self._arm_linger(now_ms)

    def _arm_linger(self, now_ms: int) -> None:
        delay_ms = self.accumulator.next_ready_in_ms(now_ms)
        if delay_ms is not None:
            loop = asyncio.get_running_loop()
            self._linger_timer = loop.call_later(delay_ms / 1000.0, self._on_linger)

    def _on_linger(self) -> None:
        self._linger_timer = None
        now_ms = int(self._clock())
        self._dispatch_ready(now_ms)
        self._arm_linger(now_ms)

    def _dispatch_ready(self, now_ms: int) -> None:
        for batch in self.accumulator.drain(now_ms):
            self._in_flight_bytes += batch.size_bytes - BATCH_OVERHEAD
            if self.idempotent and (
                len(self._in_flight.get(batch.tp, ())) >= MAX_IN_FLIGHT_PER_PARTITION or batch.tp in self._waiting
            ):
                self._waiting.setdefault(batch.tp, []).append(batch)  # after those in flight
            else:
                self._start(batch)

    def _start(self, batch: ProducerBatch) -> None:
        if self.idempotent:
            self._in_flight.setdefault(batch.tp, []).append(batch)
        task = asyncio.get_running_loop().create_task(self._complete(batch))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        self.batches_sent += 1

    async def _complete(self, batch: ProducerBatch) -> None:
        epoch = self.producer_epoch
        try:
            if self.idempotent:
                sequence = self._next_sequence.get(batch.tp, 0)
                self._next_sequence[batch.tp] = next_sequence(sequence, len(batch.records))
                records = batch.build(self.producer_id, epoch, sequence)
            else:
                records = batch.build()
            self.bytes_sent += len(records)
            outcome, base, message = await send_record_set(
                self.client,
                batch.tp,
                records,
                self.acks,
                self.retries,
                self.request_timeout_ms,
                self._on_retry,
                idempotent=self.idempotent,
                order=BatchOrder(self, batch) if self.idempotent else None,
            )
        except asyncio.CancelledError:
            outcome, base, message = "failed", -1, "indeterminate: the producer was closed"
        except Exception as exc:  # e.g. PermissionError: the cluster refused the secret
            outcome, base, message = "failed", -1, f"{type(exc).__name__}: {exc}"
        acked = outcome == "acked"
        self.batches_answered += 1
        if self.idempotent and not acked:
            with contextlib.suppress(Exception):
                await self._bump_epoch(epoch)
        self._in_flight_bytes -= batch.size_bytes - BATCH_OVERHEAD
        if self.accumulator.bytes_held + self._in_flight_bytes < self.buffer_memory:
            self._space.set()
        for i, callback in enumerate(batch.callbacks):
            if callback is not None:
                if acked:
                    callback(base + i if base >= 0 else -1, None)
                else:
                    callback(-1, message)
        if self.idempotent:
            # A batch leaves the window only with every batch before it: while an earlier one is being resent
            # no sixth batch may be appended, or the leader (which remembers five per producer) would no longer
            # recognise the earlier one when it arrives.
            self._answered.add(id(batch))
            self._answers[batch.tp] = self._answers.get(batch.tp, 0) + 1
            if (event := self._progress.pop(batch.tp, None)) is not None:
                event.set()  # batches waiting behind this one are resent now
            in_flight = self._in_flight[batch.tp]
            while in_flight and id(in_flight[0]) in self._answered:
                self._answered.discard(id(in_flight.pop(0)))
            if not in_flight:
                del self._in_flight[batch.tp]
            waiting = self._waiting.get(batch.tp)
            while waiting and len(self._in_flight.get(batch.tp, ())) < MAX_IN_FLIGHT_PER_PARTITION:
                self._start(waiting.pop(0))
            if waiting == []:
                del self._waiting[batch.tp]

    def _earlier_unanswered(self, batch: ProducerBatch) -> bool:
        return self._in_flight[batch.tp][0] is not batch  # the head of a window is never answered

    def _on_retry(self, message: str) -> None:
        if message.startswith("indeterminate"):
            self.resent_indeterminate += 1  # an idempotent resend of a batch that may have been written
        if self.on_retry is not None:
            self.on_retry(message)

    async def _bump_epoch(self, failed_epoch: int) -> None:
        """After a batch failed for good its partition's sequence is unknown: a new epoch, sequences from 0
        on every partition. Once per failed epoch, however many batches of it fail."""
        async with self._epoch_lock:
            if self.producer_epoch != failed_epoch:
                return
            self.producer_id, self.producer_epoch = await self.client.init_producer_id(
                self.producer_id, self.producer_epoch
            )
            self._next_sequence.clear()
            self.epoch_bumps += 1

    @property
    def batches_in_flight(self) -> int:
        """Batches handed to the sender and not answered yet (at most 5 per partition when idempotent)."""
        return self.batches_sent - self.batches_answered

    @property
    def blocked_on_buffer(self) -> bool:
        """Whether `send` is waiting for `buffer.memory` to free up."""
        return not self._space.is_set()

    async def flush(self) -> None:
        """Send every record now (linger ends) and wait until each has its answer."""
        self.accumulator.begin_flush()
        self._dispatch_ready(int(self._clock()))
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def close(self) -> None:
        """Flush, then stop the linger timer. The client's connections stay the caller's."""
        try:
            await self.flush()
        finally:
            if self._linger_timer is not None:
                self._linger_timer.cancel()
                self._linger_timer = None
            for task in list(self._tasks):
                task.cancel()
            if self._tasks:
                await asyncio.gather(*list(self._tasks), return_exceptions=True)


def _error_line(tp: TopicPartition, error: str) -> str:
    """`t-0: KIND: message`, naming the partition once: the broker's message names it too
    (`KIND: t-0: message`)."""
    kind, sep, message = error.partition(": ")
    return f"{tp}: {kind}{sep}{message.removeprefix(f'{tp}: ')}"


async def produce_command(
    args: argparse.Namespace,
    records: Iterable[ProducerRecord] | None,
    key: bytes | None = None,
    headers: Sequence[Header] = (),
) -> dict[str, Any]:
    if records is None:
        payload = os.urandom(max(args.size, 0) // 2 + 1).hex()[: args.size].encode()
        records = ((key, payload, headers) for _ in range(args.count))
    acks = ACKS[args.acks]
    async with ClusterClient(args.bootstrap_server, secret=getattr(args, "cluster_secret", None)) as client:
        try:
            meta = await client.refresh_metadata([args.topic])
        except ClusterUnavailableError as exc:
            raise ClusterUnreachableError(f"cluster not reachable at {args.bootstrap_server}: {exc}") from None
        topic = meta.topics[0]
        if topic.error_code != ErrorCode.NONE:
            raise ClusterAnswerError(
                f"unknown topic {args.topic!r} (create it with "
                f"`minibroker topic create {args.topic} --bootstrap-server {args.bootstrap_server}`)"
            )
        partitions = client.partitions_of(args.topic)
        if args.partition is not None:
            if TopicPartition(args.topic, args.partition) not in partitions:
                raise ClusterAnswerError(f"topic {args.topic!r} has no partition {args.partition}")
        targets = [TopicPartition(args.topic, args.partition)] if args.partition is not None else partitions
        if acks == -1 and any(client.min_isr_unreachable(tp) for tp in targets):
            rf = min(len(client.leader_of(tp).replicas) for tp in targets)
            min_isr = client.topic_configs.get(args.topic, {}).get("min.insync.replicas")
            raise ClusterAnswerError(
                f"acks=all to {args.topic!r} can never succeed: min.insync.replicas={min_isr} is larger than "
                f"its replication factor {rf} (use --acks 1, or a topic with a lower min.insync.replicas)"
            )
        return await _produce(client, args, records, partitions, acks)


async def _produce(
    client: ClusterClient,
    args: argparse.Namespace,
    records: Iterable[ProducerRecord],
    partitions: list[TopicPartition],
    acks: int,
) -> dict[str, Any]:
    acked = failed = 0
    errors: dict[str, dict[str, Any]] = {}  # first message and count per error name
    turn = itertools.cycle(partitions)
    sticky = next(turn)
    sticky_bytes = 0
    started = last_progress = time.monotonic()
    retrying: set[str] = set()

    def on_retry(message: str) -> None:
        kind = message.split(":", 1)[0].split(" ", 1)[0]
        if kind not in retrying:  # say why it is waiting, once per kind, instead of retrying silently
            retrying.add(kind)
            print(f"minibroker: produce: {message} (retrying)", file=sys.stderr, flush=True)

    def delivered(tp: TopicPartition) -> DeliveryCallback:
        def callback(offset: int, error: str | None) -> None:
            nonlocal acked, failed, last_progress
            if error is None:
                acked += 1
            else:
                failed += 1
                kind = error.split(":", 1)[0].split(" ", 1)[0]
                if kind not in errors:
                    first = _error_line(tp, error)
                    errors[kind] = {"error": kind, "first": first, "records": 0}
                    print(f"minibroker: produce: {first}", file=sys.stderr, flush=True)
                errors[kind]["records"] += 1
            now = time.monotonic()
            if now - last_progress >= PROGRESS_INTERVAL_S:
                last_progress = now
                print(
                    f"minibroker: produce: {acked} acked, {failed} failed after {now - started:.0f} s",
                    file=sys.stderr,
                    flush=True,
                )

        return callback

    batch_size = max(args.batch_size, 1)
    producer = Producer(
        client,
        acks,
        batch_size=batch_size,
        linger_ms=max(args.linger_ms, 0),
        on_retry=on_retry,
        enable_idempotence=False if getattr(args, "no_idempotence", False) else None,
    )
    callbacks = {tp: delivered(tp) for tp in partitions}
    input_error = None
    try:
        for key, value, headers in records:
            if args.partition is not None:
                tp = TopicPartition(args.topic, args.partition)
            elif key is not None:
                tp = partitions[partition_for_key(key, len(partitions))]
            else:
                # Keyless records stick to one partition for batch.size bytes, then move on (KIP-794).
                tp = sticky
                sticky_bytes += len(value or b"")
                if sticky_bytes >= batch_size:
                    sticky, sticky_bytes = next(turn), 0
            await producer.send(tp, value, key, headers, callbacks.get(tp) or delivered(tp))
    except InputLineError as exc:
        input_error = str(exc)
    finally:
        await producer.close()
    result: dict[str, Any] = {
        "topic": args.topic,
        "acked": acked,
        "failed": failed,
        "errors": list(errors.values()),
        "idempotent": producer.idempotent,
        "resent_indeterminate_batches": producer.resent_indeterminate,
    }
    if input_error:
        result["input_error"] = input_error
    return result
