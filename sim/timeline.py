"""A run of the simulator as a page a person can read: `minibroker sim ... --html FILE`.

How this works
--------------
A `Recorder` rides along a run without changing it (it draws no random numbers and schedules nothing, so
the trace hash is the one the run has without it). The network hands it every message that decides
replication (LEADER_AND_ISR, FETCH, OffsetsForLeaderEpoch, ALTER_PARTITION, PRODUCE and their answers)
with its send and arrival times, or as lost; the runner's 50 ms check tick hands it every replica's
role, leader epoch, LEO and HW, kept only where they changed. `write_page` turns that and the run's trace
(faults, kills, restarts, scenario steps, the violation) into one self-contained HTML file (plotly.js
inlined, so it opens offline), one figure per partition, the violation's partition first:

- the upper plot: each replica's LEO (solid) and HW (dashed) over virtual time, as steps;
- the lower plot: one lane per node (the controller on top, then each broker). A broker's lane is
  coloured by its role for the partition (leader, follower, offline), with its leader epoch written on
  it; messages are arrows from the sender's lane at the time sent to the receiver's lane at the time
  received (hover for the fields: offsets, epochs, the diverging epoch); zoomed out past
  `DETAIL_SPAN_S` they fold into counts per lane and 100 ms, zoomed in each one is drawn;
- faults as shaded windows across both plots, with what they hit; a drop of a replica's LEO as a mark
  "truncated from X to Y" (with the diverging epoch or HW that caused it when the message before it said);
- the violation pinned as a red line with its check and message, the events that led to it marked;
- a scripted scenario's steps as numbered captions (the step tables of docs/kip-scenarios.md).
"""

from __future__ import annotations

import dataclasses
import html
import json
import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sim.cluster import CONTROLLER_ID

if TYPE_CHECKING:
    from sim.cluster import SimCluster
    from sim.runner import RunResult

CONTROLLER_LANE = "controller"
DETAIL_SPAN_S = 3.0  # zoomed in narrower than this, every message is drawn; wider, counts per bucket
COUNT_BUCKET_S = 0.1
RECORDED = {
    "LeaderAndIsrRequest": "LEADER_AND_ISR",
    "FetchRequest": "FETCH",
    "FetchResponse": "FETCH answer",
    "OffsetForLeaderEpochRequest": "OffsetsForLeaderEpoch",
    "OffsetForLeaderEpochResponse": "OffsetsForLeaderEpoch answer",
    "AlterPartitionRequest": "ALTER_PARTITION",
    "AlterPartitionResponse": "ALTER_PARTITION answer",
    "ProduceRequest": "PRODUCE",
    "ProduceResponse": "PRODUCE answer",
    "LeaderAndIsrResponse": "LEADER_AND_ISR answer",
}
LIFECYCLE = {"kill": "killed", "start": "started", "restart": "restarted", "pause": "paused", "resume": "resumed"}
ROLE_COLOURS = {"leader": "#2da44e", "follower": "#54aeff", "offline": "#8c959f"}
FAULT_COLOURS = {"kill": "#cf222e", "pause": "#bf8700", "partition": "#8250df", "disk-loss": "#953800"}


@dataclass
class Message:
    sent_ms: float
    arrived_ms: float | None  # None: lost
    src: int
    dst: int
    kind: str
    tps: tuple[str, ...]
    detail: str


@dataclass
class Recorder:
    states: list[tuple[float, int, str, str, int, int, int]] = field(default_factory=list)  # t, broker, tp, ...
    messages: list[Message] = field(default_factory=list)
    _last: dict[tuple[int, str], tuple[str, int, int, int]] = field(default_factory=dict)

    def on_message(self, sent_ms: float, arrived_ms: float | None, src: int, dst: int, message: Any) -> None:
        name = type(message).__name__
        if name not in RECORDED:
            return
        parts = getattr(message, "partitions", None) or []
        tps = tuple(sorted({f"{p.topic}-{p.partition}" for p in parts if hasattr(p, "topic")}))
        self.messages.append(Message(sent_ms, arrived_ms, src, dst, RECORDED[name], tps, _detail(message)))

    def sample(self, cluster: SimCluster, t_ms: float) -> None:
        seen = set()
        for broker, node in cluster.brokers.items():
            for tp, p in node.replica_manager.partitions.items():
                key = (broker, str(tp))
                seen.add(key)
                state = (
                    "leader" if p.is_leader else "follower",
                    p.leader_epoch,
                    p.log.log_end_offset,
                    p.log.high_watermark,
                )
                if self._last.get(key) != state:
                    self._last[key] = state
                    self.states.append((t_ms, broker, str(tp), *state))
        for key, state in list(self._last.items()):
            if key not in seen and state[0] != "offline":
                offline = ("offline", state[1], state[2], state[3])
                self._last[key] = offline
                self.states.append((t_ms, key[0], key[1], *offline))


def _detail(message: Any) -> str:
    """The fields that matter, one partition per line (records and byte sizes left out)."""
    skip = {"records", "topic", "partition", "partition_max_bytes", "error_message", "log_start_offset"}
    lines = []
    for p in (getattr(message, "partitions", None) or [])[:4]:
        if not dataclasses.is_dataclass(p):
            continue
        values = {f.name: getattr(p, f.name) for f in dataclasses.fields(p) if f.name not in skip}
        shown = ", ".join(f"{k}={v}" for k, v in values.items() if v not in (-1, None, "", [], b"") or k == "isr")
        lines.append(f"{getattr(p, 'topic', '?')}-{getattr(p, 'partition', '?')}: {shown}")
    return "<br>".join(html.escape(line) for line in lines)


# -- the page ---------------------------------------------------------------------------------------


def write_page(path: Path, result: RunResult, recorder: Recorder, title: str, events: list[dict[str, Any]]) -> Path:
    """One self-contained HTML page of the run; `events` are the trace's entries (JSON objects)."""
    import plotly.io as pio

    brokers = sorted({s[1] for s in recorder.states})
    tps = sorted({s[2] for s in recorder.states}, key=_tp_order)
    violation = next((e for e in reversed(events) if e.get("event") == "violation"), None)
    first = (violation or {}).get("tp")
    if first is None and violation is not None:  # the checks name the partition first: "t0-5 offset 37: ..."
        named = re.match(r"\s*([\w.]+-\d+)\b", str(violation.get("message", "")))
        first = named.group(1) if named else None
    tps.sort(key=lambda tp: (tp != first, _tp_order(tp)))
    parts = [
        '<!DOCTYPE html><html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)}</title><style>{_CSS}</style></head><body>",
        f"<header><h1>{html.escape(title)}</h1>{_summary(result, violation)}</header>",
    ]
    steps = [e for e in events if e.get("event") == "step"]
    if steps:
        rows = "".join(
            f"<li><b>{i}</b> <span class=t>{e['t_ms'] / 1000:.3f}s</span> {html.escape(str(e.get('what', '')))}</li>"
            for i, e in enumerate(steps, 1)
        )
        parts.append(f"<section><h2>Scenario steps</h2><ol class=steps>{rows}</ol></section>")
    for i, tp in enumerate(tps):
        fig = _figure(tp, brokers, recorder, events, violation, steps)
        div_id = f"partition-{tp}"
        parts.append(f'<section class="timeline" id="{html.escape(div_id)}" data-partition="{html.escape(tp)}">')
        parts.append(f"<h2>Partition {html.escape(tp)}</h2>")
        parts.append(
            pio.to_html(
                fig,
                include_plotlyjs=(i == 0),
                full_html=False,
                div_id=f"fig-{tp}",
                config={"displaylogo": False, "responsive": True},
            )
        )
        parts.append(_fold_script(f"fig-{tp}", fig))
        parts.append("</section>")
    parts.append("</body></html>")
    path.write_text("".join(parts), encoding="utf-8")
    return path


def _tp_order(tp: str) -> tuple[str, int]:
    topic, _, partition = tp.rpartition("-")
    return topic, int(partition) if partition.isdigit() else 0


def _summary(result: RunResult, violation: dict[str, Any] | None) -> str:
    faults = ", ".join(f"{k}: {v}" for k, v in result.faults_injected.items()) or "none"
    head = (
        f"<p>seed {result.seed} · trace {result.trace_hash} · {result.virtual_s:.1f} virtual s · "
        f"{result.events} events · acked {result.acked} · faults {html.escape(faults)}</p>"
    )
    if violation is None and result.violation is None:
        return head + "<p class=ok>no violation</p>"
    check = result.violation.check if result.violation else violation.get("check") if violation else ""
    message = result.violation.message if result.violation else violation.get("message", "") if violation else ""
    return head + f'<p class="violation">VIOLATION {html.escape(str(check))}: {html.escape(str(message))}</p>'


def _figure(
    tp: str,
    brokers: list[int],
    recorder: Recorder,
    events: list[dict[str, Any]],
    violation: dict[str, Any] | None,
    steps: list[dict[str, Any]],
) -> Any:
    import plotly.graph_objects as go
    from plotly.subplots import make_subplots

    lanes = [CONTROLLER_LANE, *(f"broker {b}" for b in brokers)]
    y_of = {CONTROLLER_ID: 0, **{b: i + 1 for i, b in enumerate(brokers)}}
    fig = make_subplots(
        rows=2,
        cols=1,
        shared_xaxes=True,
        row_heights=[0.38, 0.62],
        vertical_spacing=0.05,
        subplot_titles=("log end offset (solid) and high watermark (dashed)", "nodes, roles and messages"),
    )
    end_s = max([s[0] for s in recorder.states] + [e["t_ms"] for e in events] + [1.0]) / 1000.0
    states = [s for s in recorder.states if s[2] == tp]
    colours = ["#0969da", "#cf222e", "#1a7f37", "#8250df", "#bf8700", "#57606a"]
    truncations: list[tuple[float, int, int, int]] = []
    for i, broker in enumerate(brokers):
        mine = [s for s in states if s[1] == broker]
        if not mine:
            continue
        steps_x = [s[0] / 1000.0 for s in mine] + [end_s]
        colour = colours[i % len(colours)]
        leo = [s[5] for s in mine] + [mine[-1][5]]
        hw = [s[6] for s in mine] + [mine[-1][6]]
        line = {"shape": "hv", "color": colour, "width": 1.6}
        fig.add_trace(
            go.Scatter(x=steps_x, y=leo, name=f"broker {broker} LEO", line=line, legendgroup=str(broker)), 1, 1
        )
        fig.add_trace(
            go.Scatter(
                x=steps_x, y=hw, name=f"broker {broker} HW", line={**line, "dash": "dash"}, legendgroup=str(broker)
            ),
            1,
            1,
        )
        for prev, cur in zip(mine, mine[1:], strict=False):
            if cur[5] < prev[5] and cur[3] != "offline":
                truncations.append((cur[0], broker, prev[5], cur[5]))
        # the lane: one bar per stretch of one role at one epoch, labelled with both
        starts = [j for j, st in enumerate(mine) if j == 0 or (st[3], st[4]) != (mine[j - 1][3], mine[j - 1][4])]
        y = y_of[broker]
        for k, j in enumerate(starts):
            st = mine[j]
            stop = mine[starts[k + 1]][0] / 1000.0 if k + 1 < len(starts) else end_s
            fig.add_shape(
                type="rect",
                x0=st[0] / 1000.0,
                x1=stop,
                y0=y - 0.32,
                y1=y + 0.32,
                row=2,
                col=1,
                fillcolor=ROLE_COLOURS[st[3]],
                opacity=0.35,
                line={"width": 0},
                layer="below",
            )
            fig.add_annotation(
                x=st[0] / 1000.0,
                y=y - 0.32,
                text=f"{st[3]} e{st[4]}",
                showarrow=False,
                xanchor="left",
                yanchor="bottom",
                font={"size": 10},
                row=2,
                col=1,
            )
    # messages of this partition (LEADER_AND_ISR and ALTER_PARTITION name it too), as arrows
    mine_msgs = [m for m in recorder.messages if tp in m.tps and m.src in y_of and m.dst in y_of]
    xs: list[float | None] = []
    ys: list[float | None] = []
    hover: list[str | None] = []
    lost_x: list[float] = []
    lost_y: list[float] = []
    lost_text: list[str] = []
    counts: Counter[tuple[int, float]] = Counter()
    for m in mine_msgs:
        src = y_of.get(m.src, 0)
        dst = y_of.get(m.dst, 0)
        label = f"{m.kind} {_node(m.src)} → {_node(m.dst)}<br>{m.detail}"
        counts[(dst, round(m.sent_ms / 1000.0 // COUNT_BUCKET_S * COUNT_BUCKET_S, 3))] += 1
        if m.arrived_ms is None:
            lost_x.append(m.sent_ms / 1000.0)
            lost_y.append(src)
            lost_text.append("lost: " + label)
            continue
        xs += [m.sent_ms / 1000.0, m.arrived_ms / 1000.0, None]
        ys += [src, dst, None]
        hover += [label, label, None]
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=ys,
            mode="lines+markers",
            name="messages",
            hoverinfo="text",
            text=hover,
            line={"color": "rgba(36,41,47,0.55)", "width": 1},
            marker={"symbol": "arrow", "angleref": "previous", "size": 8, "color": "rgba(36,41,47,0.7)"},
            visible=len(mine_msgs) <= 400,
            meta="detail",
        ),
        2,
        1,
    )
    if lost_x:
        fig.add_trace(
            go.Scatter(
                x=lost_x,
                y=lost_y,
                mode="markers",
                name="lost messages",
                text=lost_text,
                hoverinfo="text",
                marker={"symbol": "x", "size": 7, "color": "#cf222e"},
                visible=len(mine_msgs) <= 400,
                meta="detail",
            ),
            2,
            1,
        )
    if counts:
        keys = sorted(counts)
        fig.add_trace(
            go.Scatter(
                x=[k[1] for k in keys],
                y=[k[0] for k in keys],
                mode="markers",
                name="messages per 100 ms",
                text=[f"{counts[k]} messages" for k in keys],
                hoverinfo="text",
                marker={"size": [min(18, 4 + counts[k]) for k in keys], "color": "rgba(36,41,47,0.35)"},
                visible=len(mine_msgs) > 400,
                meta="fold",
            ),
            2,
            1,
        )
    # The trace's own truncate events (every cut, with the offset asked for) where it has them; else the
    # LEO drops seen at the 50 ms samples.
    # (An event is written after the cut: the LEO before it is the last one sampled.)
    traced: list[tuple[float, int, int, int]] = []
    for e in events:
        if e.get("event") != "truncate" or e.get("tp") != tp or e.get("node") not in y_of:
            continue
        sampled = [st[5] for st in states if st[1] == e["node"] and st[0] <= e["t_ms"]]
        if sampled and sampled[-1] > e["to"]:
            traced.append((float(e["t_ms"]), int(e["node"]), sampled[-1], int(e["to"])))
    if any(e.get("event") == "truncate" for e in events):
        truncations = traced
    for t_ms, broker, before, after in truncations:
        why = _truncation_cause(recorder, tp, broker, t_ms)
        fig.add_trace(
            go.Scatter(
                x=[t_ms / 1000.0],
                y=[y_of[broker]],
                mode="markers+text",
                name="truncation",
                marker={"symbol": "triangle-down", "size": 12, "color": "#953800"},
                text=[f"truncated {before}→{after}"],
                textposition="bottom center",
                hovertext=[f"broker {broker} truncated from {before} to {after}{why}"],
                hoverinfo="text",
                showlegend=False,
            ),
            2,
            1,
        )
    _faults(fig, events)
    lifecycle = [e for e in events if e.get("event") in LIFECYCLE and e.get("node") in y_of]
    if lifecycle:
        fig.add_trace(
            go.Scatter(
                x=[e["t_ms"] / 1000.0 for e in lifecycle],
                y=[y_of[e["node"]] for e in lifecycle],
                mode="markers+text",
                name="kill, restart, pause",
                text=[LIFECYCLE[e["event"]] for e in lifecycle],
                textposition="top center",
                marker={"symbol": "x-thin-open", "size": 12, "color": "#24292f", "line": {"width": 2}},
            ),
            2,
            1,
        )
    if violation is not None:
        t = violation["t_ms"] / 1000.0
        fig.add_vline(x=t, line={"color": "#cf222e", "width": 2})
        fig.add_annotation(
            x=t,
            y=1.0,
            yref="paper",
            text=f"VIOLATION {html.escape(str(violation.get('check')))}",
            showarrow=False,
            font={"color": "#cf222e", "size": 13},
            xanchor="right",
            yanchor="bottom",
            hovertext=html.escape(str(violation.get("message", ""))),
        )
        led = [e for e in events if e["t_ms"] <= violation["t_ms"] and e.get("event") != "violation"][-12:]
        fig.add_trace(
            go.Scatter(
                x=[e["t_ms"] / 1000.0 for e in led],
                y=[y_of.get(e["node"], 0) if isinstance(e.get("node"), int) else 0 for e in led],
                mode="markers",
                name="led to the violation",
                text=[html.escape(json.dumps(e, default=str)) for e in led],
                hoverinfo="text",
                marker={"symbol": "circle-open", "size": 11, "color": "#cf222e", "line": {"width": 2}},
            ),
            2,
            1,
        )
    for i, step_event in enumerate(steps, 1):
        fig.add_annotation(
            x=step_event["t_ms"] / 1000.0,
            y=-0.7,
            text=f"<b>{i}</b>",
            showarrow=False,
            row=2,
            col=1,
            hovertext=html.escape(str(step_event.get("what", ""))),
            font={"color": "#0969da"},
        )
    fig.update_yaxes(
        tickvals=list(range(len(lanes))), ticktext=lanes, autorange="reversed", range=[-1, len(lanes)], row=2, col=1
    )
    fig.update_xaxes(title_text="virtual seconds", row=2, col=1)
    fig.update_layout(
        height=260 + 70 * len(lanes),
        margin={"l": 80, "r": 20, "t": 50, "b": 40},
        template="plotly_white",
        hovermode="closest",
        legend={"orientation": "h", "y": -0.12},
    )
    return fig


def _node(node: int) -> str:
    return CONTROLLER_LANE if node == CONTROLLER_ID else f"broker {node}" if node < 1000 else f"client {node}"


def _truncation_cause(recorder: Recorder, tp: str, broker: int, t_ms: float) -> str:
    """The answer the broker acted on: the last FETCH or OffsetsForLeaderEpoch answer it got before."""
    for m in reversed(recorder.messages):
        if m.arrived_ms is None or m.arrived_ms > t_ms or m.dst != broker or tp not in m.tps:
            continue
        if m.kind in ("FETCH answer", "OffsetsForLeaderEpoch answer"):
            return f", because of the {m.kind} from broker {m.src}: {html.unescape(m.detail)}"
    return ""


def _faults(fig: Any, events: list[dict[str, Any]]) -> None:
    for e in events:
        if e.get("event") != "fault":
            continue
        start = e["t_ms"] / 1000.0
        stop = start + e.get("duration_ms", 0) / 1000.0
        kind = str(e.get("kind"))
        fig.add_vrect(
            x0=start,
            x1=max(stop, start + 0.02),
            fillcolor=FAULT_COLOURS.get(kind, "#6e7781"),
            opacity=0.12,
            line_width=0,
            annotation_text=f"{kind} {e.get('nodes', '')}",
            annotation_position="top left",
            annotation_font_size=10,
        )


def _fold_script(div_id: str, fig: Any) -> str:
    """Zoomed out, messages fold into counts per bucket; zoomed in (< DETAIL_SPAN_S), each is drawn."""
    detail = [i for i, t in enumerate(fig.data) if getattr(t, "meta", None) == "detail"]
    fold = [i for i, t in enumerate(fig.data) if getattr(t, "meta", None) == "fold"]
    if not fold:
        return ""
    return (
        f"<script>(function(){{var gd=document.getElementById({json.dumps(div_id)});if(!gd||!gd.on)return;"
        "gd.on('plotly_relayout',function(){var r=gd._fullLayout.xaxis.range;"
        f"var near=(r[1]-r[0])<{DETAIL_SPAN_S};Plotly.restyle(gd,{{visible:near}},{json.dumps(detail)});"
        f"Plotly.restyle(gd,{{visible:!near}},{json.dumps(fold)});}});}})();</script>"
    )


_CSS = (
    "body{font-family:system-ui,sans-serif;margin:16px 24px;color:#24292f}h1{font-size:20px}"
    "h2{font-size:16px;margin:18px 0 4px}.violation{color:#cf222e;font-weight:600}.ok{color:#1a7f37}"
    ".steps{font-size:13px}.steps .t{color:#57606a;font-family:monospace;margin-right:6px}"
)
