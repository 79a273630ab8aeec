"""The suite's safety net against processes that outlive their test (tests/integration/processes.py)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.processes import kill_processes_mentioning


@pytest.mark.timeout(30)
def test_a_process_naming_the_dir_is_killed_and_one_that_does_not_is_left(tmp_path: Path) -> None:
    marked = tmp_path / "cluster" / "broker-1"
    sleep = [sys.executable, "-c", "import time, sys; time.sleep(60)"]
    named = subprocess.Popen([*sleep, str(marked)])
    other = subprocess.Popen([*sleep, str(tmp_path.parent / "elsewhere")])
    try:
        killed = kill_processes_mentioning(str(tmp_path) + "/")
        assert [pid for pid, _ in killed] == [named.pid]
        assert str(marked) in killed[0][1]
        assert named.wait(timeout=10) == -9
        assert other.poll() is None
    finally:
        for proc in (named, other):
            proc.kill()
            proc.wait()
