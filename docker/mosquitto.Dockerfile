# Mosquitto from Debian's package, for machines that cannot pull eclipse-mosquitto:2: the same broker
# (2.0) laid out as that image is (config in /mosquitto/config, data in /mosquitto/data, owned by the
# user `mosquitto` that the broker drops to), so docker-compose.yml's mosquitto service runs unchanged.
# scripts/compose.sh builds it as minibroker-mosquitto:local from the local base image
# (MOSQUITTO_IMAGE=minibroker-mosquitto:local docker compose ...).
ARG BASE_IMAGE=minibroker-base:bookworm
FROM ${BASE_IMAGE}

RUN apt-get update \
    && apt-get install -y --no-install-recommends mosquitto mosquitto-clients \
    && rm -rf /var/lib/apt/lists/* \
    && mkdir -p /mosquitto/config /mosquitto/data /mosquitto/log \
    && chown -R mosquitto:mosquitto /mosquitto

EXPOSE 1883
CMD ["mosquitto", "-c", "/etc/mosquitto/mosquitto.conf"]
