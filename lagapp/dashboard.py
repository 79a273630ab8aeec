"""The lag dashboard: what the page shows (``DashboardData``) and the page, one self-contained HTML file.

How this works: ``lagapp.dashboard_data`` collects the page's small aggregates from the written tables
into a ``DashboardData`` (the worst partitions' summary with the totals and the worst values, the cluster
health row, each broker's event-loop lag and the metadata quorum as the brokers follow it, re-bucketed to
at most ``CHART_POINTS_MAX`` points, the catch-up time of every broker restart, lag bucketed to at most
``CHART_POINTS_MAX`` points per follower for the charted partitions, byte rates per broker and window, the
worst follower statuses).
``render_dashboard`` is pure Python: data in, one self-contained HTML page out. plotly.js is inlined once,
with the first figure, so the page opens offline. The worst ``CHART_PARTITIONS_MAX`` partitions are drawn
at once; the next ``CHART_MORE_MAX`` carry their figure as JSON and are drawn when opened (one chart per
partition does not scale to a large cluster).
"""

from __future__ import annotations

import contextlib
import functools
import html
import json
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from lagapp import schema as s

CHART_POINTS_MAX = 300
CHART_BUCKET_MIN_MS = 250
CHART_PARTITIONS_MAX = 12
CHART_MORE_MAX = 48  # partitions after the first CHART_PARTITIONS_MAX whose charts are drawn on demand
KILL_CARDS_MAX = 8
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
    under_min_isr_ms: int = 0


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
    """A mark on the lag charts: a leader change or a broker going down or restarting (a vertical line),
    or a chaos fault (a shaded window up to end_ts_ms)."""

    ts_ms: int
    label: str
    kind: str  # "leader", "broker" or "fault"
    end_ts_ms: int | None = None  # a fault's window ends here


@dataclass(frozen=True)
class Restart:
    """A broker that went down (its last record before a gap) and, unless it stayed down, came back.

    partitions_out: the partitions whose ISR it left meanwhile (the leaders' view); caught_up_ms: from
    its restart until the last of them had it back in the ISR (None while any is still out)."""

    broker_id: int
    down_ms: int
    restart_ms: int | None
    until_ms: int | None = None  # the last record of the run after the restart
    partitions_out: int = 0
    partitions_behind: int = 0
    caught_up_ms: int | None = None


@dataclass(frozen=True)
class Headline:
    """The worst values over every partition, with the partition each belongs to ("topic-p")."""

    lag_messages: int | None = None
    lag_messages_at: str = ""
    lag_ms: int | None = None
    lag_ms_at: str = ""
    under_replicated_ms: int | None = None
    under_replicated_at: str = ""
    under_min_isr_ms: int | None = None
    under_min_isr_at: str = ""


@dataclass
class MetadataLag:
    """One broker's copy of the metadata log behind the quorum's committed offset, per chart bucket: the
    largest ``MetadataLagRecords`` and ``MetadataLagMs`` in the bucket."""

    bucket_start_ms: list[int] = field(default_factory=list)
    records: list[int | None] = field(default_factory=list)
    ms: list[int | None] = field(default_factory=list)


@dataclass
class QuorumSeries:
    """The metadata quorum as the brokers follow it, per chart bucket (``broker_health``; controllers emit
    no metrics, so this is the brokers' view, not the voters' own)."""

    bucket_start_ms: list[int] = field(default_factory=list)
    # the highest epoch in which a broker saw a quorum leader, and that leader (the active controller);
    # None where no broker saw one
    leader_epoch: list[int | None] = field(default_factory=list)
    leader_id: list[int | None] = field(default_factory=list)
    # where no broker saw a leader: the highest epoch they reported (an election under way); None elsewhere
    no_leader_epoch: list[int | None] = field(default_factory=list)
    metadata_lag: dict[int, MetadataLag] = field(default_factory=dict)  # per broker


@dataclass
class HealthSeries:
    """``cluster_health`` per chart bucket (the max of each count in the bucket)."""

    bucket_start_ms: list[int] = field(default_factory=list)
    under_replicated: list[int] = field(default_factory=list)
    under_min_isr: list[int] = field(default_factory=list)
    offline: list[int] = field(default_factory=list)
    leaders: dict[int, list[int]] = field(default_factory=dict)  # broker -> partitions it led
    # broker -> (bucket starts, the largest LoopLagMaxMs in each): ``broker_health``, buckets of its own.
    loop_lag_ms: dict[int, tuple[list[int], list[float]]] = field(default_factory=dict)
    quorum: QuorumSeries = field(default_factory=QuorumSeries)  # ``broker_health`` too, buckets of its own


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
    headline: Headline = field(default_factory=Headline)
    restarts: list[Restart] = field(default_factory=list)
    health: HealthSeries | None = None
    charted_eager: int = CHART_PARTITIONS_MAX  # lag entries after this many are drawn on demand
    refresh_s: int | None = None  # while following, the page reloads itself this often


# The byte rates of ``BrokerRates``, in the order the page draws them.
RATE_NAMES = ("client_in", "client_out", "replication_in", "replication_out")


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


LABEL_CHAR_PX = 6.2  # width of one character of a 10 px label
PLOT_WIDTH_PX = 1150  # the plot area of a chart on the page's 1340 px column
LABEL_LEVELS_MAX = 4


def label_levels(events: Sequence[TimelineEvent], span_ms: int, plot_width_px: int = PLOT_WIDTH_PX) -> list[int]:
    """A row (0 = lowest) for each event's label so that labels on one row do not overlap.

    Events in time order; a label starts at its event and is about LABEL_CHAR_PX per character wide.
    Each label takes the lowest row whose last label ends before it starts; when all
    LABEL_LEVELS_MAX rows are taken, the row that frees first (the labels are short: rarely needed).
    """
    ms_per_px = max(span_ms, 1) / plot_width_px
    ends: list[float] = []  # per row: where its last label ends, in ms
    levels = []
    for e in events:
        width_ms = (len(e.label) * LABEL_CHAR_PX + 8) * ms_per_px
        free = [i for i, end in enumerate(ends) if end <= e.ts_ms]
        if free:
            row = free[0]
        elif len(ends) < LABEL_LEVELS_MAX:
            row = len(ends)
            ends.append(0.0)
        else:
            row = min(range(len(ends)), key=lambda i: ends[i])
        ends[row] = e.ts_ms + width_ms
        levels.append(row)
    return levels


def _short_label(e: TimelineEvent) -> str:
    """Labels say only what changed: "b2 down", "b2 up", "e3 L1" (epoch 3, leader 1)."""
    return (
        e.label.replace("broker ", "b").replace(" restarted", " up").replace("epoch ", "e").replace(": leader ", " L")
    )


def _add_events(layout: dict[str, Any], events: Sequence[TimelineEvent], span_ms: int) -> int:
    """Vertical lines across all subplots (yref paper), labelled at the top, stacked where they would
    overlap; a chaos fault is a shaded window from its start to its end (one per subplot), labelled like
    the lines. Adds them to the figure's ``layout`` (JSON); returns the number of label rows used."""
    labels = [TimelineEvent(e.ts_ms, _short_label(e), e.kind, e.end_ts_ms) for e in events]
    levels = label_levels(labels, span_ms)
    shapes: list[dict[str, Any]] = []
    annotations: list[dict[str, Any]] = []
    for e, level in zip(labels, levels, strict=True):
        leader = e.kind == "leader"
        fault = e.kind == "fault" and e.end_ts_ms is not None
        colour = "#9a6700" if fault else "#0969da" if leader else "#d1242f"
        if fault:
            shapes += [
                {
                    "fillcolor": "#bf8700",
                    "layer": "below",
                    "line": {"width": 0},
                    "opacity": 0.12,
                    "type": "rect",
                    "x0": e.ts_ms,
                    "x1": e.end_ts_ms,
                    "xref": x,
                    "y0": 0,
                    "y1": 1,
                    "yref": f"{y} domain",
                }
                for x, y in (("x", "y"), ("x2", "y2"))
            ]
        else:
            shapes.append(
                {
                    "line": {"color": colour, "dash": "dash" if leader else "dot", "width": 1.5},
                    "type": "line",
                    "x0": e.ts_ms,
                    "x1": e.ts_ms,
                    "xref": "x",
                    "y0": 0,
                    "y1": 1,
                    "yref": "paper",
                }
            )
        annotations.append(
            {
                "font": {"color": colour, "size": 10},
                "showarrow": False,
                "text": html.escape(e.label),
                "x": e.ts_ms,
                "xanchor": "left",
                "xref": "x",
                "y": 1.01,
                "yanchor": "bottom",
                "yref": "paper",
                "yshift": 14 * level,
            }
        )
    if shapes:
        layout["shapes"] = shapes
    if annotations:
        layout["annotations"] = annotations
    return max(levels, default=-1) + 1


@functools.cache
def _lag_axes() -> str:
    """The axes of two subplots sharing x (``make_subplots``' layout), as JSON: built once, not per chart."""
    with _no_default_template():
        layout = make_subplots(rows=2, cols=1, shared_xaxes=True, vertical_spacing=0.08).to_plotly_json()["layout"]
    return json.dumps(layout)


def _lag_figure(
    key: tuple[str, int], series: Sequence[FollowerSeries], events: Sequence[TimelineEvent]
) -> dict[str, Any]:
    """Lag in messages above, lag in ms (time since caught up) below. x values are epoch ms on a date axis
    (plotly reads them as UTC), which keeps the figure's JSON small. The figure is plotly's JSON, written
    directly: plotly's figure objects validate every property as it is set, which cost most of the page's
    render time with 60 charts."""
    layout: dict[str, Any] = json.loads(_lag_axes())
    span = [t for one in series for t in one.ts_ms[:1] + one.ts_ms[-1:]] + [e.ts_ms for e in events]
    span += [e.end_ts_ms for e in events if e.end_ts_ms is not None]
    traces: list[dict[str, Any]] = []
    for one in series:
        leader_view = one.view == "leader"
        name = f"follower {one.follower_id}" + ("" if leader_view else " (its own view)")
        # keys in plotly's order (its JSON sorts a figure's properties), so the page is what it was
        style: dict[str, Any] = {"color": _colour(one.follower_id), "width": 1.6}
        if not leader_view:
            style = {"color": style["color"], "dash": "dot", "width": 1.0}
        trace = {"legendgroup": name, "line": style, "mode": "lines", "name": name}
        traces.append({**trace, "x": one.ts_ms, "y": one.lag_messages, "type": "scatter", "xaxis": "x", "yaxis": "y"})
        traces.append(
            {
                **trace,
                "showlegend": False,
                "x": one.ts_ms,
                "y": one.lag_ms,
                "type": "scatter",
                "xaxis": "x2",
                "yaxis": "y2",
            }
        )
    rows = _add_events(layout, events, max(span, default=0) - min(span, default=0))
    for axis in ("xaxis", "xaxis2"):
        layout[axis]["type"] = "date"
    for axis, title in (("yaxis", "lag (messages)"), ("yaxis2", "lag (ms) / since caught up")):
        layout[axis].update(title={"text": title}, rangemode="tozero")
    top = 50 + 14 * rows
    layout.update(
        title={"pad": {"t": 8}, "text": f"<b>{html.escape(key[0])}-{key[1]}</b>", "x": 0.01, "y": 1, "yanchor": "top"},
        margin={"l": 70, "r": 20, "t": top + 20, "b": 40},
        legend={"orientation": "h", "y": -0.12},
        height=400 + top,
    )
    return {"data": traces, "layout": layout}


def _health_figure(health: HealthSeries) -> go.Figure:
    """The row an SRE expects from Grafana's Kafka dashboards: partition counts and leaders over time."""
    titles = [
        "under-replicated partitions",
        "under min ISR partitions",
        "offline partitions",
        "leaders per broker",
        "event-loop lag, max (ms)",
    ]
    cols = 5 if health.loop_lag_ms else 4
    quorum = health.quorum if health.quorum.bucket_start_ms else None
    if quorum is None:
        fig = make_subplots(rows=1, cols=cols, horizontal_spacing=0.04, subplot_titles=titles[:cols])
    else:
        # A second row, the metadata quorum as the brokers see it: its leader epoch, and their lag behind it.
        left = cols // 2
        specs: list[list[dict[str, Any] | None]] = [
            [{}] * cols,
            [{"colspan": left}, *[None] * (left - 1), {"colspan": cols - left}, *[None] * (cols - left - 1)],
        ]
        fig = make_subplots(
            rows=2,
            cols=cols,
            specs=specs,
            horizontal_spacing=0.04,
            vertical_spacing=0.22,
            subplot_titles=[*titles[:cols], "metadata quorum: leader epoch", "metadata lag (records)"],
        )
    xs = health.bucket_start_ms
    counts = ((health.under_replicated, "#b58100"), (health.under_min_isr, "#d1242f"), (health.offline, "#57606a"))
    for i, (ys, colour) in enumerate(counts):
        fig.add_trace(
            go.Scatter(x=xs, y=ys, mode="lines", line={"color": colour, "width": 1.6, "shape": "hv"}, showlegend=False),
            row=1,
            col=i + 1,
        )
    for broker, ys in health.leaders.items():
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                name=f"broker {broker}",
                legendgroup=f"broker {broker}",
                mode="lines",
                line={"color": _colour(broker), "width": 1.6, "shape": "hv"},
            ),
            row=1,
            col=4,
        )
    for broker, (lag_xs, lag_ys) in health.loop_lag_ms.items():
        fig.add_trace(
            go.Scatter(
                x=lag_xs,
                y=lag_ys,
                name=f"broker {broker}",
                legendgroup=f"broker {broker}",
                showlegend=broker not in health.leaders,
                mode="lines",
                line={"color": _colour(broker), "width": 1.6, "shape": "hv"},
            ),
            row=1,
            col=5,
        )
    shown = {*health.leaders, *health.loop_lag_ms}
    if quorum is not None:
        _add_quorum(fig, quorum, shown, lag_col=cols // 2 + 1)
    fig.update_xaxes(type="date", nticks=4)
    small = max([*health.under_replicated, *health.offline, 1]) < 8
    for col in range(1, 5):
        fig.update_yaxes(rangemode="tozero", dtick=1 if small else None, row=1, col=col)
    if health.loop_lag_ms:
        fig.update_yaxes(rangemode="tozero", row=1, col=5)
    fig.update_layout(
        height=260 if quorum is None else 520,
        margin={"l": 40, "r": 20, "t": 40, "b": 30},
        legend={"orientation": "h", "y": -0.2 if quorum is None else -0.1},
    )
    return fig


def _add_quorum(fig: go.Figure, quorum: QuorumSeries, shown: set[int], lag_col: int) -> None:
    """The health row's second row: the quorum's leader epoch over time as the brokers saw it (a step line,
    broken where no broker saw a leader, those buckets marked "no active controller"), and each broker's
    metadata lag in records (ms on hover). ``shown``: brokers the legend already names."""
    xs = quorum.bucket_start_ms
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=quorum.leader_epoch,
            text=[
                f"epoch {epoch}: leader {leader}" if leader is not None else "no active controller"
                for epoch, leader in zip(quorum.leader_epoch, quorum.leader_id, strict=True)
            ],
            hovertemplate="%{text}<extra></extra>",
            mode="lines+markers",  # a bucket alone between two gaps still shows
            marker={"size": 4},
            line={"color": "#0969da", "width": 1.6, "shape": "hv"},
            showlegend=False,
        ),
        row=2,
        col=1,
    )
    gaps = [i for i, leader in enumerate(quorum.leader_id) if leader is None]
    if gaps:
        fig.add_trace(
            go.Scatter(
                x=[xs[i] for i in gaps],
                y=[quorum.no_leader_epoch[i] for i in gaps],
                text=[
                    "no active controller" + ("" if e is None else f" (epoch {e})")
                    for e in (quorum.no_leader_epoch[i] for i in gaps)
                ],
                hovertemplate="%{text}<extra></extra>",
                mode="markers",
                marker={"color": "#d1242f", "symbol": "x", "size": 7},
                showlegend=False,
            ),
            row=2,
            col=1,
        )
    for broker, lag in quorum.metadata_lag.items():
        fig.add_trace(
            go.Scatter(
                x=lag.bucket_start_ms,
                y=lag.records,
                text=[
                    f"broker {broker}: {_fmt_int(records)} records, {_fmt_duration(ms)} behind"
                    for records, ms in zip(lag.records, lag.ms, strict=True)
                ],
                hovertemplate="%{text}<extra></extra>",
                name=f"broker {broker}",
                legendgroup=f"broker {broker}",
                showlegend=broker not in shown,
                mode="lines",
                line={"color": _colour(broker), "width": 1.6, "shape": "hv"},
            ),
            row=2,
            col=lag_col,
        )
    small = max([e for e in quorum.leader_epoch if e is not None] or [1]) < 8
    fig.update_yaxes(rangemode="tozero", dtick=1 if small else None, row=2, col=1)
    fig.update_yaxes(rangemode="tozero", row=2, col=lag_col)


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
        for i, n in enumerate(RATE_NAMES):
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
        legend={"orientation": "h", "y": -0.1},
    )
    return fig


TEMPLATE = "plotly_white"


class _FigureWriter:
    """Turns figures into <div>s; only the first carries the plotly.js bundle."""

    def __init__(self) -> None:
        self.count = 0

    def __call__(self, fig: go.Figure | dict[str, Any]) -> str:
        first = self.count == 0
        self.count += 1
        # The template goes into the figure's JSON as it is written: set on the figure, plotly would
        # validate and deep-copy the whole template once per chart (most of the page's render time).
        spec = fig.to_plotly_json() if isinstance(fig, go.Figure) else {**fig, "layout": dict(fig["layout"])}
        spec["layout"]["template"] = _template_json()
        return str(
            pio.to_html(
                spec,
                include_plotlyjs=first,
                full_html=False,
                config={"displaylogo": False, "responsive": True},
                validate=False,
            )
        )


@functools.cache
def _template_json() -> dict[str, Any]:
    """plotly_white as plain JSON, built once."""
    template: dict[str, Any] = pio.templates[TEMPLATE].to_plotly_json()
    return template


@contextlib.contextmanager
def _no_default_template() -> Iterator[None]:
    """Figures built meanwhile get no template (see `_FigureWriter`): plotly's default would be copied into
    each one and replaced anyway."""
    previous = pio.templates.default
    pio.templates.default = None
    try:
        yield
    finally:
        pio.templates.default = previous


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
.card .d{font-size:11px;color:#57606a;margin-top:2px}
details.more-lag{border-top:1px solid #eaeef2;padding:6px 0} details.more-lag summary{cursor:pointer;font-size:13px}
table{border-collapse:collapse;width:100%;font-size:13px}
th,td{text-align:right;padding:5px 8px;border-bottom:1px solid #eaeef2;white-space:nowrap}
th{background:#f6f8fa;position:sticky;top:0} td.l,th.l{text-align:left}
.badge{display:inline-block;color:#fff;border-radius:10px;padding:1px 8px;font-size:11px;font-weight:600;
 margin-right:3px}
.note{font-size:12px;color:#57606a;margin:8px 0 0}
.scroll{max-height:520px;overflow:auto}
"""


def _card(value: str, key: str, detail: str = "", colour: str = "") -> str:
    style = f' style="color:{colour}"' if colour else ""
    sub = f'<div class="d">{html.escape(detail)}</div>' if detail else ""
    head = f'<div class="v"{style}>{html.escape(value)}</div><div class="k">{html.escape(key)}</div>'
    return f'<div class="card">{head}{sub}</div>'


def _restart_card(r: Restart) -> str:
    down = f"down at {_fmt_time(r.down_ms)[11:19]}"
    if r.restart_ms is None:
        return _card("still down", f"broker {r.broker_id}", down, "#d1242f")
    detail = f"{down}, {_fmt_duration(r.restart_ms - r.down_ms)}; out of {r.partitions_out} ISRs"
    if r.partitions_out == 0:
        # back before any leader dropped it from an ISR: nothing to catch up, and the card says so
        duration = _fmt_duration(r.restart_ms - r.down_ms)
        return _card("–", f"broker {r.broker_id} catch-up", f"{down}, {duration}; never out of an ISR")
    if r.caught_up_ms is None:
        return _card(
            "not caught up", f"broker {r.broker_id} catch-up", f"{detail}, {r.partitions_behind} behind", "#d1242f"
        )
    return _card(_fmt_duration(r.caught_up_ms), f"broker {r.broker_id} catch-up after restart", detail)


def _cards(data: DashboardData) -> str:
    """What went wrong and for how long: the worst lag (leader's view or the follower's, the larger), the
    longest time a partition was under-replicated and under min ISR, peak offline partitions, and the
    catch-up time after every broker restart; then the counts of followers per status."""
    h = data.headline
    items = [
        _card(_fmt_int(h.lag_messages), "worst lag (messages)", h.lag_messages_at, "#d1242f" if h.lag_messages else ""),
        _card(_fmt_duration(h.lag_ms), "worst time behind", h.lag_ms_at),
        _card(
            _fmt_duration(h.under_replicated_ms),
            "longest under-replicated",
            h.under_replicated_at if h.under_replicated_ms else "",
            "#b58100" if h.under_replicated_ms else "",
        ),
        _card(
            _fmt_duration(h.under_min_isr_ms),
            "longest under min ISR",
            h.under_min_isr_at if h.under_min_isr_ms else "",
            "#d1242f" if h.under_min_isr_ms else "",
        ),
    ]
    if data.health is not None and data.health.offline:
        peak = max(data.health.offline)
        items.append(_card(_fmt_int(peak), "offline partitions (peak)", "", "#d1242f" if peak else ""))
    items += [_restart_card(r) for r in data.restarts[:KILL_CARDS_MAX]]
    if len(data.restarts) > KILL_CARDS_MAX:
        items.append(_card(f"+{len(data.restarts) - KILL_CARDS_MAX}", "more broker restarts"))
    counts = "".join(_badge(x, n) for x, n in data.status_counts.items() if n)
    items.append(
        f'<div class="card"><div class="v">{_fmt_int(data.partitions_total)} / {_fmt_int(data.followers_total)}</div>'
        f'<div class="k">partitions / followers</div><div class="d">{counts}</div></div>'
    )
    return '<div class="cards">' + "".join(items) + "</div>"


def _summary_table(data: DashboardData) -> str:
    head = (
        "<tr><th class=l>partition</th><th>leader</th><th>epoch</th><th>epoch changes</th>"
        "<th>max lag (msgs)</th><th>max lag (ms)</th><th class=l>follower status</th>"
        "<th>under-replicated</th><th>under min ISR</th><th>ISR shrinks</th><th>ISR expands</th></tr>"
    )
    rows = []
    for p in data.summary:
        badges = "".join(_badge(x, n) for x, n in p.status_counts.items() if n)
        name = html.escape(f"{p.topic}-{p.partition}")
        rows.append(
            f'<tr><td class=l><a href="#lag-{name}">{name}</a></td><td>{_fmt_int(p.leader_id)}</td>'
            f"<td>{_fmt_int(p.leader_epoch)}</td><td>{p.epoch_changes}</td><td>{_fmt_int(p.lag_messages_max)}</td>"
            f"<td>{_fmt_int(p.lag_ms_max)}</td><td class=l>{badges}</td>"
            f"<td>{_fmt_duration(p.under_replicated_ms)}</td><td>{_fmt_duration(p.under_min_isr_ms)}</td>"
            f"<td>{p.isr_shrinks}</td><td>{p.isr_expands}</td></tr>"
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


# Draws an on-demand chart when its <details> opens (or is the target of a link from the table).
_LAZY_JS = """
function mbDraw(d){var div=d.querySelector('.lag-chart');if(!d.open||div.dataset.drawn)return;
var fig=JSON.parse(d.querySelector('script[type="application/json"]').textContent);
fig.layout.template=JSON.parse(document.getElementById('mb-template').textContent);
Plotly.newPlot(div,fig.data,fig.layout,{displaylogo:false,responsive:true});div.dataset.drawn='1';}
document.querySelectorAll('details.more-lag').forEach(function(d){d.addEventListener('toggle',function(){mbDraw(d);});});
function mbOpen(){var el=location.hash&&document.getElementById(location.hash.slice(1));
if(el&&el.tagName==='DETAILS'){el.open=true;mbDraw(el);}}
window.addEventListener('hashchange',mbOpen);mbOpen();
"""


def _lazy_chart(key: tuple[str, int], fig: dict[str, Any], lag_max: int | None) -> str:
    """A closed <details> holding the figure's JSON (without its template: _LAZY_JS adds the page's one,
    written once beside the script) and drawn when opened."""
    name = html.escape(f"{key[0]}-{key[1]}")
    figure_json = pio.to_json(fig, validate=False).replace("</", "<\\/")  # never ends the <script> early
    return (
        f'<details class="more-lag" id="lag-{name}"><summary>{name}: max lag {_fmt_int(lag_max)} messages</summary>'
        f'<div class="lag-chart" data-partition="{name}"></div>'
        f'<script type="application/json">{figure_json}</script></details>'
    )


def render_dashboard(data: DashboardData) -> str:
    """The whole page: headline cards, the health row, the partition table, lag per partition (the worst
    drawn, the next on demand), byte rates, follower statuses."""
    with _no_default_template():
        return _render_dashboard(data)


def _render_dashboard(data: DashboardData) -> str:
    figure = _FigureWriter()
    span = ""
    if data.first_ts_ms is not None and data.last_ts_ms is not None:
        span = f" ({_fmt_duration(data.last_ts_ms - data.first_ts_ms)})"
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="refresh" content="{data.refresh_s}">' if data.refresh_s else "",
        f"<title>{html.escape(data.title)}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<header><h1>{html.escape(data.title)}</h1><p>{_fmt_time(data.first_ts_ms)} → "
        f"{_fmt_time(data.last_ts_ms)}{span} · {_fmt_int(data.records)} metric records · "
        f"{_fmt_duration(data.window_ms)} windows</p></header><main>",
        _cards(data),
    ]
    if data.health is not None and data.health.bucket_start_ms:
        parts.append(
            f'<section><h2>Cluster health</h2><div class="health-chart">{figure(_health_figure(data.health))}</div>'
            "<p class=note>Partitions per state over time, from the leaders' samples (the max in each bucket); "
            "offline: no leader reported the partition. Event-loop lag: how long ready work (requests, "
            "fetchers, the heartbeat to the controller) waited for each broker's loop, the largest wait in "
            "the bucket."
            + (
                " Metadata quorum, as the brokers follow it (controllers emit no metrics, so this is the brokers' "
                "view, not the voters' own lag): the highest epoch in which a broker saw an active controller, "
                "its id on hover, broken and marked × where no broker saw one (no active controller); and how "
                "far each broker's copy of the metadata log is behind what the quorum committed, the largest in "
                "the bucket, in records (ms on hover)."
                if data.health.quorum.bucket_start_ms
                else ""
            )
            + "</p></section>"
        )
    parts.append(f"<section><h2>Partitions</h2>{_summary_table(data)}</section>")
    if data.lag:
        charts, more = [], []
        lag_max = {(p.topic, p.partition): p.lag_messages_max for p in data.summary}
        for i, (key, series) in enumerate(data.lag.items()):
            events = sorted([*data.events.get(key, []), *data.broker_events], key=lambda e: e.ts_ms)
            fig = _lag_figure(key, series, events)
            if i < data.charted_eager:
                name = html.escape(f"{key[0]}-{key[1]}")
                charts.append(f'<div class="lag-chart" id="lag-{name}" data-partition="{name}">{figure(fig)}</div>')
            else:
                more.append(_lazy_chart(key, fig, lag_max.get(key)))
        shown = (
            f"the {len(charts)} partitions at the top of the table"
            if data.partitions_total > len(charts)
            else "every partition"
        )
        more_html = ""
        if more:
            rest = data.partitions_total - len(charts) - len(more)
            more_html = (
                f"<h2>More partitions</h2><p class=note>The next {len(more)} in the table's order; open one to draw it"
                + (f" ({rest:,} more are in the Parquet tables)" if rest > 0 else "")
                + f'.</p>{"".join(more)}<script type="application/json" id="mb-template">'
                + json.dumps(_template_json()).replace("</", "<\\/")
                + f"</script><script>{_LAZY_JS}</script>"
            )
        parts.append(
            f"<section><h2>Follower lag</h2><p class=note>Max per bucket for {shown}. Solid: the leader's view "
            "(lag behind the leader's log end, and time since last caught up), which goes on while a follower "
            "is down; dotted: the follower's own view. Dashed blue lines: leader changes (eN LM: epoch N, "
            "leader M); dotted red lines: a broker going down or coming back up (bN down, bN up); shaded amber: a "
            "chaos fault's window (fault (target)).</p>"
            f"{''.join(charts)}{more_html}</section>"
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
