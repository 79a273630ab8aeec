"""The log manager: every partition replica's Log under one `log.dirs` directory, and the HW checkpoint.

Layout:  <log.dirs>/<topic>-<partition>/            one Log per replica (segments, index, epoch checkpoint)
         <log.dirs>/<topic>-<partition>/partition.metadata   the topic id the log belongs to (KIP-516)
         <log.dirs>/replication-offset-checkpoint   every replica's HW, written atomically (Kafka's name)

A deleted replica's directory is first renamed to `<topic>-<partition>.<n>-delete` (one rename, so a
crash never leaves half a log under the live name), then removed; leftovers are removed at start.
"""

from __future__ import annotations

import logging
import re
import shutil
from pathlib import Path

from protocol.errors import KafkaStorageError
from protocol.messages import TopicPartition
from server_common.replication_observer import NO_OBSERVER, ReplicationObserver
from server_common.storage import write_atomically
from server_common.time import Time
from storage.checkpoint import HighWatermarkCheckpoint
from storage.log import Log, LogConfig
from storage.producer_state import ProducerEntries
from storage.storage import OS_STORAGE, Storage

log = logging.getLogger(__name__)

_DIR_NAME = re.compile(r"^(?P<topic>.+)-(?P<partition>\d+)$")
HW_CHECKPOINT_FILE = "replication-offset-checkpoint"
PARTITION_METADATA_FILE = "partition.metadata"
DELETE_SUFFIX = "-delete"


def log_dir_name(tp: TopicPartition) -> str:
    return f"{tp.topic}-{tp.partition}"


class LogManager:
    def __init__(
        self,
        log_dir: Path,
        config: LogConfig,
        time: Time,
        storage: Storage = OS_STORAGE,
        producer_entries: ProducerEntries | None = None,
        observer: ReplicationObserver = NO_OBSERVER,
    ) -> None:
        self.log_dir = log_dir
        #: producer.state.max.entries: the idempotent-producer entries every log of this broker holds together.
        self.producer_entries = producer_entries or ProducerEntries()
        self.storage = storage
        self.observer = observer  # given to every log opened here
        self.config = config
        self.time = time
        self.logs: dict[TopicPartition, Log] = {}
        log_dir.mkdir(parents=True, exist_ok=True)
        self.hw_checkpoint = HighWatermarkCheckpoint(log_dir / HW_CHECKPOINT_FILE)
        self._checkpointed_hw = self.hw_checkpoint.read()
        self._deleted = 0
        for child in log_dir.iterdir():
            if child.is_dir() and child.name.endswith(DELETE_SUFFIX):
                shutil.rmtree(child, ignore_errors=True)  # a deletion a crash interrupted

    def existing_partitions(self) -> list[TopicPartition]:
        found = []
        for child in sorted(self.log_dir.iterdir()):
            m = _DIR_NAME.match(child.name)
            if child.is_dir() and m:
                found.append(TopicPartition(m["topic"], int(m["partition"])))
        return found

    def get_or_create_log(self, tp: TopicPartition, config: LogConfig | None = None) -> Log:
        """The log of `tp`, opened with `config` (the topic's settings over the broker's) if it is new."""
        existing = self.logs.get(tp)
        if existing is not None:
            return existing
        log_ = Log.open(
            self.log_dir / log_dir_name(tp),
            config or self.config,
            self.time,
            self.storage,
            self.producer_entries,
            observer=self.observer,
        )
        hw = self._checkpointed_hw.get((tp.topic, tp.partition))
        if hw is not None:
            log_.update_high_watermark(hw)
        self.logs[tp] = log_
        return log_

    # -- topic ids and deletion (STOP_REPLICA, DELETE_TOPICS) ----------------------------------------

    def topic_id(self, tp: TopicPartition) -> str | None:
        """The topic id recorded with `tp`'s log, or None (no log, or written before ids existed)."""
        try:
            text = (self.log_dir / log_dir_name(tp) / PARTITION_METADATA_FILE).read_text()
        except OSError:
            return None
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "topic_id":
                return value.strip() or None
        return None

    def set_topic_id(self, tp: TopicPartition, topic_id: str) -> None:
        path = self.log_dir / log_dir_name(tp) / PARTITION_METADATA_FILE
        write_atomically(path, f"version: 0\ntopic_id: {topic_id}\n".encode())

    def delete_log(self, tp: TopicPartition) -> bool:
        """Close `tp`'s log if open and remove its directory. True if there was one."""
        opened = self.logs.pop(tp, None)
        if opened is not None:
            # Its files are about to go: closed without the flush, checkpoints and clean-shutdown marker of
            # close(), a dozen fsyncs per replica that held the loop through a topic's deletion.
            opened.abandon()
        self._checkpointed_hw.pop((tp.topic, tp.partition), None)
        live = self.log_dir / log_dir_name(tp)
        if not live.exists():
            return opened is not None
        self._deleted += 1
        doomed = live.with_name(f"{live.name}.{self._deleted}{DELETE_SUFFIX}")
        live.rename(doomed)
        shutil.rmtree(doomed, ignore_errors=True)
        log.info("deleted the log of %s", tp)
        return True

    def high_watermarks(self) -> dict[tuple[str, int], int]:
        return {(tp.topic, tp.partition): lg.high_watermark for tp, lg in self.logs.items()}

    def write_high_watermarks(self, hws: dict[tuple[str, int], int]) -> None:
        """Write a snapshot taken with `high_watermarks()`; safe to call from a worker thread."""
        self.hw_checkpoint.write(hws)

    def checkpoint_high_watermarks(self) -> None:
        self.write_high_watermarks(self.high_watermarks())

    def cleanup_logs(self) -> int:
        """Retention (log.retention.ms / log.retention.bytes): whole old segments are deleted. Idle
        producers' state past producer.id.expiration.ms goes too."""
        for lg in self.logs.values():
            lg.remove_expired_producers()
        return sum(lg.delete_old_segments() for lg in self.logs.values())

    def flush_all(self) -> None:
        for lg in self.logs.values():
            lg.flush()

    def abandon(self) -> None:
        """What a killed process leaves: every file descriptor closed, nothing flushed, checkpointed or
        marked clean (the next open recovers every log)."""
        for lg in self.logs.values():
            lg.abandon()

    def close(self) -> None:
        """Checkpoint and close every log; a disk error is one log line each, never an exception, so the
        logs that can be closed cleanly still are."""
        try:
            self.checkpoint_high_watermarks()
        except OSError as exc:
            log.error("high watermark checkpoint at close failed: %s", exc)
        for lg in self.logs.values():
            try:
                lg.close()
            except (OSError, KafkaStorageError) as exc:
                log.error("closing %s-%d failed: %s", lg.topic, lg.partition, exc)
