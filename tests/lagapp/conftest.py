"""One small local SparkSession for every Spark test in the session (starting one costs ~10 s)."""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    if shutil.which("java") is None:
        pytest.fail("java is not on PATH; the Spark tests need Java 17 (see scripts/setup.sh)")
    # Python workers (the per-file pass) run this interpreter, with its pyarrow and numpy.
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    session = (
        SparkSession.builder.master("local[2]")
        .appName("minibroker-metrics-tests")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.sql.session.timeZone", "UTC")
        # The session serves every Spark test of the run, some 2,600 stages: with the default 1 GiB the
        # hash aggregations of the last ones could not get memory (aggregateOutOfMemoryError).
        .config("spark.driver.memory", "2g")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    yield session
    session.stop()
