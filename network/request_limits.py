"""What one request may ask of a node: its size and its entries, per API, on both listeners.

How this works
--------------
Every request is decoded, handled and answered on the event loop that also runs the node's replication (a
broker's replica fetchers and metadata FETCHes, a controller's Raft) and timers, so what one request may
cost is bounded before any of it is done. Per API (Kafka's API keys, shared by the msgpack and the Kafka
listener) a `RequestLimit` gives:

* `max_bytes`: the largest frame, checked on the whole frame before a byte of it is decoded (None: only
  `socket.request.max.bytes`, checked at the length prefix: PRODUCE, whose records may fill it, and the
  requests nodes send each other);
* `max_entries`: the most array entries the request may hold in all (topics, partitions, groups, names,
  configs, members: every array of the message counted together). The Kafka listener counts them while it
  walks the frame (network/kafka_frame_check.py); the msgpack listener has its parser refuse any one array
  past it at the array's header, then counts them all on the unpacked value (`count_entries`), both
  before the typed message is built.

A request over either is refused whole and nothing of it is done: on the Kafka listener the connection is
closed with a log line, as Kafka closes a connection whose request it cannot read; on the msgpack listener
a frame over `max_bytes` closes the connection the same way, and one with too many entries is answered 42
INVALID_REQUEST naming the limit (the msgpack listener answers every malformed body so).

The numbers are chosen so that a request at its limit costs about 50 ms of one core's time here, decode,
handling and answer together (docs/protocol.md and docs/kafka-protocol.md list them, `bench.abuse`'s
"at_limit" probes measure them): 5,000 entries for the data-plane, offset and admin APIs, fewer where each
entry's answer is large (a group described, a resource's configs). What costs more than that is done in
slices (a PRODUCE's appends, LIST_OFFSETS, OFFSET_FOR_LEADER_EPOCH, the Kafka listener's record
conversions). Kafka itself has no entry limits; real clients stay far below these: a consumer names the
partitions it is assigned, an admin client its topics, and a follower the partitions it follows from one
leader (`num.replica.fetchers` splits them between fetchers).

Requests nodes send each other (LEADER_AND_ISR, UPDATE_METADATA, STOP_REPLICA, ALTER_PARTITION, the
registration and heartbeats) carry a cluster's whole state and keep the codec's 100,000-entry cap per
array (protocol/codec.py); brokers apply LEADER_AND_ISR and STOP_REPLICA in slices.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from protocol.codec import MAX_ENTRIES

KIB = 1024
MIB = 1024 * KIB


@dataclass(frozen=True, slots=True)
class RequestLimit:
    max_bytes: int | None  # None: socket.request.max.bytes only
    max_entries: int


#: Entries of a data-plane or offset request (partitions and topics of a PRODUCE, FETCH, LIST_OFFSETS,
#: OFFSET_FOR_LEADER_EPOCH, OffsetCommit, OffsetFetch; topic names of a METADATA).
DATA_ENTRIES = 5_000
#: Entries of an admin request (topics created or deleted, resources and their configs).
ADMIN_ENTRIES = 5_000
#: Groups one DescribeGroups may name: each answer carries every member's metadata and assignment.
DESCRIBE_GROUPS_ENTRIES = 1_000
#: Resources (and their config names) one DescribeConfigs may name: a broker's answer holds a hundred configs.
DESCRIBE_CONFIGS_ENTRIES = 1_000
#: Protocols one JoinGroup may offer (clients send one to three).
JOIN_GROUP_ENTRIES = 1_000
SMALL = RequestLimit(64 * KIB, 100)  # requests of a few fields: heartbeats, coordinators, versions

#: Kafka's API keys, as the Kafka listener serves them (versions: network/kafka_wire.py).
KAFKA_LIMITS: dict[int, RequestLimit] = {
    0: RequestLimit(None, DATA_ENTRIES),  # Produce
    1: RequestLimit(1 * MIB, DATA_ENTRIES),  # Fetch
    2: RequestLimit(1 * MIB, DATA_ENTRIES),  # ListOffsets
    3: RequestLimit(1 * MIB, DATA_ENTRIES),  # Metadata
    8: RequestLimit(8 * MIB, DATA_ENTRIES),  # OffsetCommit (metadata up to offset.metadata.max.bytes each)
    9: RequestLimit(1 * MIB, DATA_ENTRIES),  # OffsetFetch
    10: SMALL,  # FindCoordinator
    11: RequestLimit(4 * MIB, JOIN_GROUP_ENTRIES),  # JoinGroup (subscriptions)
    12: SMALL,  # Heartbeat
    13: RequestLimit(1 * MIB, DATA_ENTRIES),  # LeaveGroup
    14: RequestLimit(16 * MIB, DATA_ENTRIES),  # SyncGroup (the leader's assignments)
    15: RequestLimit(1 * MIB, DESCRIBE_GROUPS_ENTRIES),  # DescribeGroups
    16: SMALL,  # ListGroups
    17: SMALL,  # SaslHandshake
    18: SMALL,  # ApiVersions
    19: RequestLimit(4 * MIB, ADMIN_ENTRIES),  # CreateTopics
    20: RequestLimit(1 * MIB, ADMIN_ENTRIES),  # DeleteTopics
    21: RequestLimit(1 * MIB, DATA_ENTRIES),  # DeleteRecords
    22: SMALL,  # InitProducerId
    23: RequestLimit(1 * MIB, DATA_ENTRIES),  # OffsetForLeaderEpoch
    32: RequestLimit(1 * MIB, DESCRIBE_CONFIGS_ENTRIES),  # DescribeConfigs
    33: RequestLimit(4 * MIB, ADMIN_ENTRIES),  # AlterConfigs
    36: SMALL,  # SaslAuthenticate
    37: RequestLimit(1 * MIB, ADMIN_ENTRIES),  # CreatePartitions
    42: RequestLimit(1 * MIB, ADMIN_ENTRIES),  # DeleteGroups
    44: RequestLimit(4 * MIB, ADMIN_ENTRIES),  # IncrementalAlterConfigs
    55: SMALL,  # DescribeQuorum (the one partition of __cluster_metadata), forwarded to the active controller
}

#: The same APIs in minibroker's msgpack encoding, and the requests nodes send each other. A large frame's
#: API is read from its header first and its arrays are refused at their headers by the parser (C), so
#: unpacking one costs at most what a frame of 1 MiB of small entries costs.
_INTER_NODE = RequestLimit(None, MAX_ENTRIES)
MSGPACK_LIMITS: dict[int, RequestLimit] = {
    0: RequestLimit(None, DATA_ENTRIES),  # PRODUCE
    1: RequestLimit(2 * MIB, DATA_ENTRIES),  # FETCH: a partition is about 110 bytes
    2: RequestLimit(1 * MIB, DATA_ENTRIES),  # LIST_OFFSETS
    3: RequestLimit(1 * MIB, DATA_ENTRIES),  # METADATA
    4: _INTER_NODE,  # LEADER_AND_ISR
    5: _INTER_NODE,  # STOP_REPLICA
    6: _INTER_NODE,  # UPDATE_METADATA
    18: SMALL,  # API_VERSIONS
    19: RequestLimit(1 * MIB, ADMIN_ENTRIES),  # CREATE_TOPICS
    20: RequestLimit(1 * MIB, ADMIN_ENTRIES),  # DELETE_TOPICS
    21: RequestLimit(1 * MIB, DATA_ENTRIES),  # DELETE_RECORDS
    22: SMALL,  # INIT_PRODUCER_ID
    23: RequestLimit(1 * MIB, DATA_ENTRIES),  # OFFSET_FOR_LEADER_EPOCH
    32: RequestLimit(1 * MIB, DESCRIBE_CONFIGS_ENTRIES),  # DESCRIBE_CONFIGS
    35: RequestLimit(1 * MIB, ADMIN_ENTRIES),  # DESCRIBE_LOG_DIRS
    36: SMALL,  # SASL_AUTHENTICATE
    37: RequestLimit(1 * MIB, ADMIN_ENTRIES),  # CREATE_PARTITIONS
    43: RequestLimit(1 * MIB, ADMIN_ENTRIES),  # ELECT_LEADERS
    44: RequestLimit(1 * MIB, ADMIN_ENTRIES),  # INCREMENTAL_ALTER_CONFIGS
    45: RequestLimit(1 * MIB, ADMIN_ENTRIES),  # ALTER_PARTITION_REASSIGNMENTS
    46: RequestLimit(1 * MIB, ADMIN_ENTRIES),  # LIST_PARTITION_REASSIGNMENTS
    # The metadata quorum's own requests carry a few fields (the successors EndQuorumEpoch names are the
    # other voters); its log travels in FETCH and FETCH_SNAPSHOT answers, not requests.
    52: SMALL,  # VOTE
    53: SMALL,  # BEGIN_QUORUM_EPOCH
    54: SMALL,  # END_QUORUM_EPOCH
    55: SMALL,  # DESCRIBE_QUORUM
    56: _INTER_NODE,  # ALTER_PARTITION
    59: SMALL,  # FETCH_SNAPSHOT
    62: _INTER_NODE,  # BROKER_REGISTRATION
    63: _INTER_NODE,  # BROKER_HEARTBEAT
    67: SMALL,  # ALLOCATE_PRODUCER_IDS
}

#: An API neither table knows: a request that will be refused anyway, so no more than a small one. Every API
#: a listener serves has its entry (tests/network/test_msgpack_limits.py checks both tables are complete).
UNKNOWN = SMALL


def kafka_limit(api_key: int) -> RequestLimit:
    return KAFKA_LIMITS.get(api_key, UNKNOWN)


def msgpack_limit(api_key: int) -> RequestLimit:
    return MSGPACK_LIMITS.get(api_key, UNKNOWN)


def count_entries(value: Any, limit: int) -> int:
    """The array entries in an unpacked msgpack value (every list, nested ones included), counted until
    they pass `limit` (then a number above it is returned: the rest is not looked at)."""
    count = 0
    pending = [value]
    while pending:
        item = pending.pop()
        kind = type(item)
        if kind is list:
            count += len(item)
            if count > limit:
                return count
        elif kind is dict:
            item = item.values()
        else:
            continue
        for x in item:
            if type(x) is list or type(x) is dict:
                pending.append(x)
    return count
