# The images of docker-compose.yml, from two targets:
#   runtime    the package alone: controller, brokers, the MQTT metrics sink, the CLI
#   dashboard  the same plus OpenJDK 17 and the `spark` extra, for the Spark lag dashboard
# Both run as the unprivileged user `minibroker` (uid 10001), which owns the data and metrics dirs.
#
# Two ways to build, one file (docs/compose.md):
#   * with a registry: `docker compose up -d --build`. The base is the official Python image and pip
#     installs from the package index.
#   * offline: `scripts/compose.sh up`. The base is BASE_IMAGE=minibroker-base:bookworm, Debian bookworm
#     with its own python3 (3.11, as the official image), made by the script with debootstrap; pip
#     installs only from the wheelhouse the script builds on the host into docker/wheelhouse (runtime/:
#     the package's dependencies; spark/: what the `spark` extra adds), because pip cannot reach the
#     package index from inside a container there.
# What docker/wheelhouse holds decides which: wheels, or only its README (a fresh checkout).
#
# Layers go from what changes least to what changes most (the base, Java, the dependencies, the source),
# so a source change rebuilds only the last layers. The wheels are copied into build stages only, never
# into a shipped image.
#
# Debian bookworm is pinned because it still ships OpenJDK 17, the Java that PySpark 4 is tested with.
ARG BASE_IMAGE=python:3.11-slim-bookworm

FROM ${BASE_IMAGE} AS base

ENV PYTHONUNBUFFERED=1 \
    PYTHONDONTWRITEBYTECODE=1 \
    PIP_NO_CACHE_DIR=1 \
    PIP_DISABLE_PIP_VERSION_CHECK=1 \
    PATH=/opt/venv/bin:$PATH

# A venv, not the interpreter's own site-packages: Debian's python3 refuses pip installs there (PEP 668),
# and the official image's python works the same in one.
# Data and metrics live in volumes mounted at these dirs (see docker-compose.yml); they exist, owned by the
# image's user, so a fresh named volume takes that ownership and a bare `docker run` works too.
RUN python3 -m venv /opt/venv \
    && useradd --system --uid 10001 --user-group --create-home --home-dir /home/minibroker minibroker \
    && mkdir -p /var/lib/minibroker /metrics /out \
    && chown minibroker:minibroker /var/lib/minibroker /metrics /out

WORKDIR /opt/minibroker


# -- build stages ---------------------------------------------------------------------------------------

FROM base AS runtime-build

# The dependencies first, in a layer of their own: installing the wheel files themselves installs exactly
# the runtime set. With no wheels this does nothing and `pip install .` takes them from the index.
COPY docker/wheelhouse/runtime /wheels/runtime
RUN if ls /wheels/runtime/*.whl >/dev/null 2>&1; then pip install --no-index /wheels/runtime/*.whl; fi

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
RUN if ls /wheels/runtime/*.whl >/dev/null 2>&1; then \
        pip install --no-index --find-links /wheels/runtime .; \
    else \
        pip install .; \
    fi


# -- the images -----------------------------------------------------------------------------------------

FROM base AS runtime

COPY --from=runtime-build /opt/venv /opt/venv
USER minibroker
# Every service names its own `minibroker ...` command; with no command the image prints the help.
CMD ["minibroker", "--help"]


FROM base AS spark-deps

# The runtime and `spark` dependencies (pyspark alone is about 450 MB), independent of the source.
COPY docker/wheelhouse /wheels
RUN if ls /wheels/spark/*.whl >/dev/null 2>&1; then \
        pip install --no-index /wheels/runtime/*.whl /wheels/spark/*.whl; \
    fi


FROM base AS dashboard

RUN apt-get update \
    && apt-get install -y --no-install-recommends openjdk-17-jre-headless \
    && rm -rf /var/lib/apt/lists/*
# The dependencies, then the package over them (the same files where they overlap).
COPY --from=spark-deps /opt/venv /opt/venv
COPY --from=runtime-build /opt/venv /opt/venv
COPY --from=runtime-build /opt/minibroker /opt/minibroker
# The `spark` extra: in place already from the wheelhouse (checked), else from the package index.
RUN if python -c "import pyspark" 2>/dev/null; then pip check; else pip install ".[spark]"; fi
USER minibroker
