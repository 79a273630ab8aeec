"""`--help` of every command and subcommand is what tests/cluster/fixtures/cli_help.txt pins: the command
line's flags, defaults and texts do not change by accident (regenerate the fixture with
`python -m tests.cluster.dump_cli_help > tests/cluster/fixtures/cli_help.txt` when they change on purpose)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.cluster.dump_cli_help import WIDTH, all_paths, help_of

FIXTURE = Path(__file__).parent / "fixtures" / "cli_help.txt"
HEADER = re.compile(r"^==== minibroker (.*) --help \(exit (\d+)\)\n", re.MULTILINE)


def pinned() -> dict[tuple[str, ...], tuple[int, str]]:
    text = FIXTURE.read_text()
    heads = list(HEADER.finditer(text))
    out = {}
    for head, after in zip(heads, [*heads[1:], None], strict=True):
        body = text[head.end() : after.start() if after else len(text)]
        out[tuple(head.group(1).split())] = (int(head.group(2)), body)
    return out


PINNED = pinned()


def test_the_same_commands_exist() -> None:
    assert all_paths() == sorted(PINNED)


@pytest.mark.parametrize("path", sorted(PINNED), ids=lambda p: " ".join(p) or "minibroker")
def test_help_unchanged(path: tuple[str, ...], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", WIDTH)
    assert help_of(path) == PINNED[path]
