"""The lag job as an application: Spark session, reading the metrics dir, writing tables and the page.

How this works:
- Batch: list the rolled ``broker-<id>-<first_ts_ms>.jsonl`` files and the ``_active/broker-<id>.jsonl``
  files (Spark's own listing skips ``_`` paths, so the job passes explicit paths). Every table is
  computed by the per-broker pass (``lagapp.file_pass`` over ``lagapp.tables``: a broker's records in one
  task, what crosses brokers in the driver), written as Parquet without Spark holding the records; the
  page's aggregates are then computed from the written tables with pyarrow in the driver
  (``lagapp.dashboard_data``, no Spark job). A broker's records reach its task in one of two ways: when
  every file is one broker's (the emitter's and the sink's layout), each task reads its brokers' files
  in order (``publish_files``: no shuffle, no sort); otherwise (files in another layout, ``--sorted``,
  or a failure reading the files that way) Spark reads the records with the fixed schema, lines cut by a
  crash dropped, and shuffles and sorts them by broker (``publish_records``). Same tables, same page.
- Follow (``--follow``): Structured Streaming over the rolled files only (an active file is still being
  written), in rounds: every trigger interval one ``availableNow`` query takes the files there and
  stops by itself, so no query is stopped inside a batch (``_run_round``). Records get an event time
  and a watermark of three windows; duplicates (MQTT QoS 1 may deliver a message twice) are dropped
  within the watermark. The source's offsets and the dedup state
  live in ``<out>/_stream/checkpoint``; each micro-batch is written to ``<out>/_stream/records/batch-<id>``
  (``write_batch``: a rerun of a batch after a restart replaces its folder, so nothing is stored
  twice). Then ``merge_and_publish`` brings the tables and the page up to date: merged into carried
  state (``lagapp.follow``), so a round's cost does not grow with the history (or, while fewer than
  ``--incremental-from`` records are stored, recomputed from all of them by ``publish_records``; 0 by
  default). Every ``COMPACT_AFTER_BATCHES`` batch folders are folded into one folder, and as many folds
  into one of the next level (``compact``), so a long follow keeps a few folders, not one per
  micro-batch, and rewrites each record a few times, not at every compaction. The page reloads itself
  every trigger interval while following; when following stops (Ctrl-C or ``max_batches`` micro-batches
  with data) it is written once more without the reload, so a browser left on it stops refreshing a
  finished page.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pyarrow.parquet as pq
from pyspark.errors import StreamingQueryException
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.streaming.query import StreamingQuery

from lagapp import dashboard, dashboard_data, file_pass, follow
from lagapp import schema as s
from lagapp.tables import LagJobConfig

DASHBOARD_FILE = "dashboard.html"
ACTIVE_DIR = "_active"
LOG4J2_CONFIG = Path(__file__).with_name("log4j2.properties")
ROLLED_GLOB = "broker-*.jsonl"
WINDOW_S_DEFAULT = 10
TRIGGER_S_DEFAULT = 10
# Shuffle partitions per local core: enough tasks to balance two or more cores, few enough that each
# small aggregation does not pay for hundreds of near-empty tasks (AQE coalesces further).
LOCAL_SHUFFLE_PARTITIONS_PER_CORE = 2


class NoMetricsError(Exception):
    """The metrics dir is missing or holds no readable records."""


@dataclass(frozen=True)
class DashboardResult:
    """What a run wrote: the page, one Parquet folder per table, and a few headline numbers."""

    out_dir: str
    dashboard_html: str
    tables: dict[str, str]
    row_counts: dict[str, int]
    records: int
    files: int
    status_counts: dict[str, int]
    wall_s: float
    batches: int = 0
    extra: dict[str, float] = field(default_factory=dict)

    def to_json(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)


def _local_cores(master: str) -> int | None:
    """Cores of a ``local``/``local[N]``/``local[*]`` master, None for a cluster master."""
    if master == "local":
        return 1
    if not master.startswith("local["):
        return None
    n = master[len("local[") :].split("]")[0].split(",")[0]
    if n == "*":
        return os.cpu_count() or 1
    return int(n)


def create_session(
    master: str | None = None,
    app_name: str = "minibroker-lag-job",
    conf: dict[str, str] | None = None,
) -> SparkSession:
    """A Spark session on ``master`` (``local[*]`` when none), UI off, quiet logs, UTC times.

    On a local master, ``spark.sql.shuffle.partitions`` is sized to the cores (the default 200 makes
    every small aggregation run 200 tasks); AQE stays on to coalesce what is still too small.
    """
    master = master or "local[*]"
    # Python workers run this interpreter (its venv, its packages), not whichever python3 is on PATH; a
    # SparkContext reads this when it starts, so it is set before the first session of the process.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.sql.adaptive.enabled", "true")
        # The derived records are cached once and read by every table; 1 GiB (the default) is tight.
        .config("spark.driver.memory", "4g")
        # Errors only, from the JVM's start on (setLogLevel below comes after Spark's startup warnings).
        .config("spark.driver.extraJavaOptions", f"-Dlog4j2.configurationFile=file:{LOG4J2_CONFIG}")
    )
    cores = _local_cores(master)
    if cores is not None:
        builder = builder.config("spark.sql.shuffle.partitions", str(cores * LOCAL_SHUFFLE_PARTITIONS_PER_CORE))
    for key, value in (conf or {}).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def list_metric_files(metrics_dir: Path, include_active: bool = True) -> list[Path]:
    """Rolled files, then (for the batch job) the active ones, sorted for a stable order."""
    if not metrics_dir.is_dir():
        raise NoMetricsError(f"metrics dir {metrics_dir} does not exist or is not a directory")
    files = sorted(p for p in metrics_dir.glob(ROLLED_GLOB) if p.is_file())
    if include_active:
        files += sorted(p for p in (metrics_dir / ACTIVE_DIR).glob("broker-*.jsonl") if p.is_file())
    return files


def read_records(spark: SparkSession, paths: Sequence[Path]) -> DataFrame:
    """The records of the given JSON-lines files, read with ``LAG_JOB_SCHEMA`` (never inferred).

    DROPMALFORMED skips a line cut by a crash; rows without kind or ts_ms are dropped too. The schema
    names only the fields the tables use, so the parser converts nothing else.
    """
    raw = spark.read.schema(s.LAG_JOB_SCHEMA).option("mode", "DROPMALFORMED").json([str(p) for p in paths])
    return raw.where(F.col(s.KIND).isNotNull() & F.col(s.TS_MS).isNotNull())


def parquet_row_count(path: Path) -> int:
    """Rows in a written Parquet folder, from the footers of its part files (no Spark job)."""
    return sum(pq.ParquetFile(part).metadata.num_rows for part in sorted(path.glob("*.parquet")))


Published = tuple[dict[str, str], dict[str, int], dict[str, int], int]


def publish_files(
    spark: SparkSession,
    files: Sequence[Path],
    out_dir: Path,
    config: LagJobConfig,
    title: str,
    faults: Sequence[dashboard.TimelineEvent] = (),
    phases: dict[str, float] | None = None,
) -> Published | None:
    """Every table and the page from metrics files in the emitter's layout, each broker's files read in
    order by one task (``file_pass.run``). Returns (table paths, table row counts, follower status counts,
    record count), or None when the files are not in that layout (a file named after no broker, a record
    of another broker): the caller then takes ``publish_records``."""
    mark = _PhaseTimer(phases)
    progress("reading each broker's files in order")
    done = file_pass.run(spark, files, out_dir, config)
    if done is None:
        return None
    mark("file_pass")
    return _publish(done, out_dir, config, title, faults, mark)


def publish_records(
    records: DataFrame,
    out_dir: Path,
    config: LagJobConfig,
    title: str,
    faults: Sequence[dashboard.TimelineEvent] = (),
    refresh_s: int | None = None,
    phases: dict[str, float] | None = None,
    on_page: Callable[[dashboard.DashboardData], None] | None = None,
) -> Published:
    """Every table and the page from ``records`` (any source, read with ``LAG_JOB_SCHEMA``): Spark shuffles
    and sorts them by broker, then the same pass (``file_pass.run_records``). ``refresh_s``: the page
    reloads itself this often (``--follow``); ``on_page``: called with what the page shows."""
    mark = _PhaseTimer(phases)
    progress("shuffling and sorting the records by broker")
    done = file_pass.run_records(records, out_dir, config)
    mark("sort_pass")
    return _publish(done, out_dir, config, title, faults, mark, refresh_s, on_page)


def _publish(
    done: tuple[dict[str, str], file_pass.FilePassStats],
    out_dir: Path,
    config: LagJobConfig,
    title: str,
    faults: Sequence[dashboard.TimelineEvent],
    mark: _PhaseTimer,
    refresh_s: int | None = None,
    on_page: Callable[[dashboard.DashboardData], None] | None = None,
) -> Published:
    """The page from the tables the pass wrote (``dashboard_data``, pyarrow in the driver)."""
    paths, stats = done
    if stats.records == 0:
        raise NoMetricsError("the metrics files hold no readable records")
    progress(
        f"{stats.records} records from {len(stats.runs)} broker runs, {stats.files_sorted} files sorted, "
        f"{stats.duplicates} duplicates dropped; {len(paths)} tables written"
    )
    progress("building the page")
    runs = [dashboard.BrokerRun(*row) for row in stats.runs]
    data = dashboard_data.collect_dashboard_data(
        title, paths, config.window_ms, runs, faults=faults, health_bucket_ms=config.health_bucket_ms
    )
    data.refresh_s = refresh_s
    mark("page_queries")
    counts = {name: parquet_row_count(Path(path)) for name, path in paths.items()}
    write_page(out_dir, data)
    mark("page_render")
    if on_page is not None:
        on_page(data)
    return paths, counts, data.status_counts, stats.records


def write_page(out_dir: Path, data: dashboard.DashboardData) -> Path:
    """Render ``dashboard.html`` from ``data``, replacing the old page in one rename."""
    page = out_dir / DASHBOARD_FILE
    tmp = page.with_suffix(".html.tmp")
    tmp.write_text(dashboard.render_dashboard(data), encoding="utf-8")
    tmp.replace(page)  # a browser reloading mid-refresh never sees half a page
    return page


class _PhaseTimer:
    """``mark(name)`` stores the wall seconds since the previous mark as ``<name>_s`` (no-op without a dict)."""

    def __init__(self, phases: dict[str, float] | None) -> None:
        self._phases = phases
        self._last = time.monotonic()

    def __call__(self, name: str) -> None:
        now = time.monotonic()
        if self._phases is not None:
            self._phases[f"{name}_s"] = round(now - self._last, 3)
        self._last = now


def progress(message: str) -> None:
    """One line per phase on stderr, so a long run is not silent (MINIBROKER_QUIET=1 turns it off)."""
    if os.environ.get("MINIBROKER_QUIET") != "1":
        print(f"[{time.strftime('%H:%M:%S')}] dashboard: {message}", file=sys.stderr, flush=True)


def _title(metrics_dir: Path) -> str:
    """Names the cluster: a local cluster keeps its metrics in <cluster dir>/metrics."""
    where = metrics_dir.resolve()
    name = where.parent.name if where.name == "metrics" and where.parent.name else where.name
    return f"minibroker lag: {name}"


def snapshot_metric_files(
    metrics_dir: Path, snapshot_dir: Path, on_step: Callable[[str], None] = lambda _step: None
) -> list[Path]:
    """A consistent set of metric files for one read, safe against a file rolling while it is listed.

    Rolled files never change once they exist. An active file can roll away between two listings (and
    a new active file take its name), which used to hide its records: so the active files are copied
    whole-line into `snapshot_dir` first, and the rolled files listed after. An active file that rolled
    meanwhile is then listed as rolled (its rolled name carries the ts of its first record, which the
    copy also starts with): the copy is dropped and the rolled file read instead, so nothing is lost or
    read twice. `on_step` lets a test roll a file between the steps.
    """
    if not metrics_dir.is_dir():
        raise NoMetricsError(f"metrics dir {metrics_dir} does not exist or is not a directory")
    snapshot_dir.mkdir(parents=True, exist_ok=True)
    copies: list[tuple[Path, str]] = []
    for active in sorted((metrics_dir / ACTIVE_DIR).glob("broker-*.jsonl")):
        on_step(f"read {active.name}")
        try:
            data = active.read_bytes()
        except FileNotFoundError:
            continue  # rolled just now: the listing below finds it
        data = data[: data.rfind(b"\n") + 1]  # a line being written is not complete yet
        if not data:
            continue
        try:
            first_ts = json.loads(data[: data.index(b"\n")])["ts_ms"]
        except (ValueError, KeyError, TypeError):
            first_ts = None
        copy = snapshot_dir / active.name
        copy.write_bytes(data)
        copies.append((copy, f"{active.stem}-{first_ts}"))
    on_step("list rolled")
    rolled = sorted(p for p in metrics_dir.glob(ROLLED_GLOB) if p.is_file())
    stems = {p.stem for p in rolled}
    kept = [
        copy
        for copy, rolled_stem in copies
        if not any(s == rolled_stem or s.startswith(rolled_stem + "-") for s in stems)
    ]
    return rolled + kept


def _error_summary(error: BaseException) -> str:
    """The error's type and first line, and the Python error a Spark task raised (the last line of its
    traceback, which Spark puts in the message after the JVM's first line)."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    summary = f"{type(error).__name__}: {lines[0] if lines else ''}"
    cause = next((line for line in reversed(lines) if re.match(r"[\w.]+(Error|Exception)\b", line)), None)
    if cause is not None and cause not in summary:
        summary += f" {cause}"
    return summary[:400]


def _publish_files_or_none(
    spark: SparkSession,
    files: Sequence[Path],
    out_dir: Path,
    config: LagJobConfig,
    title: str,
    faults: Sequence[dashboard.TimelineEvent],
    phases: dict[str, float],
) -> Published | None:
    """``publish_files``, or None (logged) when Spark must read and sort the records instead
    (``publish_records``): the files are not in the emitter's layout, or reading them that way failed.
    The records then reach the same pass through Spark's own JSON reader (an empty metrics dir still
    fails, either way)."""
    try:
        done = publish_files(spark, files, out_dir, config, title, faults, phases)
    except NoMetricsError:
        raise
    except Exception as error:
        progress(f"reading each broker's files failed ({_error_summary(error)}); shuffling and sorting instead")
        shutil.rmtree(out_dir / file_pass.STAGING_DIR, ignore_errors=True)
        return None
    if done is None:
        progress("the files are not one broker's each: shuffling and sorting the records instead")
    return done


def run_batch(
    spark: SparkSession, metrics_dir: Path, out_dir: Path, config: LagJobConfig, per_file: bool = True
) -> DashboardResult:
    """The batch job: every table and the page from the metrics files there now.

    ``per_file`` (the default): each broker's files read in order by one task (``publish_files``), falling
    back to Spark's reader and a sort by broker (``publish_records``) when the files are not in the
    emitter's layout or reading them that way fails (logged, its staging removed); False: Spark's reader
    and the sort always (``--sorted``).
    """
    started = time.monotonic()
    phases: dict[str, float] = {}
    out_dir.mkdir(parents=True, exist_ok=True)
    snapshot = Path(tempfile.mkdtemp(prefix=".metrics-snapshot-", dir=out_dir))
    try:
        files = snapshot_metric_files(metrics_dir, snapshot)
        progress(f"{len(files)} metrics files from {metrics_dir}")
        if not files:
            raise NoMetricsError(f"no broker-*.jsonl files in {metrics_dir} or {metrics_dir / ACTIVE_DIR}")
        title, faults = _title(metrics_dir), dashboard.fault_events(metrics_dir / s.FAULTS_FILE)
        done = _publish_files_or_none(spark, files, out_dir, config, title, faults, phases) if per_file else None
        if done is None:
            phases.clear()
            done = publish_records(read_records(spark, files), out_dir, config, title, faults, phases=phases)
        paths, counts, statuses, n = done
    finally:
        shutil.rmtree(snapshot, ignore_errors=True)
    return DashboardResult(
        out_dir=str(out_dir),
        dashboard_html=str(out_dir / DASHBOARD_FILE),
        tables=paths,
        row_counts=counts,
        records=n,
        files=len(files),
        status_counts=statuses,
        wall_s=round(time.monotonic() - started, 3),
        extra=phases,
    )


#: ``--follow`` recomputes the tables from every stored record until this many are stored, then merges
#: each micro-batch into carried state (``merge_and_publish``). A merged round costs a tenth of a
#: recompute from the first batch on (``bench.follow``), so by default it merges from the start.
INCREMENTAL_FROM_RECORDS = 0
BATCH_PREFIX = "batch-"
COMPACTED_PREFIX = "upto-"  # upto-<K>: every batch up to K (what compaction wrote before it folded in levels)
FOLDED_PREFIX = "span-"  # span-<first>-<last>-<level>: the batches first..last, folded `level` times
BUILDING_PREFIX = "_building-"  # "_": never read as part of the records
#: Batch folders that ``--follow`` lets pile up before folding them into one (``compact``); as many folds
#: of one level are folded into one of the next.
COMPACT_AFTER_BATCHES = 10
_UPTO_LEVEL = 1 << 30  # an upto-<K> folder is never folded again


@dataclass(frozen=True)
class StoredPart:
    """A folder of stored records: the batches ``first``..``last`` (ids), folded ``level`` times."""

    first: int
    last: int
    level: int
    path: Path


def _folder_id(path: Path, prefix: str) -> int | None:
    rest = path.name.removeprefix(prefix)
    return int(rest) if rest != path.name and rest.isdigit() else None


def _stored_part(path: Path) -> StoredPart | None:
    if (i := _folder_id(path, BATCH_PREFIX)) is not None:
        return StoredPart(i, i, 0, path)
    if (i := _folder_id(path, COMPACTED_PREFIX)) is not None:
        return StoredPart(-1, i, _UPTO_LEVEL, path)
    fields = path.name.removeprefix(FOLDED_PREFIX).split("-")
    if path.name.startswith(FOLDED_PREFIX) and len(fields) == 3 and all(f.isdigit() for f in fields):
        first, last, level = map(int, fields)
        return StoredPart(first, last, level, path)
    return None


def _stored_cover(accumulated: Path) -> list[StoredPart]:
    """The parts that hold every stored batch once, oldest first: of parts that overlap (a fold's output
    and the inputs it had not deleted yet when a crash stopped it), the widest. Folds only join parts
    next to each other, so two parts either nest or do not overlap."""
    if not accumulated.is_dir():
        return []
    parts = sorted(
        (part for p in accumulated.iterdir() if (part := _stored_part(p)) is not None),
        key=lambda part: (part.first, -part.last),
    )
    cover: list[StoredPart] = []
    for part in parts:
        if not cover or part.first > cover[-1].last:
            cover.append(part)
    return cover


def accumulated_parts(accumulated: Path) -> list[Path]:
    """The folders that together hold every accumulated record once, in batch order: ``batch-<id>``
    folders, folds of them (``span-<first>-<last>-<level>``) and an ``upto-<K>`` folder (every batch up to
    K) left by an earlier version. A folder whose batches a wider one holds (left by a fold cut short, or
    by a rerun of a batch already folded in) is not read."""
    return [part.path for part in _stored_cover(accumulated)]


def folded_upto(accumulated: Path) -> int:
    """The newest batch id some fold holds (a rerun of a batch at or below it is stored already); -1 when
    nothing was folded."""
    return max((part.last for part in _stored_cover(accumulated) if part.level > 0), default=-1)


def compact(spark: SparkSession, accumulated: Path, fan_in: int = COMPACT_AFTER_BATCHES) -> list[Path]:
    """Fold every ``fan_in`` folders of one level that lie next to each other into one folder of the next
    level, until no such run is left; returns the folders written.

    Level 0 is a micro-batch's folder, so a follow of n batches keeps at most ``fan_in`` folders per level
    and about log(n) levels, and a record is rewritten once per level (not once per compaction, as
    folding everything into one folder each time would). A fold is built aside and renamed into place
    before its inputs are deleted: until the rename the inputs are read, after it the fold (the wider
    folder wins, ``accumulated_parts``), so a crash at any step loses nothing and stores nothing twice.
    """
    if fan_in < 2:
        raise ValueError(f"fan_in must be at least 2, got {fan_in}")
    written: list[Path] = []
    while True:
        cover = _stored_cover(accumulated)
        for leftover in accumulated.iterdir() if accumulated.is_dir() else ():
            part = _stored_part(leftover)
            if part is not None and all(leftover != c.path for c in cover):
                shutil.rmtree(leftover, ignore_errors=True)  # held by a wider folder: a fold cut short
        found = follow.oldest_full_run([part.level for part in cover], fan_in)
        if found is None:
            return written
        run = cover[found]
        final = accumulated / f"{FOLDED_PREFIX}{run[0].first}-{run[-1].last}-{run[0].level + 1}"
        building = accumulated / f"{BUILDING_PREFIX}{final.name}"
        shutil.rmtree(building, ignore_errors=True)
        spark.read.parquet(*(str(part.path) for part in run)).write.parquet(str(building))
        building.rename(final)
        for part in run:
            shutil.rmtree(part.path, ignore_errors=True)
        written.append(final)


def write_batch(batch: DataFrame, accumulated: Path, batch_id: int) -> Path:
    """The idempotent sink of ``--follow``: micro-batch ``batch_id`` is the folder ``batch-<id>``.

    A query stopped after its sink ran but before the batch's commit reached the checkpoint reruns
    that batch on restart, with the same input (the offsets log fixed its files) and the same
    dedup state. Appending would store it twice; writing it to a folder named after the batch id,
    built aside and renamed into place, stores it once however often it runs.
    """
    final = accumulated / f"{BATCH_PREFIX}{batch_id}"
    building = accumulated / f"{BUILDING_PREFIX}{batch_id}"
    shutil.rmtree(building, ignore_errors=True)
    batch.write.parquet(str(building))
    shutil.rmtree(final, ignore_errors=True)
    building.rename(final)
    return final


@dataclass
class _FollowState:
    batches: int = 0
    last: DashboardResult | None = None
    page: dashboard.DashboardData | None = None  # what the last published page shows


def _run_round(start: Callable[[], StreamingQuery], poll_s: int = 1) -> StreamingQuery:
    """Run one ``availableNow`` query to its own end: it takes the files there now and stops by itself,
    every batch committed. A query is only ever stopped from outside on Ctrl-C: stopped inside
    ``foreachBatch``, Spark matches the interrupted batch's long error message with a regular expression
    that overflows the stream thread's stack, and the JVM prints a StackOverflowError and its frames."""
    query = start()
    try:
        while not query.awaitTermination(poll_s):  # short waits: Ctrl-C is noticed between them
            pass
    except StreamingQueryException:
        pass  # the caller reads query.exception()
    except KeyboardInterrupt:
        query.stop()
        raise
    return query


def merge_and_publish(
    job: follow.FollowJob,
    batch: DataFrame,
    batch_id: int,
    title: str,
    faults_file: Path | None = None,
    refresh_s: int | None = None,
    compact_after: int | None = None,
    incremental_from: int = INCREMENTAL_FROM_RECORDS,
) -> tuple[DashboardResult, dashboard.DashboardData] | None:
    """One ``--follow`` round: store micro-batch ``batch_id``'s records, bring the tables up to date, and
    rewrite the page. None for a batch without records (it only moved the watermark).

    While fewer than ``incremental_from`` records are stored, the tables are recomputed from all of them
    (``publish_records``, the batch job's code): a round of the incremental job has a fixed cost (the
    state and the tail read and written) that a small history may recompute faster. From then on (and on
    every later start, once a state exists) the round merges the batch into the follow job's state
    (``follow.FollowJob``), at a cost that does not grow with the history. Records older than the settled
    horizon are dropped and counted (the stream's watermark drops them first, so this is a guard)."""
    round_started = time.monotonic()
    spark = batch.sparkSession
    out_dir = job.out_dir
    accumulated = out_dir / s.STREAM_DIR / "records"
    settled = job.settled_ms
    late = F.col(s.TS_MS) < settled if settled is not None else F.lit(False)
    counted = batch.agg(F.count(F.lit(1)).alias("rows"), F.count(F.when(late, True)).alias("late")).first()
    if counted is None or counted["rows"] == 0:
        return None
    if counted["late"]:
        print(f"batch {batch_id}: {counted['late']} records older than the settled horizon dropped", file=sys.stderr)
        batch = batch.where(~late)
    if batch_id > folded_upto(accumulated):  # else a rerun of a batch already folded into upto-<id>
        write_batch(batch, accumulated, batch_id)
    compact(spark, accumulated, COMPACT_AFTER_BATCHES if compact_after is None else compact_after)
    faults = dashboard.fault_events(faults_file) if faults_file is not None else ()
    parts = accumulated_parts(accumulated)
    stored = sum(parquet_row_count(p) for p in parts)
    how = "merged"
    if job.needs_rebuild and stored < incremental_from:
        how = "recomputed"
        pages: list[dashboard.DashboardData] = []
        _, _, _, n = publish_records(
            spark.read.schema(s.LAG_JOB_SCHEMA).parquet(*(str(p) for p in parts)),
            out_dir,
            job.config,
            title,
            faults,
            refresh_s=refresh_s,
            on_page=pages.append,
        )
        data = pages[0]
    else:
        if job.needs_rebuild:  # no state to carry on (the switch, or computed another way): every record
            batch = spark.read.schema(s.LAG_JOB_SCHEMA).parquet(*(str(p) for p in parts))
        merged = job.merge(batch, batch_id)
        n = merged.records
        # The page's aggregates from the written tables with pyarrow, as the batch job builds its page.
        data = dashboard_data.collect_dashboard_data(
            title,
            {name: str(out_dir / name) for name in s.TABLES},
            job.config.window_ms,
            merged.runs,
            faults=faults,
            health_bucket_ms=job.config.health_bucket_ms,
        )
        data.refresh_s = refresh_s
        write_page(out_dir, data)
    wall_s = time.monotonic() - round_started
    result = DashboardResult(
        out_dir=str(out_dir),
        dashboard_html=str(out_dir / DASHBOARD_FILE),
        tables={name: str(out_dir / name) for name in s.TABLES},
        row_counts={name: parquet_row_count(out_dir / name) for name in s.TABLES},
        records=n,
        files=0,
        status_counts=data.status_counts,
        wall_s=round(wall_s, 3),
        batches=1,
    )
    print(
        f"batch {batch_id}: {counted['rows']} new records, {n} in all, {how} and published in "
        f"{wall_s:.1f} s; dashboard {out_dir / DASHBOARD_FILE}",
        file=sys.stderr,
        flush=True,
    )
    return result, data


def run_follow(
    spark: SparkSession,
    metrics_dir: Path,
    out_dir: Path,
    config: LagJobConfig,
    trigger_s: float = TRIGGER_S_DEFAULT,
    max_batches: int | None = None,
    compact_after: int | None = None,
    incremental_from: int = INCREMENTAL_FROM_RECORDS,
) -> DashboardResult:
    """Stream the rolled files, republishing after every micro-batch with data (see module docstring)."""
    if not metrics_dir.is_dir():
        raise NoMetricsError(f"metrics dir {metrics_dir} does not exist or is not a directory")
    out_dir.mkdir(parents=True, exist_ok=True)
    stream_dir = out_dir / s.STREAM_DIR
    accumulated = stream_dir / "records"
    if accumulated.is_dir():
        for leftover in accumulated.glob(f"{BUILDING_PREFIX}*"):  # a write cut short by a crash
            shutil.rmtree(leftover, ignore_errors=True)
    started = time.monotonic()
    state = _FollowState()
    watermark_s = 3 * config.window_ms // 1000 or 1
    stream = (
        spark.readStream.schema(s.RECORD_SCHEMA)
        .option("mode", "DROPMALFORMED")
        .option("pathGlobFilter", ROLLED_GLOB)
        .json(str(metrics_dir))
        .where(F.col(s.KIND).isNotNull() & F.col(s.TS_MS).isNotNull())
        .withColumn("event_time", F.timestamp_millis(F.col(s.TS_MS)))
        .withWatermark("event_time", f"{watermark_s} seconds")
        .dropDuplicatesWithinWatermark(list(s.DEDUP_KEY))
        .drop("event_time")
    )

    refresh_s = max(1, math.ceil(trigger_s))

    job = follow.FollowJob(out_dir, config, watermark_s * 1000)
    title = _title(metrics_dir)

    def publish_batch(batch: DataFrame, batch_id: int) -> None:
        published = merge_and_publish(
            job,
            batch,
            batch_id,
            title=title,
            faults_file=metrics_dir / s.FAULTS_FILE,
            refresh_s=refresh_s,
            compact_after=compact_after,
            incremental_from=incremental_from,
        )
        if published is not None:
            state.batches += 1
            result, state.page = published
            state.last = dataclasses.replace(result, wall_s=round(time.monotonic() - started, 3), batches=state.batches)

    def start() -> StreamingQuery:
        return (
            stream.writeStream.foreachBatch(publish_batch)
            .option("checkpointLocation", str(stream_dir / "checkpoint"))
            .trigger(availableNow=True)
            .start()
        )

    # Rounds of availableNow queries instead of one query on a processing-time trigger: each round ends
    # by itself between batches, so reaching max_batches never stops a query mid-batch.
    try:
        while max_batches is None or state.batches < max_batches:
            round_started = time.monotonic()
            query = _run_round(start)
            if query.exception() is not None:
                raise RuntimeError(f"the streaming query failed: {query.exception()}")
            if max_batches is not None and state.batches >= max_batches:
                break
            time.sleep(max(0.0, trigger_s - (time.monotonic() - round_started)))  # the trigger interval
    except KeyboardInterrupt:
        pass
    finally:
        if state.page is not None and state.page.refresh_s is not None:
            # Following has stopped: the page stays as it is now, without reloading itself.
            state.page.refresh_s = None
            write_page(out_dir, state.page)
    if state.last is None:
        raise NoMetricsError(f"no records arrived in rolled files under {metrics_dir}")
    return state.last


def run_dashboard(
    metrics_dir: str | Path,
    out_dir: str | Path,
    master: str | None = None,
    follow: bool = False,
    window_s: int = WINDOW_S_DEFAULT,
    trigger_s: float = TRIGGER_S_DEFAULT,
    max_batches: int | None = None,
    spark: SparkSession | None = None,
    allowed_lag: int = 0,
    incremental_from: int = INCREMENTAL_FROM_RECORDS,
    per_file: bool = True,
) -> DashboardResult:
    """Build the tables and ``dashboard.html`` once (batch) or keep refreshing them (follow).

    ``per_file``: the batch job's path (``run_batch``).

    Uses ``spark`` when given (tests share one session); otherwise gets one on ``master`` and stops
    it afterwards if it started it. Raises NoMetricsError when the metrics dir is missing or holds no records.
    """
    metrics_path, out_path = Path(metrics_dir), Path(out_dir)
    if not metrics_path.is_dir():
        raise NoMetricsError(f"metrics dir {metrics_path} does not exist or is not a directory")
    if not follow and not list_metric_files(metrics_path):
        raise NoMetricsError(f"no broker-*.jsonl files in {metrics_path} or {metrics_path / ACTIVE_DIR}")
    config = LagJobConfig(window_ms=window_s * 1000, allowed_lag_messages=allowed_lag)
    # Stop the session afterwards only if this call started it (getOrCreate may hand back a running one).
    owned = spark is None and SparkSession.getActiveSession() is None
    session = spark or create_session(master)
    try:
        if follow:
            return run_follow(
                session, metrics_path, out_path, config, trigger_s, max_batches, incremental_from=incremental_from
            )
        return run_batch(session, metrics_path, out_path, config, per_file=per_file)
    finally:
        if owned:
            session.stop()


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="minibroker dashboard",
        description="Turn a metrics dir (JSON lines) into lag/byte-rate Parquet tables and dashboard.html.",
    )
    p.add_argument("--metrics", required=True, type=Path, metavar="DIR", help="metrics dir to read")
    p.add_argument("--out", required=True, type=Path, metavar="DIR", help="where tables and the page go")
    p.add_argument("--master", default=None, metavar="M", help="Spark master (default local[*])")
    p.add_argument("--follow", action="store_true", help="keep refreshing as rolled files arrive (Ctrl-C stops)")
    p.add_argument(
        "--window-s",
        type=int,
        default=WINDOW_S_DEFAULT,
        metavar="N",
        help=f"window for percentiles, rates and follower status (default {WINDOW_S_DEFAULT})",
    )
    p.add_argument(
        "--trigger-s",
        type=float,
        default=TRIGGER_S_DEFAULT,
        metavar="N",
        help=f"--follow: seconds between refreshes (default {TRIGGER_S_DEFAULT})",
    )
    p.add_argument("--max-batches", type=int, default=None, metavar="N", help="--follow: stop after N refreshes")
    p.add_argument(
        "--incremental-from",
        type=int,
        default=INCREMENTAL_FROM_RECORDS,
        metavar="N",
        help="--follow: recompute from every stored record until N are stored, then merge each batch into "
        f"carried state (default {INCREMENTAL_FROM_RECORDS:,})",
    )
    p.add_argument(
        "--allowed-lag",
        type=int,
        default=0,
        metavar="N",
        help="follower status: a lag of at most N messages counts as caught up (Burrow's allowed-lag; default 0)",
    )
    p.add_argument(
        "--sorted",
        action="store_true",
        help="batch: shuffle and sort the records instead of reading each broker's files in order",
    )
    p.add_argument("--json", action="store_true", help="print the run summary as one JSON line")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    if args.window_s <= 0:
        print("minibroker dashboard: --window-s must be positive", file=sys.stderr)
        return 2
    if args.allowed_lag < 0:
        print("minibroker dashboard: --allowed-lag must be >= 0", file=sys.stderr)
        return 2
    if args.incremental_from < 0:
        print("minibroker dashboard: --incremental-from must be >= 0", file=sys.stderr)
        return 2
    try:
        result = run_dashboard(
            args.metrics,
            args.out,
            master=args.master,
            follow=args.follow,
            window_s=args.window_s,
            trigger_s=args.trigger_s,
            max_batches=args.max_batches,
            allowed_lag=args.allowed_lag,
            incremental_from=args.incremental_from,
            per_file=not args.sorted,
        )
    except NoMetricsError as e:
        print(f"minibroker dashboard: {e}", file=sys.stderr)
        return 1
    # With --json, stdout carries exactly one JSON document; the human lines go to stderr.
    text = sys.stderr if args.json else sys.stdout
    print(f"dashboard: {result.dashboard_html}", file=text)
    for name, path in result.tables.items():
        print(f"table {name}: {path} ({result.row_counts[name]} rows)", file=text)
    if args.json:
        print(result.to_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
