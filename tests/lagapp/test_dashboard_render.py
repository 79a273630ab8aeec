"""The page from hand-made dashboard data (no Spark): label stacking, charts drawn on demand, and the
browser check's ability to tell a flat chart from one that moves."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from lagapp import dashboard as d
from tests.lagapp.browser import CHROMIUM, chart_lines, is_flat, lines_in, rendered_dom

T0 = 1_700_000_000_000


def test_labels_of_events_seconds_apart_go_on_separate_rows_and_distant_ones_share_the_first() -> None:
    events = [
        d.TimelineEvent(T0, "b2 down", "broker"),
        d.TimelineEvent(T0 + 1000, "e3 L1", "leader"),
        d.TimelineEvent(T0 + 2000, "b2 up", "broker"),
        d.TimelineEvent(T0 + 300_000, "b1 down", "broker"),
    ]
    # on a 10 min chart 1150 px wide, a 7-character label is about 27 s wide
    assert d.label_levels(events, span_ms=600_000) == [0, 1, 2, 0]
    # on a 10 s chart they no longer touch
    assert d.label_levels(events[:3], span_ms=10_000) == [0, 0, 0]


def _series(values: list[int]) -> list[d.FollowerSeries]:
    ts = [T0 + i * 1000 for i in range(len(values))]
    return [d.FollowerSeries(2, ts, list(values), [v * 10 for v in values], "leader")]


def _data(lag: dict[tuple[str, int], list[d.FollowerSeries]], eager: int) -> d.DashboardData:
    summary = [
        d.PartitionSummary(t, p, 1, 0, 0, max(s[0].lag_messages or [0]), 0, {}, 0, 0, 0) for (t, p), s in lag.items()
    ]
    return d.DashboardData(
        title="minibroker lag: test",
        records=100,
        first_ts_ms=T0,
        last_ts_ms=T0 + 10_000,
        window_ms=10_000,
        partitions_total=len(lag),
        summary=summary,
        lag=lag,
        charted_eager=eager,
    )


def test_the_partitions_after_the_worst_carry_their_chart_to_draw_on_demand() -> None:
    lag = {("t", p): _series([0, p, 2 * p, 0]) for p in range(3)}
    page = d.render_dashboard(_data(lag, eager=1))
    assert page.count("Plotly.newPlot(") == 2  # the one drawn at once, and the on-demand drawing code
    assert len(re.findall(r'<div class="lag-chart" id="lag-t-0"', page)) == 1
    more = re.findall(
        r'<details class="more-lag" id="lag-(t-\d)">.*?<script type="application/json">(.*?)</script>', page
    )
    assert [name for name, _ in more] == ["t-1", "t-2"]
    figure = json.loads(more[1][1])
    assert figure["data"][0]["y"] == [0, 2, 4, 0]  # t-2's lag, ready to draw
    assert "The next 2 in the table's order" in page


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is not installed (scripts/test.sh installs it)")
def test_the_browser_check_tells_a_flat_lag_chart_from_one_that_climbs(tmp_path: Path) -> None:
    lag = {("flat", 0): _series([0] * 10), ("climbs", 0): _series([0, 0, 50, 100, 150, 0, 0, 0, 0, 0])}
    page = tmp_path / "dashboard.html"
    page.write_text(d.render_dashboard(_data(lag, eager=2)), encoding="utf-8")
    charts = chart_lines(rendered_dom(page, tmp_path / "profile"), "lag-chart")
    assert sorted(charts) == ["climbs-0", "flat-0"]
    assert charts["flat-0"] and all(is_flat(line) for line in charts["flat-0"])
    assert any(not is_flat(line) for line in charts["climbs-0"])


# plotly_white's grid colour: drawn only when the chart got the page's template
_TEMPLATE_GRID = "rgb(235, 240, 248)"


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is not installed (scripts/test.sh installs it)")
def test_a_chart_drawn_on_demand_has_its_lines_and_the_pages_template(tmp_path: Path) -> None:
    lag = {("t", p): _series([0, p, 2 * p, 0]) for p in range(3)}
    page = tmp_path / "dashboard.html"
    page.write_text(d.render_dashboard(_data(lag, eager=1)), encoding="utf-8")
    # the link to a partition opens its <details>, which draws the chart
    dom = rendered_dom(page, tmp_path / "profile", fragment="lag-t-2")
    drawn_first = dom[dom.index('id="lag-t-0"') : dom.index('id="lag-t-1"')]
    closed = dom[dom.index('id="lag-t-1"') : dom.index('id="lag-t-2"')]
    opened = dom[dom.index('id="lag-t-2"') :]
    assert lines_in(closed) == []  # still closed: not drawn
    assert any(not is_flat(line) for line in lines_in(opened))
    assert _TEMPLATE_GRID in opened and _TEMPLATE_GRID in drawn_first


def test_each_kind_of_restart_card_says_what_happened() -> None:
    data = _data({("t", 0): _series([0, 1, 0])}, eager=1)
    data.restarts = [
        d.Restart(1, T0, T0 + 200, T0 + 9000),  # back before any ISR dropped it
        d.Restart(2, T0 + 1000, T0 + 7000, T0 + 9000, partitions_out=3, caught_up_ms=1500),
        d.Restart(3, T0 + 2000, T0 + 8000, T0 + 9000, partitions_out=2, partitions_behind=1),
        d.Restart(4, T0 + 3000, None),
    ]
    page = d.render_dashboard(data)
    cards = [re.sub(r"<[^>]+>", "|", c) for c in page.split('<div class="card">')[1:]]
    texts = [re.sub(r"\|+", "|", c).strip("|") for c in cards]

    def card(broker: int) -> str:
        (one,) = [t for t in texts if re.search(rf"\|broker {broker}\b", t)]
        return one

    assert card(1).startswith("–|broker 1 catch-up|") and card(1).endswith("200 ms; never out of an ISR")
    assert card(2).startswith("1.5 s|broker 2 catch-up after restart|") and "out of 3 ISRs" in card(2)
    assert card(3).startswith("not caught up|broker 3 catch-up|") and "1 behind" in card(3)
    assert card(4).startswith("still down|broker 4|down at ")
