"""What the lag app reads and writes: the record fields it reads, its output tables and the follower
statuses. The record contract itself (field names, the Spark schema of a record) is the brokers' side's,
in metrics/fields.py and metrics/schema.py; this module re-exports it, so the lag app's code reads every
name from one place.
"""

from __future__ import annotations

from pyspark.sql.types import ArrayType, StructField, StructType

from metrics.fields import *  # noqa: F403 - the names are part of this module's contract
from metrics.fields import (
    BROKER_ID,
    FOLLOWERS,
    IN_SYNC,
    LAG_MESSAGES,
    LOG_START_OFFSET,
    LOOP_LAG_AVG_MS,
    LOOP_LAG_MAX_MS,
    REPLICA_COUNT,
    TIME_SINCE_CAUGHT_UP_MS,
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
_LAG_JOB_UNUSED = frozenset({LOG_START_OFFSET, REPLICA_COUNT})
LAG_JOB_SCHEMA = StructType(
    [
        StructField(FOLLOWERS, ArrayType(LAG_JOB_FOLLOWER_SCHEMA)) if f.name == FOLLOWERS else f
        for f in PARTITION_RECORD_SCHEMA.fields
        if f.name not in _LAG_JOB_UNUSED
    ]
    # The broker gauge the health row draws (``broker_health``).
    + [BROKER_ONLY_FIELDS[LOOP_LAG_MAX_MS], BROKER_ONLY_FIELDS[LOOP_LAG_AVG_MS]]
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
TABLE_BROKER_HEALTH = "broker_health"  # each broker's event-loop lag over time
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
