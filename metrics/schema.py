"""The metric record contract with its types: the schema a reader (the lag app, any Spark job) reads the
records a broker writes with, built from the names in metrics/fields.py.

One JSON object per line; a line is either a partition record (``kind == "partition"``) or a broker
record (``kind == "broker"``). Both kinds are read with the single union schema ``RECORD_SCHEMA``: the
fields a kind does not carry come back as null. A reader never infers a schema (inference scans the
data twice and guesses ``long`` for every int); docs/metrics.md is the prose version of this file.
Brokers import metrics/fields.py only: the types are Spark's, and a broker runs without pyspark.
"""

from __future__ import annotations

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DoubleType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
)

from metrics.fields import *  # noqa: F403 - the names are part of this module's contract
from metrics.fields import (
    ACTIVE_CONNECTIONS,
    BROKER_ID,
    BROKER_START_MS,
    FETCH_OFFSET,
    FETCH_PURGATORY_SIZE,
    FOLLOWERS,
    HIGH_WATERMARK,
    IN_SYNC,
    ISR_SIZE,
    KIND,
    LAG_MESSAGES,
    LAG_MS,
    LAST_CAUGHT_UP_MS,
    LEADER_EPOCH,
    LEADER_ID,
    LOG_END_OFFSET,
    LOG_START_OFFSET,
    LOOP_LAG_AVG_MS,
    LOOP_LAG_MAX_MS,
    MAX_LAG,
    METADATA_LAG_MS,
    METADATA_LAG_RECORDS,
    METADATA_LEADER_EPOCH,
    METADATA_LEADER_ID,
    METADATA_OFFSET,
    METRICS_DROPPED,
    PARTITION,
    PARTITION_COUNTERS,
    PRODUCE_PURGATORY_SIZE,
    REPLICA_COUNT,
    REQUESTS,
    ROLE,
    TIME_SINCE_CAUGHT_UP_MS,
    TOPIC,
    TS_MS,
    UNDER_MIN_ISR,
    UNDER_REPLICATED,
    UNDER_REPLICATED_PARTITIONS,
)

FOLLOWER_SCHEMA = StructType(
    [
        StructField(BROKER_ID, IntegerType()),
        StructField(LOG_END_OFFSET, LongType()),
        StructField(LAST_CAUGHT_UP_MS, LongType()),
        StructField(IN_SYNC, BooleanType()),
        StructField(LAG_MESSAGES, LongType()),
        StructField(TIME_SINCE_CAUGHT_UP_MS, LongType()),
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
        StructField(LOOP_LAG_MAX_MS, DoubleType()),
        StructField(LOOP_LAG_AVG_MS, DoubleType()),
        StructField(METADATA_LEADER_ID, IntegerType()),
        StructField(METADATA_LEADER_EPOCH, IntegerType()),
        StructField(METADATA_OFFSET, LongType()),
        StructField(METADATA_LAG_RECORDS, LongType()),
        StructField(METADATA_LAG_MS, LongType()),
    ]
)

# The schema every metrics file is read with: partition fields, then the broker-only fields.
RECORD_SCHEMA = StructType(PARTITION_RECORD_SCHEMA.fields + BROKER_ONLY_FIELDS.fields)

# A record's identity: a duplicate (MQTT QoS 1 may deliver a message twice) has the same key.
DEDUP_KEY: tuple[str, ...] = (KIND, BROKER_ID, TS_MS, TOPIC, PARTITION)
