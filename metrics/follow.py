"""``--follow``, incremental: each micro-batch is aggregated and merged into state carried between batches.

How this works: every per-row fact of the lag job looks backwards (``lag_job``'s module docstring), so a
row's facts are final once every earlier row has arrived. The stream drops a record older than its
watermark, so after a micro-batch every record older than (newest ts_ms − watermark) has arrived.
A round therefore:

1. takes the new records and the **tail** kept from the last round, and computes the facts once
   (``replica_samples``, ``leader_samples``);
2. moves the **settled horizon** S to (newest − watermark − ``gap_max_ms``), aligned down to the windows
   and health buckets, never backwards. A row before S is final, and so is every window, bucket and
   leader-sample duration before it;
3. row tables (``follower_lag``, ``replica_lag``) and windowed tables (``lag_windows``, ``byte_rates``,
   ``cluster_health``): the rows between the old and the new S are appended for good (part files named
   ``s<from>-<to>-…``); the rows after S are replaced every round (``r<batch id>-…``);
4. per-key tables (``under_replicated``, ``isr_changes``, ``leader_timeline``, the broker runs, each
   partition's first record): the partials of the rows between the old and the new S are merged into
   the settled partials; the table is the merge of those with the partials of the rows after S. The
   per-key tables and ``follower_status`` (each follower's last window, from the tail) are small and
   rewritten whole;
5. keeps as the new tail the rows a later round needs: every row from S − ``gap_max_ms`` on (a leader
   sample stands for at most that long into a later bucket), the newest row before that per replica,
   per partition's leader sequence and per follower in the leaders' ISR lists (the previous row of
   each ordered sequence), and each follower's last window of samples and the two before it (its
   status). The tail spans about a minute of data, whatever the history, so a round's cost does not
   grow with it.

Exactly-once: ``state.json`` (replaced in one rename, after everything else is written) names the
last merged batch, S and the folder holding the tail and the settled partials. A batch at or below
that id is a rerun after a restart and is not merged again. On start, files a round wrote without
reaching its commit are deleted: settled parts beyond S and replaced parts of another batch. A state
computed with another ``LagJobConfig`` is rebuilt from the stored records.

Folding: each round that moves S adds one settled part per timed table, so after each commit
``FOLD_FAN_IN`` consecutive parts of one level are folded into one part of the next level (level 0 is a
round's part; ``s<from>-<to>-f<level>-…``). A table of n rounds then has at most ``FOLD_FAN_IN`` parts per
level, about log(n) levels, and each row is rewritten once per level. A fold writes its output under a
hidden name (``.fold-…``), deletes its inputs, then renames the output into place; a start finds a
hidden output left by a crash and finishes that fold, so a row is never lost nor counted twice.
"""

from __future__ import annotations

import functools
import json
import math
import os
import shutil
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StructType
from pyspark.storagelevel import StorageLevel

from metrics import dashboard, lag_job
from metrics import schema as s
from metrics.lag_job import LagJobConfig

STATE_FILE = "state.json"
TAIL = "tail"
PARTIAL_BROKER_RUNS = "broker_runs"
PARTIAL_FIRST_SEEN = "first_seen"
MERGED_BROKER_RUNS = "broker_runs_merged"
SETTLED_PREFIX = "s"  # s<from>-<to>-[f<level>-]<part file>: the rows of [from, to), settled
RECENT_PREFIX = "r"  # r<batch id>-<part file>: the rows after the settled horizon, replaced every round
PART_FILE = "part-00000.parquet"
FOLDING_PREFIX = ".fold-"  # a folded part written, its inputs not all deleted yet (hidden from readers)
#: Settled parts folded at a time: FOLD_FAN_IN consecutive parts of one level become one part of the next.
FOLD_FAN_IN = 8

# Tables written in time order: name → the column that places a row in time.
TIMED_TABLES: dict[str, str] = {
    s.TABLE_FOLLOWER_LAG: s.TS_MS,
    s.TABLE_REPLICA_LAG: s.TS_MS,
    s.TABLE_LAG_WINDOWS: lag_job.WINDOW_START_MS,
    s.TABLE_BYTE_RATES: lag_job.WINDOW_START_MS,
    s.TABLE_CLUSTER_HEALTH: "bucket_start_ms",
    s.TABLE_BROKER_HEALTH: s.TS_MS,
}
# Partials merged into the settled state: name → (key, merge spec).
PARTIALS: dict[str, tuple[tuple[str, ...], dict[str, lag_job.AggSpec]]] = {
    s.TABLE_UNDER_REPLICATED: (lag_job.UNDER_REPLICATED_KEY, lag_job.UNDER_REPLICATED_MERGE),
    s.TABLE_ISR_CHANGES: (lag_job.ISR_CHANGES_KEY, lag_job.ISR_CHANGES_MERGE),
    s.TABLE_LEADER_TIMELINE: (lag_job.LEADER_TIMELINE_KEY, lag_job.LEADER_TIMELINE_MERGE),
    PARTIAL_BROKER_RUNS: (lag_job.BROKER_RUNS_KEY, lag_job.BROKER_RUNS_MERGE),
    PARTIAL_FIRST_SEEN: (lag_job.FIRST_SEEN_KEY, lag_job.FIRST_SEEN_MERGE),
}
RECORD_COLUMNS: tuple[str, ...] = tuple(s.LAG_JOB_SCHEMA.fieldNames())


@dataclass(frozen=True)
class FollowState:
    """What ``state.json`` holds: the last merged batch and where its state is."""

    batch_id: int
    settled_ms: int  # every table row before it is final and written
    newest_ms: int  # the newest ts_ms merged
    version: str  # the folder under the state dir holding the tail and the settled partials
    config: dict[str, int | None]  # the LagJobConfig the state was computed with


@dataclass
class Round:
    """What a merged round produced: the tables as written, the broker runs and the record count."""

    tables: dict[str, DataFrame]
    runs: list[dashboard.BrokerRun]
    records: int
    settled_ms: int
    newest_ms: int


def as_records(df: DataFrame) -> DataFrame:
    """``df``'s records in the columns and types of ``schema.LAG_JOB_SCHEMA`` (a follower entry keeps the
    fields the job reads; a field a record or an entry lacks is null), so records read with ``RECORD_SCHEMA``
    and the stored tail union."""
    columns = []
    present = set(df.columns)
    for field in s.LAG_JOB_SCHEMA.fields:
        given = df.schema[s.FOLLOWERS].dataType if field.name == s.FOLLOWERS and field.name in present else None
        if field.name not in present:
            columns.append(F.lit(None).cast(field.dataType).alias(field.name))
        elif isinstance(given, ArrayType) and isinstance(given.elementType, StructType) and given != field.dataType:
            entry = functools.partial(_follower_entry, frozenset(given.elementType.fieldNames()))
            columns.append(F.transform(s.FOLLOWERS, entry).alias(s.FOLLOWERS))
        else:
            columns.append(F.col(field.name).cast(field.dataType).alias(field.name))
    return df.select(*columns)


def _follower_entry(has: frozenset[str], entry: Column) -> Column:
    return F.struct(
        *(
            (entry[x.name] if x.name in has else F.lit(None)).cast(x.dataType).alias(x.name)
            for x in s.LAG_JOB_FOLLOWER_SCHEMA.fields
        )
    )


def settle_unit_ms(config: LagJobConfig) -> int:
    """The settled horizon moves in steps of whole windows and whole health buckets."""
    return math.lcm(config.window_ms, config.health_bucket_ms)


def settled_horizon(newest_ms: int, watermark_ms: int, config: LagJobConfig) -> int:
    """Before this time every row has arrived and every fact of it is final (see the module docstring)."""
    unit = settle_unit_ms(config)
    return (newest_ms - watermark_ms - config.gap_max_ms) // unit * unit


def tail_of(rows: DataFrame, cut_ms: int, config: LagJobConfig) -> DataFrame:
    """The rows of ``rows`` (record columns) a later round needs when nothing before ``cut_ms`` can change:
    every row from ``cut_ms`` on; before it, the partition records that are the newest of each replica
    (and its newest with a role other than offline, which ``role_last`` reads), of each partition's
    leader sequence and of each follower in the leaders' ISR lists (the previous row of each ordered
    sequence the tables read), and each follower's samples in its last window plus the two before them
    (``follower_status`` reads those). A broker record before the cut is needed by nothing.

    The aggregations find row identities (``REPLICA_KEY`` and ts_ms) over narrow columns, then one
    semi-join picks the rows: no sort of the tail, no aggregation carrying whole rows."""
    ts = F.col(s.TS_MS)
    key = list(lag_job.REPLICA_KEY)
    ident = [*key, s.TS_MS]
    before = rows.where((ts < cut_ms) & (F.col(s.KIND) == s.KIND_PARTITION))
    leaders = before.where(F.col(s.ROLE) == s.ROLE_LEADER)
    is_follower = lag_job.is_follower_sample()
    # Each replica's newest record, and (``role_last`` skips offline records) its newest with a role: one
    # grouping gives both.
    newest = before.groupBy(*key).agg(
        F.max(s.TS_MS).alias("_newest"),
        F.max(F.when(F.col(s.ROLE) != s.ROLE_OFFLINE, ts)).alias("_newest_with_role"),
    )
    newest_of_replica = newest.select(*key, F.col("_newest").alias(s.TS_MS))
    newest_with_role = newest.where(F.col("_newest_with_role").isNotNull()).select(
        *key, F.col("_newest_with_role").alias(s.TS_MS)
    )
    # ``leader_samples`` orders a partition's leader rows by (ts_ms, broker_id).
    newest_leader = (
        leaders.groupBy(s.TOPIC, s.PARTITION)
        .agg(F.max(F.struct(s.TS_MS, s.BROKER_ID)).alias("_n"))
        .select(s.TOPIC, s.PARTITION, f"_n.{s.BROKER_ID}", F.lit(s.KIND_PARTITION).alias(s.KIND), f"_n.{s.TS_MS}")
    )
    newest_listing = (
        leaders.where(F.col(s.FOLLOWERS).isNotNull())
        .select(s.TOPIC, s.PARTITION, s.BROKER_ID, s.TS_MS, F.explode(f"{s.FOLLOWERS}.{s.BROKER_ID}").alias("_f"))
        .groupBy(s.TOPIC, s.PARTITION, "_f")
        .agg(F.max_by(s.BROKER_ID, s.TS_MS).alias(s.BROKER_ID), F.max(s.TS_MS).alias(s.TS_MS))
        .select(s.TOPIC, s.PARTITION, s.BROKER_ID, F.lit(s.KIND_PARTITION).alias(s.KIND), s.TS_MS)
    )
    # Each follower's samples after (its newest − window), and the two newest before that (wherever they
    # are: those from the cut on are kept anyway).
    followers = rows.where(is_follower).select(*ident)
    last = followers.groupBy(*key).agg(F.max(s.TS_MS).alias("_last"))
    in_window = ts > F.col("_last") - config.window_ms
    marked = followers.join(F.broadcast(last), key)
    last_window = marked.where(in_window).select(*ident)
    two_before = (
        marked.where(~in_window)
        .groupBy(*key)
        .agg(F.explode(F.slice(F.sort_array(F.collect_list(s.TS_MS), asc=False), 1, 2)).alias(s.TS_MS))
    )
    wanted = (
        newest_of_replica.select(*ident)
        .unionByName(newest_with_role.select(*ident))
        .unionByName(newest_leader.select(*ident))
        .unionByName(newest_listing.select(*ident))
        .unionByName(last_window)
        .unionByName(two_before.select(*ident))
        .where(ts < cut_ms)
        .distinct()
    )
    context = before.join(F.broadcast(wanted), ident, "left_semi")
    return rows.where(ts >= cut_ms).unionByName(context)


class FollowJob:
    """The incremental lag job of ``--follow``: ``merge`` one micro-batch at a time (module docstring)."""

    def __init__(self, out_dir: Path, config: LagJobConfig, watermark_ms: int, fold_fan_in: int = FOLD_FAN_IN) -> None:
        if fold_fan_in < 2:
            raise ValueError(f"fold_fan_in must be at least 2, got {fold_fan_in}")
        self.out_dir = out_dir
        self.config = config
        self.watermark_ms = watermark_ms
        self.fold_fan_in = fold_fan_in
        self.state_dir = out_dir / s.STREAM_DIR / "state"
        self.staging = out_dir / s.STREAM_DIR / "staging"
        self.state = self._load()
        self._recover()

    # ---- state on disk ----

    def _config_dict(self) -> dict[str, int | None]:
        return {**asdict(self.config), "watermark_ms": self.watermark_ms}

    def _load(self) -> FollowState | None:
        try:
            raw = json.loads((self.state_dir / STATE_FILE).read_text(encoding="utf-8"))
            state = FollowState(**raw)
        except (FileNotFoundError, ValueError, TypeError):
            return None
        if state.config != self._config_dict() or not (self.state_dir / state.version).is_dir():
            return None  # computed another way, or half gone: rebuilt from the stored records
        return state

    @property
    def needs_rebuild(self) -> bool:
        """True when no state can be carried on: the next merge must be given every stored record."""
        return self.state is None

    @property
    def settled_ms(self) -> int | None:
        """Rows before this time are final: a record this old arriving now is late and must be dropped."""
        return self.state.settled_ms if self.state is not None else None

    def _recover(self) -> None:
        """Delete what a round wrote without reaching its commit (or everything, without a state)."""
        shutil.rmtree(self.staging, ignore_errors=True)
        if self.state_dir.is_dir():
            for version in self.state_dir.iterdir():
                if version.is_dir() and (self.state is None or version.name != self.state.version):
                    shutil.rmtree(version, ignore_errors=True)
        for name in TIMED_TABLES:
            folder = self.out_dir / name
            if not folder.is_dir():
                continue
            if self.state is not None:
                for hidden in folder.glob(f"{FOLDING_PREFIX}*"):
                    finish_fold(folder, hidden)
            for path in folder.iterdir():
                if not self._committed(path.name):
                    if path.is_dir():
                        shutil.rmtree(path, ignore_errors=True)
                    else:
                        path.unlink(missing_ok=True)

    def _committed(self, name: str) -> bool:
        state = self.state
        if state is None:
            return False
        if name.startswith(RECENT_PREFIX):
            return name.startswith(f"{RECENT_PREFIX}{state.batch_id}-")
        settled = parse_settled_part(name)
        return settled is not None and settled[1] <= state.settled_ms

    def _commit(self, state: FollowState) -> None:
        tmp = self.state_dir / f"{STATE_FILE}.tmp"
        tmp.write_text(json.dumps(asdict(state), sort_keys=True), encoding="utf-8")
        os.replace(tmp, self.state_dir / STATE_FILE)
        old, self.state = self.state, state
        if old is not None and old.version != state.version:
            shutil.rmtree(self.state_dir / old.version, ignore_errors=True)
        for name in TIMED_TABLES:
            folder = self.out_dir / name
            for path in folder.iterdir():
                if path.name.startswith(RECENT_PREFIX) and not self._committed(path.name):
                    path.unlink(missing_ok=True)
            fold_settled(folder, self.fold_fan_in)

    # ---- one round ----

    def merge(self, batch: DataFrame, batch_id: int, on_step: Callable[[str], None] = lambda _step: None) -> Round:
        """Merge ``batch`` (record columns, late rows already dropped) as micro-batch ``batch_id`` and write
        every table. A batch already merged (a rerun after a restart) is not merged again: the tables as
        they are come back. ``on_step`` lets a test stop a round between its writes."""
        spark = batch.sparkSession
        if self.state is not None and batch_id <= self.state.batch_id:
            return self._as_written(spark)
        prev = self.state
        if prev is None:
            self._recover()  # a rebuild: the tables' folders may hold another run's files
        config = self.config
        new_rows = as_records(batch)
        if prev is not None:
            rows = spark.read.schema(s.LAG_JOB_SCHEMA).parquet(str(self.state_dir / prev.version / TAIL))
            rows = rows.select(*RECORD_COLUMNS).unionByName(new_rows)
        else:
            rows = new_rows
        cached: list[DataFrame] = []

        def keep(df: DataFrame) -> DataFrame:
            cached.append(df.persist(StorageLevel.MEMORY_AND_DISK))
            return df

        try:
            rows = keep(rows)
            newest_row = rows.agg(F.max(s.TS_MS)).first()
            newest = newest_row[0] if newest_row is not None else None
            if newest is None:
                return self._as_written(spark)
            newest = max(newest, prev.newest_ms) if prev is not None else newest
            since = prev.settled_ms if prev is not None else None
            horizon = settled_horizon(newest, self.watermark_ms, config)
            until = max(horizon, since) if since is not None else horizon

            samples = keep(lag_job.replica_samples(rows))
            parts = lag_job.partition_records(samples)
            leaders = keep(lag_job.leader_samples(parts))

            def partial(name: str, lo: int | None, hi: int | None) -> DataFrame:
                if name == s.TABLE_UNDER_REPLICATED:
                    return lag_job.under_replicated_partial(leaders, config, lo, hi)
                if name == s.TABLE_ISR_CHANGES:
                    return lag_job.isr_changes_partial(parts, config, lo, hi)
                if name == s.TABLE_LEADER_TIMELINE:
                    return lag_job.leader_timeline_partial(parts, lo, hi)
                if name == PARTIAL_BROKER_RUNS:
                    return lag_job.broker_runs_partial(samples, lo, hi)
                return lag_job.first_seen(lag_job.in_range(parts, lo, hi))

            settled: dict[str, DataFrame] = {}
            merged: dict[str, DataFrame] = {}
            for name, (key, spec) in PARTIALS.items():
                added = partial(name, since, until)
                if prev is not None:
                    old = spark.read.parquet(str(self.state_dir / prev.version / name))
                    added = lag_job.merge_partials(old.unionByName(added), key, spec)
                settled[name] = keep(added)
                merged[name] = keep(
                    lag_job.merge_partials(settled[name].unionByName(partial(name, until, None)), key, spec)
                )

            lag = lag_job.follower_lag(parts)
            isr = lag_job.isr_changes_of_partials(merged[s.TABLE_ISR_CHANGES])
            timed = {
                s.TABLE_FOLLOWER_LAG: lag_job.in_range(lag, since),
                s.TABLE_REPLICA_LAG: lag_job.in_range(lag_job.replica_lag(parts), since),
                s.TABLE_LAG_WINDOWS: lag_job.lag_windows(lag, config, since),
                s.TABLE_BYTE_RATES: lag_job.byte_rates(parts, config, since),
                s.TABLE_CLUSTER_HEALTH: lag_job.cluster_health(
                    parts, config, leaders, since, merged[PARTIAL_FIRST_SEEN]
                ),
                s.TABLE_BROKER_HEALTH: lag_job.in_range(lag_job.broker_health(samples), since),
            }
            whole = {
                s.TABLE_UNDER_REPLICATED: lag_job.under_replicated_of_partials(merged[s.TABLE_UNDER_REPLICATED], isr),
                s.TABLE_ISR_CHANGES: isr,
                s.TABLE_FOLLOWER_STATUS: lag_job.follower_status_of_samples(parts, config, newest),
                s.TABLE_LEADER_TIMELINE: lag_job.leader_timeline_of_partials(merged[s.TABLE_LEADER_TIMELINE]),
            }
            version = f"v{batch_id}"
            version_dir = self.state_dir / version
            shutil.rmtree(version_dir, ignore_errors=True)
            tail = tail_of(rows, until - config.gap_max_ms, config)
            # The state: the tail, the settled partials, and the merged broker runs (a rerun batch's page).
            writes: list[Callable[[], None]] = [
                functools.partial(_write, tail, version_dir / TAIL),
                functools.partial(_write, merged[PARTIAL_BROKER_RUNS], version_dir / MERGED_BROKER_RUNS),
            ]
            writes += [functools.partial(_write, df, version_dir / name) for name, df in settled.items()]
            writes += [
                functools.partial(self._add_timed, name, df, since, until, batch_id) for name, df in timed.items()
            ]
            writes += [functools.partial(self._replace_table, name, df) for name, df in whole.items()]
            _run_all(writes)
            on_step("written")
            self._commit(FollowState(batch_id, until, newest, version, self._config_dict()))
            on_step("committed")
            runs = dashboard.broker_runs_of_partials(merged[PARTIAL_BROKER_RUNS])
        finally:
            for df in cached:
                df.unpersist()
        return Round(self._read_tables(spark), runs, sum(r.records for r in runs), until, newest)

    def _as_written(self, spark: SparkSession) -> Round:
        """The tables and broker runs as the last committed round wrote them."""
        state = self.state
        if state is None:
            raise ValueError("nothing merged yet")
        runs = dashboard.broker_runs_of_partials(
            spark.read.parquet(str(self.state_dir / state.version / MERGED_BROKER_RUNS))
        )
        return Round(self._read_tables(spark), runs, sum(r.records for r in runs), state.settled_ms, state.newest_ms)

    def _read_tables(self, spark: SparkSession) -> dict[str, DataFrame]:
        return {name: spark.read.parquet(str(self.out_dir / name)) for name in s.TABLES}

    def _add_timed(self, name: str, df: DataFrame, since: int | None, until: int, batch_id: int) -> None:
        """Collect a timed table's rows from ``since`` on and add them to its folder: the rows before
        ``until`` as a settled part (when the horizon moved), the rest as this batch's recent part."""
        rows = df.toArrow()
        folder = self.out_dir / name
        folder.mkdir(parents=True, exist_ok=True)
        column = rows[TIMED_TABLES[name]]
        if since is None or until > since:
            name = settled_part_name(since if since is not None else 0, until, 0)
            _write_file(rows.filter(pc.less(column, until)), folder / name)
        _write_file(rows.filter(pc.greater_equal(column, until)), folder / f"{RECENT_PREFIX}{batch_id}-{PART_FILE}")

    def _replace_table(self, name: str, df: DataFrame) -> None:
        """Write a whole (small) table aside, then put it in place of the old one."""
        staged = self.staging / name
        shutil.rmtree(staged, ignore_errors=True)
        _write(df, staged)
        final = self.out_dir / name
        shutil.rmtree(final, ignore_errors=True)
        staged.rename(final)


@dataclass(frozen=True)
class SettledPart:
    """One settled part file of a timed table: the rows of [start_ms, end_ms), folded ``level`` times."""

    start_ms: int
    end_ms: int
    level: int
    path: Path


def settled_part_name(start_ms: int, end_ms: int, level: int) -> str:
    fold = f"f{level}-" if level else ""
    return f"{SETTLED_PREFIX}{start_ms}-{end_ms}-{fold}{PART_FILE}"


def parse_settled_part(name: str) -> tuple[int, int, int] | None:
    """(start_ms, end_ms, level) of a settled part's file name, None for any other name."""
    if not name.startswith(SETTLED_PREFIX):
        return None
    fields = name[len(SETTLED_PREFIX) :].split("-")
    try:
        level = int(fields[2][1:]) if fields[2].startswith("f") else 0
        return int(fields[0]), int(fields[1]), level
    except (IndexError, ValueError):
        return None


def settled_parts(folder: Path) -> list[SettledPart]:
    """The visible settled parts of a timed table's folder, oldest first."""
    parts = []
    for path in folder.iterdir():
        parsed = parse_settled_part(path.name)
        if parsed is not None:
            parts.append(SettledPart(*parsed, path))
    return sorted(parts, key=lambda part: part.start_ms)


def fold_settled(folder: Path, fan_in: int = FOLD_FAN_IN) -> int:
    """Fold every run of ``fan_in`` consecutive settled parts of one level into one part of the next level,
    until no such run is left; returns how many folds were done."""
    folds = 0
    while (run := _full_run(settled_parts(folder), fan_in)) is not None:
        hidden = folder / f"{FOLDING_PREFIX}{settled_part_name(run[0].start_ms, run[-1].end_ms, run[0].level + 1)}"
        _write_file(pa.concat_tables([pq.read_table(part.path) for part in run]), hidden)
        finish_fold(folder, hidden)
        folds += 1
    return folds


def _full_run(parts: list[SettledPart], fan_in: int) -> list[SettledPart] | None:
    """The oldest ``fan_in`` parts in a row that share a level and span adjacent times, if any."""
    found = oldest_full_run([part.level for part in parts], fan_in, lambda i: parts[i].start_ms == parts[i - 1].end_ms)
    return None if found is None else parts[found]


def oldest_full_run(
    levels: Sequence[int], fan_in: int, joined: Callable[[int], bool] = lambda _i: True
) -> slice | None:
    """Where the oldest ``fan_in`` items in a row share a level (item i continuing item i - 1 wherever
    ``joined(i)``), as a slice of ``levels`` (oldest first); None if there is no such run. Used to fold the
    settled parts here and the stored record folders (``spark_app.compact``)."""
    start = 0
    for i in range(1, len(levels) + 1):
        if i - start == fan_in:
            return slice(start, i)
        if i < len(levels) and (levels[i] != levels[start] or not joined(i)):
            start = i
    return None


def finish_fold(folder: Path, hidden: Path) -> None:
    """Complete a fold whose output ``hidden`` is written: delete the parts it covers, then show it."""
    name = hidden.name[len(FOLDING_PREFIX) :]
    span = parse_settled_part(name)
    if span is None:
        raise ValueError(f"not a folded part: {hidden}")
    start_ms, end_ms, _ = span
    for part in settled_parts(folder):
        if start_ms <= part.start_ms and part.end_ms <= end_ms:
            part.path.unlink()
    os.replace(hidden, folder / name)


def _write(df: DataFrame, folder: Path) -> None:
    """``df`` as one Parquet file in ``folder``. Every output of a round is small (bounded by the tail): one
    collect through Arrow and a pyarrow write cost a fifth of a Spark write job (no commit protocol)."""
    folder.mkdir(parents=True, exist_ok=True)
    _write_file(df.toArrow(), folder / PART_FILE)


def _write_file(rows: pa.Table, path: Path) -> None:
    """Write ``rows`` to ``path`` in one rename: a reader never sees half a file."""
    tmp = path.with_name(f".tmp-{path.name}.tmp")
    pq.write_table(rows, tmp)
    os.replace(tmp, path)


def _run_all(writes: list[Callable[[], None]]) -> None:
    """Run the writes concurrently (each one small Spark job and a file write): the scheduler overlaps one's
    planning with another's tasks."""
    with ThreadPoolExecutor(max_workers=min(8, len(writes)) or 1, thread_name_prefix="follow-write") as pool:
        for done in [pool.submit(write) for write in writes]:
            done.result()
