"""How the suite is shared out among pytest-xdist workers (`scripts/test.sh` runs `-n 4 --dist loadgroup`).

Most tests wait on real processes, sockets and timers, so running several at once fills the two cores
that one at a time leaves idle. A module's tests stay together on one worker (its module-scoped
fixtures, such as a running cluster, start once), and every module that uses the session's SparkSession
shares one worker: one JVM for them all, and the Spark tests, which do keep a core busy, run one after
another instead of fighting each other for the cores.

Each test already has its own ports (`free_ports`), addresses (`random_base_address`) and directories
(`tmp_path`), so no two workers touch the same thing."""

from __future__ import annotations

import pytest

SPARK_GROUP = "spark-session"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    spark_modules = {item.nodeid.split("::")[0] for item in items if "spark" in getattr(item, "fixturenames", ())}
    for item in items:
        module = item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(SPARK_GROUP if module in spark_modules else module))
