"""The controller stands on the shared layers only: it imports no broker, client, fetcher or operator-tool
module, so a controller process (or the simulator) loads none of them through it."""

from __future__ import annotations

import subprocess
import sys

FORBIDDEN = ("broker", "client", "fetcher", "cluster")


def test_the_controller_imports_no_broker_client_fetcher_or_cluster_module() -> None:
    script = (
        "import sys, controller.controller_server\n"
        f"print(sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r}))\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"
