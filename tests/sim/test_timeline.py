"""The timeline page of a run (sim/timeline.py): recording changes nothing about the run, and the page drawn
by headless Chromium has the lanes, the message arrows, the truncation and the pinned violation (read from
the rendered SVG, not from the HTML source)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sim.cluster import SimOptions
from sim.runner import run_seed
from sim.timeline import Recorder
from tests.lagapp.browser import CHROMIUM, lines_in, rendered_dom

pytestmark = pytest.mark.timeout(240)

ROOT = Path(__file__).resolve().parents[2]


def test_a_recorded_run_is_the_run_without_a_recorder() -> None:
    options = SimOptions(duration_s=8.0, faults=("kill", "restart", "pause", "partition"), fault_rate=0.5)
    plain = run_seed(7, options)
    recorder = Recorder()
    recorded = run_seed(7, options, keep_trace=True, recorder=recorder)
    assert recorded.trace_hash == plain.trace_hash
    kinds = {m.kind for m in recorder.messages}
    # brokers learn leaderships from the metadata log (FETCH), and leaders tell the controller of ISR changes
    assert {"ALTER_PARTITION", "FETCH", "FETCH answer", "PRODUCE", "PRODUCE answer"} <= kinds
    assert all(m.arrived_ms is None or m.arrived_ms >= m.sent_ms for m in recorder.messages)
    roles = {s[3] for s in recorder.states}
    assert {"leader", "follower"} <= roles


@pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is not installed (scripts/test.sh installs it)")
def test_the_kip101_page_shows_lanes_arrows_the_truncation_and_the_pinned_violation(tmp_path: Path) -> None:
    page = tmp_path / "kip101.html"
    done = subprocess.run(
        [sys.executable, "-m", "cluster", "sim", "--scenario", "kip101-1", "--truncation", "hw", "--html", str(page)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=120,
    )
    assert done.returncode == 1, done.stderr  # KIP-101's anomaly under truncation to the HW
    assert f"timeline page: {page}" in done.stdout
    dom = rendered_dom(page, tmp_path / "profile")
    svg = dom[dom.index("<svg") :]  # what plotly drew, after the page's own text
    ticks = re.findall(r'class="y\d*tick"[^>]*><text[^>]*>([^<]+)</text>', svg)
    assert {"controller", "broker 1", "broker 2", "broker 3"} <= set(ticks), ticks
    # the message arrows: drawn segments with arrowheads, named in the legend
    assert any(len(line) >= 2 for line in lines_in(svg)), "no lines drawn"
    assert svg.count('class="point"') > 10, "no message arrowheads drawn"
    assert 'data-unformatted="messages"' in svg
    annotations = re.findall(r'class="annotation-text"[^>]*>(.*?)</text>', svg)
    text = " ".join(annotations)
    assert "VIOLATION acked_write_lost" in text  # pinned, as drawn
    assert "follower e0" in text and "leader e2" in text  # roles and epochs on the lanes
    assert re.search(r">truncated 2→1<", svg), "the truncation mark is not drawn"


def test_the_page_opens_on_the_violated_partition(tmp_path: Path) -> None:
    from sim.timeline import write_page

    # truncation to the HW (before KIP-101) with kills: seed 16 loses a committed record
    options = SimOptions(
        duration_s=10.0, acks=1, min_insync_replicas=1, faults=("kill", "restart", "pause"), truncation="hw"
    )
    recorder = Recorder()
    result = run_seed(16, options, keep_trace=True, recorder=recorder)
    assert result.violation is not None
    named = re.match(r"([\w.]+-\d+)", result.violation.message)
    assert named is not None
    events = [json.loads(line) for line in result.trace_lines]
    page = write_page(tmp_path / "run.html", result, recorder, "seed 16", events).read_text()
    sections = re.findall(r'class="timeline" id="[^"]*" data-partition="([^"]+)"', page)
    assert sections[0] == named.group(1) and len(sections) == options.partitions
    assert f"VIOLATION {result.violation.check}" in page


def test_a_shrunk_run_gets_the_page_of_its_smallest_schedule(tmp_path: Path) -> None:
    page = tmp_path / "shrunk.html"
    args = ["--seed", "16", "--duration", "10", "--acks", "1", "--min-insync-replicas", "1"]
    args += ["--faults", "kill,restart,pause", "--truncation", "hw", "--shrink", "--html", str(page)]
    done = subprocess.run(
        # 17 s on a quiet machine; the suite's workers and a busy machine have made it 120 s and more.
        [sys.executable, "-m", "cluster", "sim", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=220,
    )
    assert done.returncode == 1, done.stderr
    assert "differs" not in done.stderr  # the recorded rerun is the shrink's smallest run, hash for hash
    text = page.read_text()
    assert "--schedule" in text  # titled with the smallest schedule's replay line
    assert "VIOLATION" in text
