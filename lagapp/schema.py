"""What the lag app reads and writes: the record fields it reads, its output tables and the follower
statuses. The record contract itself (field names, the Spark schema of a record) is the brokers' side's,
in metrics/fields.py and metrics/schema.py; this module re-exports it, so the lag app's code reads every
name from one place.
"""

from __future__ import annotations

import pyarrow as pa
from pyspark.sql.types import ArrayType, StructField, StructType

from metrics.fields import *  # noqa: F403 - the names are part of this module's contract
from metrics.fields import (
    BROKER_ID,
    BROKER_START_MS,
    FETCH_OFFSET,
    FOLLOWERS,
    HIGH_WATERMARK,
    IN_SYNC,
    LAG_MESSAGES,
    LAG_MS,
    LEADER_EPOCH,
    LEADER_ID,
    LOG_END_OFFSET,
    LOG_START_OFFSET,
    LOOP_LAG_AVG_MS,
    LOOP_LAG_MAX_MS,
    METADATA_LAG_MS,
    METADATA_LAG_RECORDS,
    METADATA_LEADER_EPOCH,
    METADATA_LEADER_ID,
    PARTITION,
    REPLICA_COUNT,
    TIME_SINCE_CAUGHT_UP_MS,
    TOPIC,
    TS_MS,
)
from metrics.schema import *  # noqa: F403
from metrics.schema import BROKER_ONLY_FIELDS, FOLLOWER_SCHEMA, PARTITION_RECORD_SCHEMA

# What the lag job reads: RECORD_SCHEMA without the fields no table uses (log_start_offset,
# replica_count, a follower's log_end_offset / last_caught_up_ms, the broker-only gauges). The JSON
# parser skips a field the schema does not name, so the job converts and carries only these. The
# broker records still count (records, time span, broker runs): they keep kind, ts_ms, broker_id
# and broker_start_ms.
LAG_JOB_FOLLOWER_SCHEMA = StructType(
    [
        FOLLOWER_SCHEMA[BROKER_ID],
        FOLLOWER_SCHEMA[IN_SYNC],
        FOLLOWER_SCHEMA[LAG_MESSAGES],
        FOLLOWER_SCHEMA[TIME_SINCE_CAUGHT_UP_MS],
    ]
)
# A broker's view of the metadata quorum: the record field → its ``broker_health`` column.
METADATA_COLUMNS: dict[str, str] = {
    METADATA_LEADER_ID: "metadata_leader_id",
    METADATA_LEADER_EPOCH: "metadata_leader_epoch",
    METADATA_LAG_RECORDS: "metadata_lag_records",
    METADATA_LAG_MS: "metadata_lag_ms",
}
_LAG_JOB_UNUSED = frozenset({LOG_START_OFFSET, REPLICA_COUNT})
LAG_JOB_SCHEMA = StructType(
    [
        StructField(FOLLOWERS, ArrayType(LAG_JOB_FOLLOWER_SCHEMA)) if f.name == FOLLOWERS else f
        for f in PARTITION_RECORD_SCHEMA.fields
        if f.name not in _LAG_JOB_UNUSED
    ]
    # The broker gauges the health row draws (``broker_health``): the event-loop lag, and the metadata
    # quorum as the broker follows it (its leader and epoch, how far the broker is behind it).
    + [BROKER_ONLY_FIELDS[name] for name in (LOOP_LAG_MAX_MS, LOOP_LAG_AVG_MS, *METADATA_COLUMNS)]
)
# Under the dashboard's out dir, what --follow keeps between micro-batches (checkpoint, records, state).
STREAM_DIR = "_stream"

# Output tables, one Parquet folder each under the dashboard's out dir.
TABLE_FOLLOWER_LAG = "follower_lag"
TABLE_REPLICA_LAG = "replica_lag"  # the leader's view of each follower's lag
TABLE_LAG_WINDOWS = "lag_windows"
TABLE_UNDER_REPLICATED = "under_replicated"
TABLE_ISR_CHANGES = "isr_changes"
TABLE_BYTE_RATES = "byte_rates"
TABLE_FOLLOWER_STATUS = "follower_status"
TABLE_LEADER_TIMELINE = "leader_timeline"
TABLE_CLUSTER_HEALTH = "cluster_health"  # partition counts over time: under-replicated, under min ISR, offline
TABLE_BROKER_HEALTH = "broker_health"  # each broker's event-loop lag and metadata quorum view over time
TABLES: tuple[str, ...] = (
    TABLE_FOLLOWER_LAG,
    TABLE_REPLICA_LAG,
    TABLE_LAG_WINDOWS,
    TABLE_UNDER_REPLICATED,
    TABLE_ISR_CHANGES,
    TABLE_BYTE_RATES,
    TABLE_FOLLOWER_STATUS,
    TABLE_LEADER_TIMELINE,
    TABLE_CLUSTER_HEALTH,
    TABLE_BROKER_HEALTH,
)

_I32, _I64, _F64, _BOOL, _STR = pa.int32(), pa.int64(), pa.float64(), pa.bool_(), pa.string()


def _columns(*columns: tuple[str, pa.DataType]) -> pa.Schema:
    return pa.schema([pa.field(name, kind) for name, kind in columns])


# The first columns of both lag series: a follower's sample, by the follower or by its leader.
_FOLLOWER_SAMPLE = (
    (TOPIC, _STR),
    (PARTITION, _I32),
    ("follower_id", _I32),
    (TS_MS, _I64),
    (LEADER_ID, _I32),
    (LEADER_EPOCH, _I32),
)


# Every table's columns and types, as written (Parquet) and read back (the page, --follow, Spark): the
# types the records' fields have (``LAG_JOB_SCHEMA``), longs for counts, sums and times, doubles for rates.
TABLE_SCHEMAS: dict[str, pa.Schema] = {
    TABLE_FOLLOWER_LAG: _columns(
        *_FOLLOWER_SAMPLE,
        (FETCH_OFFSET, _I64),
        (LAG_MESSAGES, _I64),
        (LAG_MS, _I64),
        (LOG_END_OFFSET, _I64),
        (HIGH_WATERMARK, _I64),
    ),
    TABLE_REPLICA_LAG: _columns(
        *_FOLLOWER_SAMPLE,
        (LAG_MESSAGES, _I64),
        (TIME_SINCE_CAUGHT_UP_MS, _I64),
        (IN_SYNC, _BOOL),
    ),
    TABLE_LAG_WINDOWS: _columns(
        (TOPIC, _STR),
        (PARTITION, _I32),
        ("follower_id", _I32),
        ("window_start_ms", _I64),
        ("window_end_ms", _I64),
        ("samples", _I64),
        ("lag_messages_p50", _I64),
        ("lag_messages_p99", _I64),
        ("lag_messages_max", _I64),
        ("lag_ms_p50", _I64),
        ("lag_ms_p99", _I64),
        ("lag_ms_max", _I64),
    ),
    TABLE_UNDER_REPLICATED: _columns(
        (TOPIC, _STR),
        (PARTITION, _I32),
        ("leader_samples", _I64),
        ("first_ts_ms", _I64),
        ("last_ts_ms", _I64),
        ("observed_ms", _I64),
        ("under_replicated_ms", _I64),
        ("under_min_isr_ms", _I64),
        ("isr_size_min", _I32),
        ("isr_shrinks", _I64),
        ("isr_expands", _I64),
    ),
    TABLE_ISR_CHANGES: _columns(
        (TOPIC, _STR),
        (PARTITION, _I32),
        ("follower_id", _I32),
        ("samples", _I64),
        ("shrinks", _I64),
        ("expands", _I64),
        ("out_of_sync_ms", _I64),
        ("observed_ms", _I64),
        ("in_sync_last", _BOOL),
    ),
    TABLE_BYTE_RATES: _columns(
        (BROKER_ID, _I32),
        (TOPIC, _STR),
        (PARTITION, _I32),
        ("window_start_ms", _I64),
        ("window_end_ms", _I64),
        ("interval_ms", _I64),
        ("client_in_bytes", _I64),
        ("client_out_bytes", _I64),
        ("replication_in_bytes", _I64),
        ("replication_out_bytes", _I64),
        ("messages_in", _I64),
        ("client_in_bytes_per_s", _F64),
        ("client_out_bytes_per_s", _F64),
        ("replication_in_bytes_per_s", _F64),
        ("replication_out_bytes_per_s", _F64),
        ("messages_in_per_s", _F64),
    ),
    TABLE_FOLLOWER_STATUS: _columns(
        (TOPIC, _STR),
        (PARTITION, _I32),
        ("follower_id", _I32),
        ("status", _STR),
        ("samples", _I64),
        ("window_start_ms", _I64),
        ("last_ts_ms", _I64),
        ("lag_messages_last", _I64),
        ("lag_ms_last", _I64),
        ("fetch_offset_last", _I64),
        ("leader_id_last", _I32),
        ("leader_epoch_last", _I32),
        ("truncations", _I64),
        ("rewinds", _I64),
    ),
    TABLE_LEADER_TIMELINE: _columns(
        (TOPIC, _STR),
        (PARTITION, _I32),
        (LEADER_EPOCH, _I32),
        (LEADER_ID, _I32),
        ("first_seen_ms", _I64),
        ("last_seen_ms", _I64),
        ("reports", _I64),
        ("confirmed", _BOOL),
        ("previous_leader_id", _I32),
        ("previous_leader_epoch", _I32),
    ),
    TABLE_CLUSTER_HEALTH: _columns(
        ("bucket_start_ms", _I64),
        ("partitions", _I64),
        ("led_partitions", _I64),
        ("under_replicated_partitions", _I64),
        ("under_min_isr_partitions", _I64),
        ("offline_partitions", _I64),
        ("leaders", pa.map_(_I32, _I64)),  # broker_id → partitions it led in the bucket
    ),
    TABLE_BROKER_HEALTH: _columns(
        (BROKER_ID, _I32),
        (BROKER_START_MS, _I64),
        (TS_MS, _I64),
        ("loop_lag_max_ms", _F64),
        ("loop_lag_avg_ms", _F64),
        # the broker's view of the metadata quorum (null in a record without it: an older broker, or one
        # that follows no quorum); the quorum leader is -1 while the broker knows of none
        ("metadata_leader_id", _I32),
        ("metadata_leader_epoch", _I32),
        ("metadata_lag_records", _I64),
        ("metadata_lag_ms", _I64),
    ),
}

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
