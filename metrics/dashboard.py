"""The lag dashboard: small aggregates collected from the job's tables, rendered as one HTML file.

How this works: ``broker_runs`` is one aggregation over the records (per broker and broker start: the
record count and time span), which gives the headline numbers and the broker restart/down events.
``collect_dashboard_data`` then runs a handful of aggregations over the job's small tables, never the
records, concurrently (independent small jobs overlap), and brings only their small results to the
driver: the worst partitions' summary rows with the totals in the same job, lag bucketed to at most
``CHART_POINTS_MAX`` points per follower for the charted partitions, byte rates per broker and window,
the worst follower statuses. ``render_dashboard`` is pure Python: data in, one self-contained HTML
page out. plotly.js is inlined once, with the first figure, so the page opens offline.
"""

from __future__ import annotations

import html
import json
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots
from pyspark.sql import Column, DataFrame, Row, Window
from pyspark.sql import functions as F

from metrics import schema as s

CHART_POINTS_MAX = 300
CHART_PARTITIONS_MAX = 12
TABLE_ROWS_MAX = 200
BYTE_RATE_BROKERS_MAX = 10

_STATUS_COLOURS = {
    s.STATUS_OK: "#1a7f37",
    s.STATUS_WARN: "#b58100",
    s.STATUS_STALL: "#d1242f",
    s.STATUS_STOP: "#57606a",
    s.STATUS_TRUNCATE: "#0969da",
    s.STATUS_REWIND: "#8250df",
}
_PALETTE = ("#0969da", "#d1242f", "#1a7f37", "#b58100", "#8250df", "#bf3989", "#0a7a8a", "#6e7781")


@dataclass(frozen=True)
class BrokerRun:
    """One broker process's records: a broker id and start time, how many records, first and last."""

    broker_id: int | None
    broker_start_ms: int | None
    records: int
    first_ts_ms: int
    last_ts_ms: int


@dataclass(frozen=True)
class PartitionSummary:
    topic: str
    partition: int
    leader_id: int | None
    leader_epoch: int | None
    epoch_changes: int
    lag_messages_max: int | None
    lag_ms_max: int | None
    status_counts: dict[str, int]
    under_replicated_ms: int
    isr_shrinks: int
    isr_expands: int


@dataclass(frozen=True)
class FollowerSeries:
    """One follower's lag, bucketed: the max of each bucket at the bucket's start time. `view` says whose
    numbers they are: "leader" (the leader's view: lag in messages and time since last caught up; the
    primary series, which goes on while the follower is down) or "follower" (its own fetcher's view)."""

    follower_id: int
    ts_ms: list[int]
    lag_messages: list[int | None]
    lag_ms: list[int | None]
    view: str = "follower"


@dataclass(frozen=True)
class TimelineEvent:
    """A vertical line on the lag charts: a leader change, or a broker going down or restarting."""

    ts_ms: int
    label: str
    kind: str  # "leader", "broker" or "fault"
    end_ts_ms: int | None = None  # a fault's window ends here


@dataclass(frozen=True)
class BrokerRates:
    broker_id: int
    window_start_ms: list[int]
    rates_bytes_per_s: dict[str, list[float]]  # client_in, client_out, replication_in, replication_out


@dataclass
class DashboardData:
    title: str
    records: int
    first_ts_ms: int | None
    last_ts_ms: int | None
    window_ms: int
    partitions_total: int
    summary: list[PartitionSummary]
    lag: dict[tuple[str, int], list[FollowerSeries]] = field(default_factory=dict)
    events: dict[tuple[str, int], list[TimelineEvent]] = field(default_factory=dict)
    broker_events: list[TimelineEvent] = field(default_factory=list)
    byte_rates: list[BrokerRates] = field(default_factory=list)
    statuses: list[dict[str, Any]] = field(default_factory=list)
    followers_total: int = 0
    status_counts: dict[str, int] = field(default_factory=dict)


# ---- collect: small aggregates from the tables (Spark) ----


def _severity(status: Column) -> Column:
    """1 for the most severe status (STOP) … len(STATUSES) for OK: sorting key for 'worst first'."""
    return F.array_position(F.array(*(F.lit(x) for x in s.STATUSES)), status)


def _partition_summaries(tables: Mapping[str, DataFrame]) -> DataFrame:
    key = [s.TOPIC, s.PARTITION]
    leaders = (
        tables[s.TABLE_LEADER_TIMELINE]
        .groupBy(*key)
        .agg(
            F.max_by(s.LEADER_ID, F.struct("first_seen_ms", s.LEADER_EPOCH)).alias("leader_id"),
            F.max(s.LEADER_EPOCH).alias("leader_epoch"),
            (F.count(F.lit(1)) - 1).alias("epoch_changes"),
        )
    )
    lags = (
        tables[s.TABLE_LAG_WINDOWS]
        .groupBy(*key)
        .agg(F.max("lag_messages_max").alias("lag_messages_max"), F.max("lag_ms_max").alias("lag_ms_max"))
    )
    if s.TABLE_REPLICA_LAG in tables:
        # The leader's view sees the followers that are down, which report nothing themselves.
        leader_view = (
            tables[s.TABLE_REPLICA_LAG]
            .groupBy(*key)
            .agg(
                F.max(s.LAG_MESSAGES).alias("_leader_lag_messages"),
                F.max(s.TIME_SINCE_CAUGHT_UP_MS).alias("_leader_lag_ms"),
            )
        )
        lags = lags.join(leader_view, key, "full").select(
            *key,
            F.greatest("lag_messages_max", "_leader_lag_messages").alias("lag_messages_max"),
            F.greatest("lag_ms_max", "_leader_lag_ms").alias("lag_ms_max"),
        )
    statuses = (
        tables[s.TABLE_FOLLOWER_STATUS]
        .groupBy(*key)
        .agg(
            *(F.count(F.when(F.col("status") == x, True)).alias(f"n_{x}") for x in s.STATUSES),
            F.min(_severity(F.col("status"))).alias("worst"),
        )
    )
    under = tables[s.TABLE_UNDER_REPLICATED].select(*key, "under_replicated_ms", "isr_shrinks", "isr_expands")
    joined = leaders.join(lags, key, "full").join(statuses, key, "full").join(under, key, "full")
    return joined.withColumn("worst", F.coalesce("worst", F.lit(len(s.STATUSES))))


def _lag_series(follower_lag: DataFrame, chosen: DataFrame, bucket_ms: int) -> DataFrame:
    ts = F.col(s.TS_MS)
    return (
        follower_lag.join(F.broadcast(chosen), [s.TOPIC, s.PARTITION], "left_semi")
        .groupBy(s.TOPIC, s.PARTITION, "follower_id", (ts - F.pmod(ts, F.lit(bucket_ms))).alias("bucket_ms"))
        .agg(F.max(s.LAG_MESSAGES).alias("lag_messages"), F.max(s.LAG_MS).alias("lag_ms"))
    )


def broker_runs(records: DataFrame) -> list[BrokerRun]:
    """Per (broker_id, broker_start_ms): records, first and last ts_ms; ordered by broker, then time.

    One small job over the records (any kind); the record count, the time span, "now" and the
    broker events all derive from it.
    """
    rows = (
        records.where(F.col(s.TS_MS).isNotNull())
        .groupBy(s.BROKER_ID, s.BROKER_START_MS)
        .agg(
            F.count(F.lit(1)).alias("records"),
            F.min(s.TS_MS).alias("first_ts_ms"),
            F.max(s.TS_MS).alias("last_ts_ms"),
        )
        .orderBy(s.BROKER_ID, "first_ts_ms")
        .collect()
    )
    return [
        BrokerRun(r[s.BROKER_ID], r[s.BROKER_START_MS], r["records"], r["first_ts_ms"], r["last_ts_ms"]) for r in rows
    ]


def broker_events(runs: Sequence[BrokerRun], newest_ts_ms: int, window_ms: int) -> list[TimelineEvent]:
    """Broker restarts (a new broker_start_ms) and the last sample before a broker went quiet.

    ``runs`` in ``broker_runs`` order (by broker, then first_ts_ms).
    """
    events: list[TimelineEvent] = []
    for i, run in enumerate(runs):
        broker = run.broker_id
        first_of_broker = i == 0 or runs[i - 1].broker_id != broker
        last_of_broker = i == len(runs) - 1 or runs[i + 1].broker_id != broker
        if not first_of_broker:
            started = run.broker_start_ms or run.first_ts_ms
            events.append(TimelineEvent(started, f"broker {broker} restarted", "broker"))
        if not last_of_broker or run.last_ts_ms < newest_ts_ms - window_ms:
            events.append(TimelineEvent(run.last_ts_ms, f"broker {broker} down", "broker"))
    return events


def _summary_rows(tables: Mapping[str, DataFrame]) -> list[Row]:
    """The worst ``TABLE_ROWS_MAX`` partition summaries, each carrying the totals over all partitions.

    One job: the totals (partitions, followers per status) are window aggregates over the same rows.
    """
    summaries = _partition_summaries(tables)
    everything = Window.partitionBy()
    with_totals = summaries.select(
        "*",
        F.count(F.lit(1)).over(everything).alias("_partitions_total"),
        *(F.sum(f"n_{x}").over(everything).alias(f"_total_{x}") for x in s.STATUSES),
    )
    ordered = with_totals.orderBy(F.col("worst"), F.col("lag_messages_max").desc_nulls_last(), s.TOPIC, s.PARTITION)
    return ordered.limit(TABLE_ROWS_MAX).collect()


def _worst_statuses(status_df: DataFrame) -> list[dict[str, Any]]:
    worst = status_df.orderBy(
        _severity(F.col("status")),
        F.col("lag_messages_last").desc_nulls_last(),
        s.TOPIC,
        s.PARTITION,
        "follower_id",
    ).limit(TABLE_ROWS_MAX)
    return [r.asDict() for r in worst.collect()]


def _collect_lag(
    follower_lag: DataFrame, chosen: DataFrame, bucket_ms: int, replica_lag: DataFrame | None = None
) -> dict[tuple[str, int], list[FollowerSeries]]:
    series: dict[tuple[str, int, int, str], FollowerSeries] = {}
    sources = [("follower", _lag_series(follower_lag, chosen, bucket_ms))]
    if replica_lag is not None:
        leader_view = replica_lag.withColumnRenamed(s.TIME_SINCE_CAUGHT_UP_MS, s.LAG_MS)
        sources.insert(0, ("leader", _lag_series(leader_view, chosen, bucket_ms)))
    for view, frame in sources:
        for r in frame.orderBy("bucket_ms").collect():
            k = (r[s.TOPIC], r[s.PARTITION], r["follower_id"], view)
            one = series.setdefault(k, FollowerSeries(r["follower_id"], [], [], [], view))
            one.ts_ms.append(r["bucket_ms"])
            one.lag_messages.append(r["lag_messages"])
            one.lag_ms.append(r["lag_ms"])
    lag: dict[tuple[str, int], list[FollowerSeries]] = {}
    # The leader's view first: it is the series a reader should look at.
    for (topic, partition, _, _), one in sorted(series.items(), key=lambda kv: (kv[0][:3], kv[0][3] != "leader")):
        lag.setdefault((topic, partition), []).append(one)
    return lag


def _collect_leader_changes(
    leader_timeline: DataFrame, chosen: DataFrame
) -> dict[tuple[str, int], list[TimelineEvent]]:
    changes = (
        leader_timeline.join(F.broadcast(chosen), [s.TOPIC, s.PARTITION], "left_semi")
        .where(F.col("previous_leader_id").isNotNull())
        .orderBy("first_seen_ms")
        .collect()
    )
    events: dict[tuple[str, int], list[TimelineEvent]] = {}
    for r in changes:
        label = f"epoch {r[s.LEADER_EPOCH]}: leader {r[s.LEADER_ID]}"
        events.setdefault((r[s.TOPIC], r[s.PARTITION]), []).append(TimelineEvent(r["first_seen_ms"], label, "leader"))
    return events


def collect_dashboard_data(
    title: str,
    tables: Mapping[str, DataFrame],
    window_ms: int,
    runs: Sequence[BrokerRun],
    chart_partitions_max: int = CHART_PARTITIONS_MAX,
    faults: Sequence[TimelineEvent] = (),
) -> DashboardData:
    """Run the dashboard's aggregations over the tables and collect their small results.

    ``runs`` is ``broker_runs`` of the records the tables came from. Never collects a whole table:
    each query ends in a limit, a small grouping, or the charted partitions' buckets.
    """
    records = sum(run.records for run in runs)
    first = min((run.first_ts_ms for run in runs), default=None)
    last = max((run.last_ts_ms for run in runs), default=None)
    with ThreadPoolExecutor(max_workers=4, thread_name_prefix="dashboard") as pool:
        # Independent of the summary: start them first so they overlap with it.
        rates_done = pool.submit(_collect_byte_rates, tables[s.TABLE_BYTE_RATES])
        worst_done = pool.submit(_worst_statuses, tables[s.TABLE_FOLLOWER_STATUS])
        summary_rows = _summary_rows(tables)
        top = summary_rows[0] if summary_rows else None
        summary = [
            PartitionSummary(
                topic=r[s.TOPIC],
                partition=r[s.PARTITION],
                leader_id=r["leader_id"],
                leader_epoch=r["leader_epoch"],
                epoch_changes=r["epoch_changes"] or 0,
                lag_messages_max=r["lag_messages_max"],
                lag_ms_max=r["lag_ms_max"],
                status_counts={x: r[f"n_{x}"] or 0 for x in s.STATUSES},
                under_replicated_ms=r["under_replicated_ms"] or 0,
                isr_shrinks=r["isr_shrinks"] or 0,
                isr_expands=r["isr_expands"] or 0,
            )
            for r in summary_rows
        ]
        data = DashboardData(
            title=title,
            records=records,
            first_ts_ms=first,
            last_ts_ms=last,
            window_ms=window_ms,
            partitions_total=top["_partitions_total"] if top else 0,
            summary=summary,
        )
        if top is not None:
            data.status_counts = {x: top[f"_total_{x}"] for x in s.STATUSES if top[f"_total_{x}"]}
            data.followers_total = sum(data.status_counts.values())
        charted = [(p.topic, p.partition) for p in summary[:chart_partitions_max]]
        if records and charted and first is not None and last is not None:
            spark = tables[s.TABLE_FOLLOWER_LAG].sparkSession
            chosen = spark.createDataFrame(charted, f"{s.TOPIC} string, {s.PARTITION} int")
            bucket_ms = max(1000, -(-(last - first) // CHART_POINTS_MAX))
            lag_done = pool.submit(
                _collect_lag, tables[s.TABLE_FOLLOWER_LAG], chosen, bucket_ms, tables.get(s.TABLE_REPLICA_LAG)
            )
            events_done = pool.submit(_collect_leader_changes, tables[s.TABLE_LEADER_TIMELINE], chosen)
            data.lag = lag_done.result()
            data.events = events_done.result()
        if records and last is not None:
            data.broker_events = broker_events(runs, last, window_ms)
        data.broker_events = sorted([*data.broker_events, *faults], key=lambda e: e.ts_ms)
        data.byte_rates = rates_done.result()
        data.statuses = worst_done.result()
    return data


_RATE_NAMES = ("client_in", "client_out", "replication_in", "replication_out")


def _collect_byte_rates(byte_rates: DataFrame) -> list[BrokerRates]:
    per_broker = byte_rates.groupBy(s.BROKER_ID, "window_start_ms").agg(
        *(F.sum(f"{n}_bytes_per_s").alias(n) for n in _RATE_NAMES)
    )
    busiest = (
        per_broker.groupBy(s.BROKER_ID)
        .agg(F.sum(sum((F.col(n) for n in _RATE_NAMES), F.lit(0.0))).alias("total"))
        .orderBy(F.col("total").desc(), s.BROKER_ID)
        .limit(BYTE_RATE_BROKERS_MAX)
    )
    rows = per_broker.join(busiest, s.BROKER_ID, "left_semi").orderBy(s.BROKER_ID, "window_start_ms").collect()
    out: dict[int, BrokerRates] = {}
    for r in rows:
        b = out.setdefault(r[s.BROKER_ID], BrokerRates(r[s.BROKER_ID], [], {n: [] for n in _RATE_NAMES}))
        b.window_start_ms.append(r["window_start_ms"])
        for n in _RATE_NAMES:
            b.rates_bytes_per_s[n].append(r[n] or 0.0)
    return [out[k] for k in sorted(out)]


# ---- render: pure Python, data in, HTML out ----


def _dt(ts_ms: int) -> datetime:
    return datetime.fromtimestamp(ts_ms / 1000, tz=UTC)


def _fmt_time(ts_ms: int | None) -> str:
    return "–" if ts_ms is None else _dt(ts_ms).strftime("%Y-%m-%d %H:%M:%S UTC")


def _fmt_duration(ms: int | None) -> str:
    if ms is None:
        return "–"
    if ms < 1000:
        return f"{ms} ms"
    if ms < 120_000:
        return f"{ms / 1000:.1f} s"
    return f"{ms / 60_000:.1f} min"


def _fmt_int(n: int | None) -> str:
    return "–" if n is None else f"{n:,}"


def _badge(status: str, count: int | None = None) -> str:
    colour = _STATUS_COLOURS.get(status, "#57606a")
    text = status if count is None else f"{status} {count}"
    return f'<span class="badge" style="background:{colour}">{html.escape(text)}</span>'


def _colour(follower_id: int) -> str:
    return _PALETTE[follower_id % len(_PALETTE)]


def fault_events(path: Path) -> list[TimelineEvent]:
    """The fault windows `minibroker chaos run` wrote (metrics/fields.py FAULTS_FILE); none if absent."""
    events: list[TimelineEvent] = []
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return events
    for line in lines:
        try:
            raw = json.loads(line)
            events.append(
                TimelineEvent(int(raw["start_ms"]), f"{raw['fault']} ({raw['target']})", "fault", int(raw["end_ms"]))
            )
        except (ValueError, KeyError, TypeError):
            continue  # a line cut by a crash
    return events


def _add_events(fig: go.Figure, events: Iterable[TimelineEvent]) -> None:
    """Vertical lines across all subplots (yref paper), labelled at the top; a fault is a shaded window.
    Labels take three heights in turn so that events seconds apart do not print over each other."""
    for i, e in enumerate(events):
        if e.kind == "fault" and e.end_ts_ms is not None:
            fig.add_vrect(
                x0=_dt(e.ts_ms), x1=_dt(e.end_ts_ms), fillcolor="#bf8700", opacity=0.12, line_width=0, layer="below"
            )
            fig.add_annotation(
                x=_dt(e.ts_ms),
                xref="x",
                yref="paper",
                y=1.01 + 0.05 * (i % 3),
                text=html.escape(e.label),
                showarrow=False,
                font={"size": 10, "color": "#9a6700"},
                xanchor="left",
                yanchor="bottom",
            )
            continue
        leader = e.kind == "leader"
        colour = "#0969da" if leader else "#d1242f"
        x = _dt(e.ts_ms)
        fig.add_shape(
            type="line",
            xref="x",
            yref="paper",
            x0=x,
            x1=x,
            y0=0,
            y1=1,
            line={"color": colour, "width": 1.5, "dash": "dash" if leader else "dot"},
        )
        fig.add_annotation(
            x=x,
            xref="x",
            yref="paper",
            y=1.01 + 0.05 * (i % 3),
            text=html.escape(e.label),
            showarrow=False,
            font={"size": 10, "color": colour},
            xanchor="left",
            yanchor="bottom",
        )


def _lag_figure(key: tuple[str, int], series: Sequence[FollowerSeries], events: Sequence[TimelineEvent]) -> go.Figure:
    fig = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08)
    for one in series:
        xs = [_dt(t) for t in one.ts_ms]
        leader_view = one.view == "leader"
        name = f"follower {one.follower_id}" + ("" if leader_view else " (its own view)")
        style: dict[str, Any] = {"color": _colour(one.follower_id), "width": 1.6 if leader_view else 1.0}
        if not leader_view:
            style["dash"] = "dot"
        fig.add_trace(
            go.Scatter(x=xs, y=one.lag_messages, name=name, legendgroup=name, mode="lines", line=style),
            row=1,
            col=1,
        )
        fig.add_trace(
            go.Scatter(x=xs, y=one.lag_ms, name=name, legendgroup=name, mode="lines", line=style, showlegend=False),
            row=2,
            col=1,
        )
    _add_events(fig, events)
    fig.update_yaxes(title_text="lag (messages)", rangemode="tozero", row=1, col=1)
    fig.update_yaxes(title_text="lag (ms) / since caught up", rangemode="tozero", row=2, col=1)
    fig.update_layout(
        title={"text": f"<b>{html.escape(key[0])}-{key[1]}</b>", "x": 0.01, "y": 0.97},
        height=440,
        margin={"l": 70, "r": 20, "t": 90, "b": 40},
        template="plotly_white",
        legend={"orientation": "h", "y": -0.12},
    )
    return fig


def _rates_figure(rates: Sequence[BrokerRates]) -> go.Figure:
    titles = (
        "client in (bytes/s)",
        "client out (bytes/s)",
        "replication in (bytes/s)",
        "replication out (bytes/s)",
    )
    fig = make_subplots(rows=2, cols=2, shared_xaxes=True, vertical_spacing=0.14, subplot_titles=titles)
    for b in rates:
        xs = [_dt(t) for t in b.window_start_ms]
        name = f"broker {b.broker_id}"
        for i, n in enumerate(_RATE_NAMES):
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=b.rates_bytes_per_s[n],
                    name=name,
                    legendgroup=name,
                    mode="lines",
                    line={"color": _colour(b.broker_id), "width": 1.6},
                    showlegend=i == 0,
                ),
                row=i // 2 + 1,
                col=i % 2 + 1,
            )
    fig.update_layout(
        height=520,
        margin={"l": 60, "r": 20, "t": 40, "b": 40},
        template="plotly_white",
        legend={"orientation": "h", "y": -0.1},
    )
    return fig


class _FigureWriter:
    """Turns figures into <div>s; only the first carries the plotly.js bundle."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, fig: go.Figure) -> str:
        first = self.count == 0
        self.count += 1
        return str(
            pio.to_html(
                fig,
                include_plotlyjs=first,
                full_html=False,
                config={"displaylogo": False, "responsive": True},
            )
        )


_CSS = """
body{font-family:-apple-system,BlinkMacSystemFont,"Segoe UI",Helvetica,Arial,sans-serif;margin:0;
 background:#f6f8fa;color:#1f2328}
header{background:#24292f;color:#fff;padding:18px 28px}
header h1{margin:0;font-size:22px} header p{margin:4px 0 0;color:#c9d1d9;font-size:13px}
main{padding:20px 28px;max-width:1340px}
section{background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:16px 20px;margin-bottom:20px}
h2{font-size:17px;margin:0 0 12px}
.cards{display:flex;gap:12px;flex-wrap:wrap;margin-bottom:20px}
.card{background:#fff;border:1px solid #d0d7de;border-radius:8px;padding:10px 16px;min-width:130px}
.card .v{font-size:22px;font-weight:600} .card .k{font-size:12px;color:#57606a}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:right;padding:5px 8px;border-bottom:1px solid #eaeef2;white-space:nowrap}
th{background:#f6f8fa;position:sticky;top:0} td.l,th.l{text-align:left}
.badge{display:inline-block;color:#fff;border-radius:10px;padding:1px 8px;font-size:11px;font-weight:600;
 margin-right:3px}
.note{font-size:12px;color:#57606a;margin:8px 0 0}
.scroll{max-height:520px;overflow:auto}
"""


def _cards(data: DashboardData) -> str:
    items = [
        ("records", _fmt_int(data.records)),
        ("partitions", _fmt_int(data.partitions_total)),
        ("followers", _fmt_int(data.followers_total)),
        (
            "time span",
            _fmt_duration(
                None if data.first_ts_ms is None or data.last_ts_ms is None else data.last_ts_ms - data.first_ts_ms
            ),
        ),
        ("window", _fmt_duration(data.window_ms)),
    ]
    items += [
        (f"followers {x}", _fmt_int(data.status_counts.get(x, 0))) for x in s.STATUSES if data.status_counts.get(x)
    ]
    return (
        '<div class="cards">'
        + "".join(
            f'<div class="card"><div class="v">{html.escape(v)}</div><div class="k">{html.escape(k)}</div></div>'
            for k, v in items
        )
        + "</div>"
    )


def _summary_table(data: DashboardData) -> str:
    head = (
        "<tr><th class=l>partition</th><th>leader</th><th>epoch</th><th>epoch changes</th>"
        "<th>max lag (msgs)</th><th>max lag (ms)</th><th class=l>follower status</th>"
        "<th>under-replicated</th><th>ISR shrinks</th><th>ISR expands</th></tr>"
    )
    rows = []
    for p in data.summary:
        badges = "".join(_badge(x, n) for x, n in p.status_counts.items() if n)
        rows.append(
            f"<tr><td class=l>{html.escape(p.topic)}-{p.partition}</td><td>{_fmt_int(p.leader_id)}</td>"
            f"<td>{_fmt_int(p.leader_epoch)}</td><td>{p.epoch_changes}</td><td>{_fmt_int(p.lag_messages_max)}</td>"
            f"<td>{_fmt_int(p.lag_ms_max)}</td><td class=l>{badges}</td>"
            f"<td>{_fmt_duration(p.under_replicated_ms)}</td><td>{p.isr_shrinks}</td><td>{p.isr_expands}</td></tr>"
        )
    note = ""
    if data.partitions_total > len(data.summary):
        note = (
            f'<p class="note">Showing the {len(data.summary)} partitions with the worst follower status '
            f"and highest lag of {data.partitions_total:,}.</p>"
        )
    return f'<div class="scroll"><table>{head}{"".join(rows)}</table></div>{note}'


def _status_table(data: DashboardData) -> str:
    head = (
        "<tr><th class=l>partition</th><th>follower</th><th class=l>status</th><th>samples</th>"
        "<th>lag (msgs)</th><th>lag (ms)</th><th>fetch offset</th><th>leader</th><th>epoch</th>"
        "<th>truncations</th><th>rewinds</th><th class=l>last sample</th></tr>"
    )
    rows = [
        f"<tr><td class=l>{html.escape(r[s.TOPIC])}-{r[s.PARTITION]}</td><td>{r['follower_id']}</td>"
        f"<td class=l>{_badge(r['status'])}</td><td>{r['samples']}</td>"
        f"<td>{_fmt_int(r['lag_messages_last'])}</td>"
        f"<td>{_fmt_int(r['lag_ms_last'])}</td><td>{_fmt_int(r['fetch_offset_last'])}</td>"
        f"<td>{_fmt_int(r['leader_id_last'])}</td><td>{_fmt_int(r['leader_epoch_last'])}</td>"
        f"<td>{r['truncations']}</td><td>{r['rewinds']}</td>"
        f"<td class=l>{_fmt_time(r['last_ts_ms'])}</td></tr>"
        for r in data.statuses
    ]
    note = ""
    if data.followers_total > len(data.statuses):
        shown = len(data.statuses)
        note = f'<p class="note">Showing the {shown} worst of {data.followers_total:,} followers.</p>'
    legend = (
        '<p class="note">OK: catching up or caught up. '
        "WARN: lag above 0 and never decreasing over the window. "
        "STALL: lag above 0 and fetch offset unchanged. STOP: no sample for longer than the window. "
        "TRUNCATE: fetch offset went back right after a leader-epoch change (expected after a leader kill). "
        "REWIND: fetch offset went back without one.</p>"
    )
    return f'<div class="scroll"><table>{head}{"".join(rows)}</table></div>{note}{legend}'


def render_dashboard(data: DashboardData) -> str:
    """The whole page: summary first, then lag per partition, byte rates, follower statuses."""
    figure = _FigureWriter()
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(data.title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<header><h1>{html.escape(data.title)}</h1><p>{_fmt_time(data.first_ts_ms)} → "
        f"{_fmt_time(data.last_ts_ms)}</p></header><main>",
        _cards(data),
        f"<section><h2>Partitions</h2>{_summary_table(data)}</section>",
    ]
    if data.lag:
        charts = []
        for key, series in data.lag.items():
            events = sorted([*data.events.get(key, []), *data.broker_events], key=lambda e: e.ts_ms)
            charts.append(figure(_lag_figure(key, series, events)))
        shown = (
            f"the {len(data.lag)} partitions at the top of the table"
            if data.partitions_total > len(data.lag)
            else "every partition"
        )
        parts.append(
            f"<section><h2>Follower lag</h2><p class=note>Max per bucket for {shown}. Dashed blue lines: "
            "leader changes (new epoch); dotted red lines: a broker going down or restarting.</p>"
            f"{''.join(charts)}</section>"
        )
    if data.byte_rates:
        parts.append(
            f"<section><h2>Byte rates per broker</h2>{figure(_rates_figure(data.byte_rates))}"
            f"<p class=note>Sum over the broker's partitions per {_fmt_duration(data.window_ms)} window."
            "</p></section>"
        )
    parts.append(f"<section><h2>Follower status</h2>{_status_table(data)}</section>")
    parts.append("</main></body></html>")
    return "\n".join(parts)
