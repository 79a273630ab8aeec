# One image for every minibroker service in docker-compose.yml: controller, brokers, the MQTT metrics
# sink and the Spark lag dashboard (which is why it carries a JRE).
#
# Debian bookworm is pinned because it still ships OpenJDK 17, the Java that PySpark 4 is tested with.
FROM python:3.11-slim-bookworm

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*

WORKDIR /opt/minibroker

# Only what the package build needs (.dockerignore keeps tests, venvs and data out of the context).
COPY pyproject.toml README.md ./
COPY protocol ./protocol
COPY client ./client
COPY broker ./broker
COPY fetcher ./fetcher
COPY cluster ./cluster
COPY metrics ./metrics
COPY bench ./bench
RUN pip install ".[spark]"

# Data and metrics live in volumes mounted here (see docker-compose.yml); the dirs exist so a bare
# `docker run` works too.
RUN mkdir -p /var/lib/minibroker /metrics /out

# Every service names its own `minibroker ...` command; with no command the image prints the help.
CMD ["minibroker", "--help"]
