"""The allocator thresholds apply on glibc, this project's platform (their effect is measured by
bench.fetch_rpc's broker_minor_faults_per_mib, not asserted here: it depends on the workload's mix)."""

from __future__ import annotations

import subprocess
import sys


def test_glibc_accepts_the_thresholds() -> None:
    code = "from cluster.allocator import tune_allocator; import sys; sys.exit(0 if tune_allocator() else 1)"
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0
