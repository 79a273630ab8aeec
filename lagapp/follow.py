"""``--follow``, incremental: each micro-batch is aggregated and merged into state carried between batches.

How this works: every per-row fact of the lag job looks backwards (``tables``' module docstring), so a
row's facts are final once every earlier row has arrived. The stream drops a record older than its
watermark, so after a micro-batch every record older than (newest ts_ms − watermark) has arrived.
A round therefore:

1. takes the new records (collected once through Arrow) and the **tail** kept from the last round, and
   computes the facts once, with the batch job's tables (``tables``, through ``follow_round``: no Spark job but
   the collect; every output below is computed and written with numpy and pyarrow in the driver);
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
computed with another ``LagJobConfig`` (or stored in another ``STATE_FORMAT``) is rebuilt from the
stored records.

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
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StructType

from lagapp import dashboard, follow_round
from lagapp import schema as s
from lagapp.tables import WINDOW_START_MS, LagJobConfig

STATE_FILE = "state.json"
TAIL = "tail"
PARTIAL_BROKER_RUNS = follow_round.PARTIAL_BROKER_RUNS
PARTIAL_FIRST_SEEN = follow_round.PARTIAL_FIRST_SEEN
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
    s.TABLE_LAG_WINDOWS: WINDOW_START_MS,
    s.TABLE_BYTE_RATES: WINDOW_START_MS,
    s.TABLE_CLUSTER_HEALTH: "bucket_start_ms",
    s.TABLE_BROKER_HEALTH: s.TS_MS,
}
# Partials merged into the settled state (``follow_round.PARTIALS``).
PARTIALS = follow_round.PARTIALS
# How the state is computed and stored: a state written another way is rebuilt from the stored records.
STATE_FORMAT = 2  # 2: the round in numpy (``follow_round``), its partials in ``tables``' columns


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
    """What a merged round produced: the broker runs and the record count (the tables are written under
    the out dir)."""

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
        return {**asdict(self.config), "watermark_ms": self.watermark_ms, "state_format": STATE_FORMAT}

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
        they are come back. ``on_step`` lets a test stop a round between its writes.

        The batch's rows are collected once through Arrow; the round is computed with the batch job's
        tables (``follow_round``) and written with pyarrow."""
        if self.state is not None and batch_id <= self.state.batch_id:
            return self._as_written()
        prev = self.state
        if prev is None:
            self._recover()  # a rebuild: the tables' folders may hold another run's files
        config = self.config
        rows = follow_round.conform(as_records(batch).toArrow())
        if prev is not None:
            tail = pq.read_table(self.state_dir / prev.version / TAIL / PART_FILE, schema=follow_round.RECORDS)
            rows = pa.concat_tables([tail, rows])
        if rows.num_rows == 0:
            return self._as_written()
        newest = int(pc.max(rows[s.TS_MS]).as_py())
        newest = max(newest, prev.newest_ms) if prev is not None else newest
        since = prev.settled_ms if prev is not None else None
        horizon = settled_horizon(newest, self.watermark_ms, config)
        until = max(horizon, since) if since is not None else horizon
        settled_before = None
        if prev is not None:
            settled_before = {
                name: pq.read_table(self.state_dir / prev.version / name / PART_FILE) for name in PARTIALS
            }
        out = follow_round.compute(rows, settled_before, since, until, newest, config)

        version = f"v{batch_id}"
        version_dir = self.state_dir / version
        shutil.rmtree(version_dir, ignore_errors=True)
        # The state: the tail, the settled partials, and the merged broker runs (a rerun batch's page).
        _write(out.tail, version_dir / TAIL)
        _write(out.runs, version_dir / MERGED_BROKER_RUNS)
        for name, table in out.settled.items():
            _write(table, version_dir / name)
        for name, table in out.timed.items():
            self._add_timed(name, table, since, until, batch_id)
        for name, table in out.whole.items():
            self._replace_table(name, table)
        on_step("written")
        self._commit(FollowState(batch_id, until, newest, version, self._config_dict()))
        on_step("committed")
        runs = [dashboard.BrokerRun(*row) for row in follow_round.broker_runs(out.runs)]
        return Round(runs, sum(r.records for r in runs), until, newest)

    def _as_written(self) -> Round:
        """The tables and broker runs as the last committed round wrote them."""
        state = self.state
        if state is None:
            raise ValueError("nothing merged yet")
        merged = pq.read_table(self.state_dir / state.version / MERGED_BROKER_RUNS / PART_FILE)
        runs = [dashboard.BrokerRun(*row) for row in follow_round.broker_runs(merged)]
        return Round(runs, sum(r.records for r in runs), state.settled_ms, state.newest_ms)

    def _add_timed(self, name: str, rows: pa.Table, since: int | None, until: int, batch_id: int) -> None:
        """Add a timed table's rows from ``since`` on to its folder: the rows before ``until`` as a settled
        part (when the horizon moved), the rest as this batch's recent part."""
        folder = self.out_dir / name
        folder.mkdir(parents=True, exist_ok=True)
        column = rows[TIMED_TABLES[name]]
        if since is None or until > since:
            name = settled_part_name(since if since is not None else 0, until, 0)
            _write_file(rows.filter(pc.less(column, until)), folder / name)
        _write_file(rows.filter(pc.greater_equal(column, until)), folder / f"{RECENT_PREFIX}{batch_id}-{PART_FILE}")

    def _replace_table(self, name: str, table: pa.Table) -> None:
        """Write a whole (small) table aside, then put it in place of the old one."""
        staged = self.staging / name
        shutil.rmtree(staged, ignore_errors=True)
        _write(table, staged)
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


def _write(rows: pa.Table, folder: Path) -> None:
    """``rows`` as one Parquet file in ``folder``."""
    folder.mkdir(parents=True, exist_ok=True)
    _write_file(rows, folder / PART_FILE)


def _write_file(rows: pa.Table, path: Path) -> None:
    """Write ``rows`` to ``path`` in one rename: a reader never sees half a file."""
    tmp = path.with_name(f".tmp-{path.name}.tmp")
    pq.write_table(rows, tmp)
    os.replace(tmp, path)
