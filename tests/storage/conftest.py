from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from server_common.time import ManualTime
from storage.log import Log, LogConfig
from tests.storage.helpers import START_MS


@pytest.fixture
def time() -> ManualTime:
    return ManualTime(START_MS)


@pytest.fixture
def open_log(tmp_path: Path, time: ManualTime) -> Callable[..., Log]:
    """open_log(**config) opens (or reopens) the replica directory <tmp>/orders-0 with a manual clock."""

    def _open(**config: int) -> Log:
        return Log.open(tmp_path / "orders-0", LogConfig(**config), time)

    return _open
