"""The metric record contract: field names and the Spark schema the lag job reads with.

One JSON object per line; a line is either a partition record (``kind == "partition"``) or a broker
record (``kind == "broker"``). Both kinds are read with the single union schema ``RECORD_SCHEMA``: the
fields a kind does not carry come back as null. The job never infers a schema (inference scans the
data twice and guesses ``long`` for every int); docs/metrics.md is the prose version of this file.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

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

# Broker record fields.
FETCH_PURGATORY_SIZE = "FetchPurgatorySize"
PRODUCE_PURGATORY_SIZE = "ProducePurgatorySize"
ACTIVE_CONNECTIONS = "ActiveConnections"
REQUESTS = "RequestsPerSec"
UNDER_REPLICATED_PARTITIONS = "UnderReplicatedPartitions"
MAX_LAG = "MaxLag"
METRICS_DROPPED = "MetricsDropped"

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

FOLLOWER_SCHEMA = StructType(
    [
        StructField(BROKER_ID, IntegerType()),
        StructField(LOG_END_OFFSET, LongType()),
        StructField(LAST_CAUGHT_UP_MS, LongType()),
        StructField(IN_SYNC, BooleanType()),
    ]
)

PARTITION_RECORD_SCHEMA = StructType(
    [
        StructField(KIND, StringType()),
        StructField(TS_MS, LongType()),
        StructField(BROKER_ID, IntegerType()),
        StructField(BROKER_START_MS, LongType()),
        StructField(TOPIC, StringType()),
        StructField(PARTITION, IntegerType()),
        StructField(ROLE, StringType()),
        StructField(LEADER_ID, IntegerType()),
        StructField(LEADER_EPOCH, IntegerType()),
        StructField(LOG_START_OFFSET, LongType()),
        StructField(LOG_END_OFFSET, LongType()),
        StructField(HIGH_WATERMARK, LongType()),
        StructField(FETCH_OFFSET, LongType()),
        StructField(LAG_MESSAGES, LongType()),
        StructField(LAG_MS, LongType()),
        StructField(ISR_SIZE, IntegerType()),
        StructField(REPLICA_COUNT, IntegerType()),
        StructField(UNDER_REPLICATED, BooleanType()),
        StructField(UNDER_MIN_ISR, BooleanType()),
        StructField(FOLLOWERS, ArrayType(FOLLOWER_SCHEMA)),
        *(StructField(name, LongType()) for name in PARTITION_COUNTERS),
    ]
)

BROKER_ONLY_FIELDS = StructType(
    [
        StructField(FETCH_PURGATORY_SIZE, IntegerType()),
        StructField(PRODUCE_PURGATORY_SIZE, IntegerType()),
        StructField(ACTIVE_CONNECTIONS, IntegerType()),
        StructField(REQUESTS, LongType()),
        StructField(UNDER_REPLICATED_PARTITIONS, IntegerType()),
        StructField(MAX_LAG, LongType()),
        StructField(METRICS_DROPPED, LongType()),
    ]
)

# The schema every metrics file is read with: partition fields, then the broker-only fields.
RECORD_SCHEMA = StructType(PARTITION_RECORD_SCHEMA.fields + BROKER_ONLY_FIELDS.fields)

# What the lag job reads: RECORD_SCHEMA without the fields no table uses (log_start_offset,
# replica_count, a follower's log_end_offset / last_caught_up_ms, the broker-only gauges). The JSON
# parser skips a field the schema does not name, so the job converts and carries only these. The
# broker records still count (records, time span, broker runs): they keep kind, ts_ms, broker_id
# and broker_start_ms.
LAG_JOB_FOLLOWER_SCHEMA = StructType([FOLLOWER_SCHEMA[BROKER_ID], FOLLOWER_SCHEMA[IN_SYNC]])
_LAG_JOB_UNUSED = frozenset({LOG_START_OFFSET, REPLICA_COUNT})
LAG_JOB_SCHEMA = StructType(
    [
        StructField(FOLLOWERS, ArrayType(LAG_JOB_FOLLOWER_SCHEMA)) if f.name == FOLLOWERS else f
        for f in PARTITION_RECORD_SCHEMA.fields
        if f.name not in _LAG_JOB_UNUSED
    ]
)

# Output tables, one Parquet folder each under the dashboard's out dir.
TABLE_FOLLOWER_LAG = "follower_lag"
TABLE_LAG_WINDOWS = "lag_windows"
TABLE_UNDER_REPLICATED = "under_replicated"
TABLE_ISR_CHANGES = "isr_changes"
TABLE_BYTE_RATES = "byte_rates"
TABLE_FOLLOWER_STATUS = "follower_status"
TABLE_LEADER_TIMELINE = "leader_timeline"
TABLES: tuple[str, ...] = (
    TABLE_FOLLOWER_LAG,
    TABLE_LAG_WINDOWS,
    TABLE_UNDER_REPLICATED,
    TABLE_ISR_CHANGES,
    TABLE_BYTE_RATES,
    TABLE_FOLLOWER_STATUS,
    TABLE_LEADER_TIMELINE,
)

# Burrow-style follower statuses, most severe first (the order the status rule applies them in).
STATUS_STOP = "STOP"
STATUS_REWIND = "REWIND"
STATUS_STALL = "STALL"
STATUS_TRUNCATE = "TRUNCATE"
STATUS_WARN = "WARN"
STATUS_OK = "OK"
STATUSES: tuple[str, ...] = (
    STATUS_STOP,
    STATUS_REWIND,
    STATUS_STALL,
    STATUS_TRUNCATE,
    STATUS_WARN,
    STATUS_OK,
)
