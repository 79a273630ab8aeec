# The images of docker-compose.yml, from two targets:
#   runtime    the package alone: controller, brokers, the MQTT metrics sink, the CLI
#   dashboard  runtime plus OpenJDK 17 and the `spark` extra, for the Spark lag dashboard
# Both run as the unprivileged user `minibroker` (uid 10001), which owns the data and metrics dirs.
#
# Debian bookworm is pinned because it still ships OpenJDK 17, the Java that PySpark 4 is tested with.
FROM python:3.11-slim-bookworm AS runtime

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1

WORKDIR /opt/minibroker

# Only what the package build needs (.dockerignore keeps tests, venvs and data out of the context).
COPY pyproject.toml README.md ./
COPY protocol ./protocol
COPY server_common ./server_common
COPY storage ./storage
COPY metadata ./metadata
COPY raft ./raft
COPY network ./network
COPY client ./client
COPY broker ./broker
COPY fetcher ./fetcher
COPY group_coordinator ./group_coordinator
COPY controller ./controller
COPY cluster ./cluster
COPY metrics ./metrics
COPY lagapp ./lagapp
COPY sim ./sim
COPY bench ./bench
RUN pip install .

# Data and metrics live in volumes mounted here (see docker-compose.yml); the dirs exist, owned by the
# image's user, so a fresh named volume takes that ownership and a bare `docker run` works too.
RUN useradd --system --uid 10001 --user-group --create-home --home-dir /home/minibroker minibroker \
    && mkdir -p /var/lib/minibroker /metrics /out \
    && chown minibroker:minibroker /var/lib/minibroker /metrics /out
USER minibroker

# Every service names its own `minibroker ...` command; with no command the image prints the help.
CMD ["minibroker", "--help"]


FROM runtime AS dashboard

USER root
RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
RUN pip install ".[spark]"
USER minibroker
