"""The metric record's field names: one definition for the broker that writes records and the Spark job
that reads them. Plain strings, no pyspark, so a broker imports this module and nothing heavier; the
Spark schema built from these names is in metrics/schema.py, and docs/metrics.md is the prose version.
"""

from __future__ import annotations

# Record kinds.
KIND_PARTITION = "partition"
KIND_BROKER = "broker"

# Replica roles in a partition record.
ROLE_LEADER = "leader"
ROLE_FOLLOWER = "follower"
ROLE_OFFLINE = "offline"

# Fields common to both kinds.
KIND = "kind"
TS_MS = "ts_ms"
BROKER_ID = "broker_id"
BROKER_START_MS = "broker_start_ms"

# Partition record fields.
TOPIC = "topic"
PARTITION = "partition"
ROLE = "role"
LEADER_ID = "leader_id"
LEADER_EPOCH = "leader_epoch"
LOG_START_OFFSET = "log_start_offset"
LOG_END_OFFSET = "log_end_offset"
HIGH_WATERMARK = "high_watermark"
FETCH_OFFSET = "fetch_offset"
LAG_MESSAGES = "lag_messages"
LAG_MS = "lag_ms"
ISR_SIZE = "isr_size"
REPLICA_COUNT = "replica_count"
UNDER_REPLICATED = "under_replicated"
UNDER_MIN_ISR = "under_min_isr"
FOLLOWERS = "followers"
BYTES_IN = "BytesInPerSec"
BYTES_OUT = "BytesOutPerSec"
REPLICATION_BYTES_IN = "ReplicationBytesInPerSec"
REPLICATION_BYTES_OUT = "ReplicationBytesOutPerSec"
MESSAGES_IN = "MessagesInPerSec"
ISR_SHRINKS = "IsrShrinksPerSec"
ISR_EXPANDS = "IsrExpandsPerSec"

# Fields of one element of ``followers`` (BROKER_ID and LOG_END_OFFSET are shared names).
LAST_CAUGHT_UP_MS = "last_caught_up_ms"
IN_SYNC = "in_sync"
# The leader's view of a follower's lag (Kafka's leader-side replica state): leader LEO minus the follower's
# LEO as the leader last learned it, and how long since the follower was last caught up. A follower that
# is dead, paused or cut off reports nothing itself; its leader keeps reporting these.
# (LAG_MESSAGES, the follower's own view in a follower record, is the same name.)
TIME_SINCE_CAUGHT_UP_MS = "time_since_caught_up_ms"

# Broker record fields.
FETCH_PURGATORY_SIZE = "FetchPurgatorySize"
PRODUCE_PURGATORY_SIZE = "ProducePurgatorySize"
ACTIVE_CONNECTIONS = "ActiveConnections"
REQUESTS = "RequestsPerSec"
UNDER_REPLICATED_PARTITIONS = "UnderReplicatedPartitions"
MAX_LAG = "MaxLag"
METRICS_DROPPED = "MetricsDropped"
# How long a ready callback waited for the event loop over the interval (server_common/loop_lag.py), in
# ms: the largest wait and the mean of the probes (one every 50 ms). A broker whose loop is held this long
# answers nothing and sends no heartbeat meanwhile.
LOOP_LAG_MAX_MS = "LoopLagMaxMs"
LOOP_LAG_AVG_MS = "LoopLagAvgMs"
# The broker's copy of the metadata log (an observer of the controller quorum): the quorum's leader (the
# active controller; -1 when none is known) and epoch, the last record the broker applied, and how far that
# is behind what the quorum has committed, in records and in ms (since the broker first fell behind).
METADATA_LEADER_ID = "MetadataLeaderId"
METADATA_LEADER_EPOCH = "MetadataLeaderEpoch"
METADATA_OFFSET = "MetadataOffset"
METADATA_LAG_RECORDS = "MetadataLagRecords"
METADATA_LAG_MS = "MetadataLagMs"

# Running totals since broker_start_ms (Kafka meter counts); they restart from 0 with the broker.
PARTITION_COUNTERS: tuple[str, ...] = (
    BYTES_IN,
    BYTES_OUT,
    REPLICATION_BYTES_IN,
    REPLICATION_BYTES_OUT,
    MESSAGES_IN,
    ISR_SHRINKS,
    ISR_EXPANDS,
)


# Fault windows written by `minibroker chaos run` next to the broker files (not read as records): one JSON
# object per line, {"fault": "partition:isolate-leader", "target": 1, "start_ms": ..., "end_ms": ...}.
FAULTS_FILE = "faults.jsonl"
