"""A real Mosquitto for tests: own config, a free 127.0.0.1 port, stoppable and restartable on that port.

The config is generated per instance (`listener PORT 127.0.0.1`, `allow_anonymous true`, persistence
off), so tests never touch a system-wide Mosquitto. `start` returns once the port accepts connections.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import IO

READY_TIMEOUT_S = 10.0


def mosquitto_binary() -> str:
    """The mosquitto executable (Debian installs it in /usr/sbin, often not on a user's PATH)."""
    found = shutil.which("mosquitto") or next(
        (path for path in ("/usr/sbin/mosquitto", "/usr/local/sbin/mosquitto") if os.access(path, os.X_OK)),
        None,
    )
    if found is None:
        raise RuntimeError("mosquitto is not installed (apt-get install mosquitto); scripts/test.sh installs it")
    return found


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Mosquitto:
    """One Mosquitto process on 127.0.0.1:`port`. The port stays the same across stop/start."""

    def __init__(self, work_dir: Path, port: int | None = None) -> None:
        self.work_dir = work_dir
        self.port = free_port() if port is None else port
        self.config_path = work_dir / "mosquitto.conf"
        self.log_path = work_dir / "mosquitto.log"
        self._process: subprocess.Popen[bytes] | None = None
        self._log_file: IO[bytes] | None = None
        work_dir.mkdir(parents=True, exist_ok=True)
        self.config_path.write_text(
            f"listener {self.port} 127.0.0.1\nallow_anonymous true\npersistence false\nlog_dest stderr\n"
        )

    @property
    def url(self) -> str:
        return f"mqtt://127.0.0.1:{self.port}"

    @property
    def running(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def start(self) -> None:
        if self.running:
            raise RuntimeError("mosquitto already running")
        self._log_file = open(self.log_path, "ab")  # noqa: SIM115 - closed in stop()
        self._process = subprocess.Popen(
            [mosquitto_binary(), "-c", str(self.config_path)],
            stdin=subprocess.DEVNULL,
            stdout=self._log_file,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + READY_TIMEOUT_S
        while not self._accepts_connections():
            if self._process.poll() is not None:
                raise RuntimeError(f"mosquitto exited with {self._process.returncode}: {self.log_text()}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"mosquitto not listening on {self.port}: {self.log_text()}")
            time.sleep(0.01)

    async def start_async(self) -> None:
        """`start` without holding up the event loop while Mosquitto comes up."""
        await asyncio.to_thread(self.start)

    def stop(self) -> None:
        """Stop Mosquitto (SIGKILL: a crash, no goodbyes to clients) and wait for it to exit."""
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait(timeout=10)
        if self._log_file is not None:
            self._log_file.close()
            self._log_file = None

    def log_text(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def _accepts_connections(self) -> bool:
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=0.2):
                return True
        except OSError:
            return False
