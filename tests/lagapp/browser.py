"""Headless Chromium for the dashboard tests: the page as the browser drew it (its DOM after the scripts
ran), and the lines plotly drew in each chart, read from the SVG paths."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

CHROMIUM = Path("/usr/bin/chromium")

_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--window-size=1400,2000",
    "--virtual-time-budget=5000",
)


def run_chromium(page: Path, profile: Path, *extra: str, fragment: str = "") -> subprocess.CompletedProcess[str]:
    """Open `page` (at `#fragment` when given) in a fresh headless Chromium (its own profile dir) with `extra`
    flags."""
    uri = page.resolve().as_uri() + (f"#{fragment}" if fragment else "")
    return subprocess.run(
        [str(CHROMIUM), *_FLAGS, f"--user-data-dir={profile}", *extra, uri],
        check=True,
        capture_output=True,
        text=True,
        timeout=90,
    )


def rendered_dom(page: Path, profile: Path, fragment: str = "") -> str:
    """The page's DOM once its scripts have run (plotly's SVG included)."""
    return run_chromium(page, profile, "--dump-dom", fragment=fragment).stdout


Line = list[tuple[float, float]]


def lines_in(fragment: str) -> list[Line]:
    """Every plotted line (plotly's `path.js-line`) in a fragment of the DOM, as (x, y) pixel points."""
    out = []
    for d in re.findall(r'<path class="js-line" d="([^"]*)"', fragment):
        nums = [float(n) for n in re.findall(r"-?\d+(?:\.\d+)?(?:e-?\d+)?", d)]
        out.append(list(zip(nums[::2], nums[1::2], strict=False)))
    return out


def chart_lines(dom: str, css_class: str) -> dict[str, list[Line]]:
    """The lines drawn inside each `<div class="{css_class}" data-partition=...>` (or, without a
    data-partition, keyed by its position), up to the next such div."""
    starts = [m for m in re.finditer(r'<div class="' + re.escape(css_class) + r'"([^>]*)>', dom)]
    charts: dict[str, list[Line]] = {}
    for i, m in enumerate(starts):
        end = starts[i + 1].start() if i + 1 < len(starts) else len(dom)
        name = re.search(r'data-partition="([^"]*)"', m.group(1))
        charts[name.group(1) if name else str(i)] = lines_in(dom[m.end() : end])
    return charts


def is_flat(line: Line) -> bool:
    """A line with fewer than two points, or all at one height: nothing to see."""
    return len(line) < 2 or len({round(y, 1) for _, y in line}) < 2
