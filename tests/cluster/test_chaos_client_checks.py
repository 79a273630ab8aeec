"""`--client kafkajs` on a machine without what it needs: one line saying what is missing and how to get it,
exit 2, before any cluster starts; never a traceback."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import cluster.chaos_kafkajs as chaos_kafkajs
from cluster.chaos_kafkajs import KafkaJsMissing, check_kafkajs
from cluster.exit_codes import EXIT_USAGE

ROOT = Path(__file__).resolve().parents[2]
NODE = shutil.which("node")
NPM = shutil.which("npm")

pytestmark = pytest.mark.timeout(60)


def path_with(tmp_path: Path, *tools: str) -> str:
    """A PATH holding only these tools (links to the real ones)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for tool in tools:
        real = shutil.which(tool)
        assert real is not None, tool
        (bin_dir / tool).symlink_to(real)
    return str(bin_dir)


def test_without_node_the_cli_says_so_and_exits_2(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "cluster", "chaos", "run", "--faults", "kill", "--rounds", "1", "--client", "kafkajs"],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=ROOT,
        env={**os.environ, "PATH": path_with(tmp_path)},
    )
    assert result.returncode == EXIT_USAGE, result.stderr
    assert "--client kafkajs needs Node.js 18 or later (no `node` on PATH)" in result.stderr
    assert "npm ci --prefix" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.skipif(NODE is None, reason="needs Node.js")
def test_with_node_but_kafkajs_not_installed_it_names_npm_or_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(chaos_kafkajs, "JS_DIR", tmp_path / "js")  # a package dir nothing was installed into
    monkeypatch.setenv("PATH", path_with(tmp_path, "node"))
    with pytest.raises(KafkaJsMissing, match="needs npm to install KafkaJS"):
        check_kafkajs()
    if NPM is not None:
        (tmp_path / "bin" / "npm").symlink_to(NPM)
        with pytest.raises(KafkaJsMissing, match=f"KafkaJS is not installed: `npm ci --prefix {tmp_path / 'js'}`"):
            check_kafkajs()
