"""The records a group coordinator writes to __consumer_offsets, in Kafka's own layouts.

Two kinds of record, told apart by the key's version, as in Kafka's GroupMetadataManager:

    OffsetCommitKey   v1: int16 version=1, string group, string topic, int32 partition
    OffsetCommitValue v3: int16 version=3, int64 offset, int32 leader_epoch, string metadata,
                          int64 commit_timestamp
    GroupMetadataKey  v2: int16 version=2, string group
    GroupMetadataValue v3: int16 version=3, string protocol_type, int32 generation, nullable string
                          protocol, nullable string leader, int64 current_state_timestamp,
                          [member_id, nullable group_instance_id, client_id, client_host,
                           int32 rebalance_timeout, int32 session_timeout, bytes subscription, bytes assignment]

A string is an int16 length and UTF-8 (-1: null), bytes an int32 length, an array an int32 count. A record
with a null value is a tombstone: the key's offset or group is gone. Being Kafka's layouts, a topic written
here reads with Kafka's own formatters.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

_INT16 = struct.Struct(">h")
_INT32 = struct.Struct(">i")
_INT64 = struct.Struct(">q")

OFFSET_COMMIT_KEY_VERSION = 1
OFFSET_COMMIT_VALUE_VERSION = 3
GROUP_METADATA_KEY_VERSION = 2
GROUP_METADATA_VALUE_VERSION = 3


class RecordFormatError(ValueError):
    """A __consumer_offsets record that is not one of the layouts above."""


@dataclass(frozen=True, slots=True)
class OffsetKey:
    group: str
    topic: str
    partition: int


@dataclass(frozen=True, slots=True)
class GroupKey:
    group: str


@dataclass(frozen=True, slots=True)
class OffsetValue:
    offset: int
    leader_epoch: int
    metadata: str
    commit_timestamp: int


@dataclass(frozen=True, slots=True)
class MemberValue:
    member_id: str
    group_instance_id: str | None
    client_id: str
    client_host: str
    rebalance_timeout_ms: int
    session_timeout_ms: int
    subscription: bytes
    assignment: bytes


@dataclass(frozen=True, slots=True)
class GroupValue:
    protocol_type: str
    generation: int
    protocol: str | None
    leader: str | None
    current_state_timestamp: int
    members: tuple[MemberValue, ...]


def _string(value: str | None) -> bytes:
    if value is None:
        return _INT16.pack(-1)
    data = value.encode()
    return _INT16.pack(len(data)) + data


def _bytes(value: bytes) -> bytes:
    return _INT32.pack(len(value)) + value


class _Reader:
    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def _take(self, size: int) -> bytes:
        if size < 0 or self.position + size > len(self.data):
            raise RecordFormatError(f"record ends at byte {len(self.data)}, needs {self.position + size}")
        out = self.data[self.position : self.position + size]
        self.position += size
        return out

    def int16(self) -> int:
        return int(_INT16.unpack(self._take(2))[0])

    def int32(self) -> int:
        return int(_INT32.unpack(self._take(4))[0])

    def int64(self) -> int:
        return int(_INT64.unpack(self._take(8))[0])

    def string(self) -> str | None:
        size = self.int16()
        return None if size == -1 else self._take(size).decode()

    def required_string(self) -> str:
        value = self.string()
        if value is None:
            raise RecordFormatError("a required string is null")
        return value

    def bytes_(self) -> bytes:
        return self._take(self.int32())


def offset_key(group: str, topic: str, partition: int) -> bytes:
    return _INT16.pack(OFFSET_COMMIT_KEY_VERSION) + _string(group) + _string(topic) + _INT32.pack(partition)


def offset_value(value: OffsetValue) -> bytes:
    return (
        _INT16.pack(OFFSET_COMMIT_VALUE_VERSION)
        + _INT64.pack(value.offset)
        + _INT32.pack(value.leader_epoch)
        + _string(value.metadata)
        + _INT64.pack(value.commit_timestamp)
    )


def group_key(group: str) -> bytes:
    return _INT16.pack(GROUP_METADATA_KEY_VERSION) + _string(group)


def group_value(value: GroupValue) -> bytes:
    parts = [
        _INT16.pack(GROUP_METADATA_VALUE_VERSION),
        _string(value.protocol_type),
        _INT32.pack(value.generation),
        _string(value.protocol),
        _string(value.leader),
        _INT64.pack(value.current_state_timestamp),
        _INT32.pack(len(value.members)),
    ]
    for m in value.members:
        parts += [
            _string(m.member_id),
            _string(m.group_instance_id),
            _string(m.client_id),
            _string(m.client_host),
            _INT32.pack(m.rebalance_timeout_ms),
            _INT32.pack(m.session_timeout_ms),
            _bytes(m.subscription),
            _bytes(m.assignment),
        ]
    return b"".join(parts)


def read_key(data: bytes) -> OffsetKey | GroupKey:
    reader = _Reader(data)
    version = reader.int16()
    if version in (0, 1):
        return OffsetKey(reader.required_string(), reader.required_string(), reader.int32())
    if version == 2:
        return GroupKey(reader.required_string())
    raise RecordFormatError(f"unknown __consumer_offsets key version {version}")


def read_offset_value(data: bytes) -> OffsetValue:
    reader = _Reader(data)
    version = reader.int16()
    if version not in (1, 2, 3):
        raise RecordFormatError(f"unknown offset commit value version {version}")
    offset = reader.int64()
    leader_epoch = reader.int32() if version >= 3 else -1
    metadata = reader.string() or ""
    commit_timestamp = reader.int64()
    if version == 1:
        reader.int64()  # expire_timestamp, gone from v2 on
    return OffsetValue(offset, leader_epoch, metadata, commit_timestamp)


def read_group_value(data: bytes) -> GroupValue:
    reader = _Reader(data)
    version = reader.int16()
    if version not in (0, 1, 2, 3):
        raise RecordFormatError(f"unknown group metadata value version {version}")
    protocol_type = reader.required_string()
    generation = reader.int32()
    protocol = reader.string()
    leader = reader.string()
    current_state_timestamp = reader.int64() if version >= 2 else -1
    members = []
    for _ in range(reader.int32()):
        member_id = reader.required_string()
        instance = reader.string() if version >= 3 else None
        client_id = reader.required_string()
        client_host = reader.required_string()
        rebalance = reader.int32() if version >= 1 else -1
        session = reader.int32()
        members.append(
            MemberValue(
                member_id, instance, client_id, client_host, rebalance, session, reader.bytes_(), reader.bytes_()
            )
        )
    return GroupValue(protocol_type, generation, protocol, leader, current_state_timestamp, tuple(members))
