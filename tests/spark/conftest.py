"""Shared real servers for the Spark tests: ONE local[2] SparkSession for the whole session.

Starting a JVM costs seconds, so every Spark test shares ``spark`` (session scope). Brokers
are module-scoped (the ``hmb_broker`` fixture of hmbclient's pytest plugin, and ``tansu``
here); each test uses its own topic names so tests do not see each other's data.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """A local[2] SparkSession with the ``"hmb"`` data source registered."""
    # Executors are Python worker processes; they must run this interpreter (this venv).
    os.environ["PYSPARK_PYTHON"] = sys.executable
    os.environ["PYSPARK_DRIVER_PYTHON"] = sys.executable
    from pyspark.sql import SparkSession

    from spark_integration import register

    session = (
        SparkSession.builder.master("local[2]")
        .appName("hmbclient-tests")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.ui.enabled", "false")
        .config("spark.sql.shuffle.partitions", "2")
        .config("spark.default.parallelism", "2")
        .config("spark.sql.streaming.schemaInference", "false")
        .config("spark.driver.memory", "1g")
        .config("spark.ui.showConsoleProgress", "false")
        .getOrCreate()
    )
    session.sparkContext.setLogLevel("ERROR")
    register(session)
    try:
        yield session
    finally:
        session.stop()


@pytest.fixture(scope="session")
def sc(spark: Any) -> Any:
    """The SparkContext of :func:`spark`."""
    return spark.sparkContext


@pytest.fixture(scope="session")
def broker(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """One embedded broker for every Spark test module; new topics get 4 partitions."""
    from hmbclient.broker import EmbeddedBroker

    with EmbeddedBroker(
        port=0, log_dir=str(tmp_path_factory.mktemp("spark-broker")), num_partitions=4
    ) as b:
        yield b


@pytest.fixture(scope="module")
def small_segments(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A broker that keeps about 2 KiB per partition in ~500-byte segments, checked often."""
    from hmbclient.broker import EmbeddedBroker

    with EmbeddedBroker(
        port=0, log_dir=str(tmp_path_factory.mktemp("spark-loss")), num_partitions=1,
        log_segment_bytes=500, log_index_interval_bytes=100, log_retention_bytes=2000, log_retention_check_interval_ms=100,
    ) as b:
        yield b
