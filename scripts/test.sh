#!/usr/bin/env bash
# Sets up everything the test suite needs on a fresh Debian machine, then runs the whole suite.
#   ./scripts/test.sh            every test
#   ./scripts/test.sh -k fetcher any extra arguments go to pytest
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

# System packages the tests start for real: Mosquitto (MQTT metrics), Chromium (the dashboard renders),
# docker-compose (validates docker-compose.yml), Docker's engine and debootstrap (the compose cluster on a
# real engine, tests/integration/test_compose_engine.py), iptables and iproute2's tc (chaos partitions,
# slow and lossy links between loopback addresses; they need root), kcat (a real Kafka client,
# librdkafka 2.0.2 on Debian 12, against the Kafka listener), npm with Node.js (KafkaJS, which setup.sh
# below installs from cluster/js's lockfile; so these come first).
missing=()
command -v mosquitto >/dev/null 2>&1 || [ -x /usr/sbin/mosquitto ] || missing+=(mosquitto)
command -v iptables >/dev/null 2>&1 || [ -x /usr/sbin/iptables ] || missing+=(iptables)
command -v tc >/dev/null 2>&1 || [ -x /usr/sbin/tc ] || missing+=(iproute2)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v docker-compose >/dev/null 2>&1 || missing+=(docker-compose)
command -v kcat >/dev/null 2>&1 || missing+=(kcat)
command -v npm >/dev/null 2>&1 || missing+=(npm)
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || [ -x /usr/sbin/debootstrap ] || missing+=(debootstrap)
if [ ${#missing[@]} -gt 0 ]; then
    if [ "$(id -u)" = 0 ]; then
        echo "test: installing ${missing[*]}"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -qq
        apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    else
        echo "test: warning: ${missing[*]} missing and not root; the tests that need them will fail" >&2
    fi
fi
# Debian starts a system-wide Mosquitto on 1883 after install; the tests start their own on free ports.

# The compose cluster's image takes minutes to build on a fresh machine (a base image from Debian's
# packages, a wheelhouse; docs/compose.md): start the engine and that build now, beside the venv's
# set-up and the suite. The engine test waits for it (the build's lock). Not the dashboard's image: its
# test is by hand. Only for a run of the whole suite (no test paths, -k or -m), and stopped with the
# suite when this script started the engine.
whole_suite=1
for arg in "$@"; do
    case "$arg" in
        -k | -m | -k* | -m* | tests* | */*) whole_suite=0 ;;
    esac
done
engine_started=0
if [ "$whole_suite" = 1 ] && [ "${MINIBROKER_COMPOSE_PREBUILD:-1}" = 1 ]; then
    if ! docker info >/dev/null 2>&1; then
        if "$root/scripts/compose.sh" engine; then engine_started=1; fi
    fi
    if docker info >/dev/null 2>&1; then
        "$root/scripts/compose.sh" compose-v2 || echo "test: warning: no Compose v2; the engine test uses docker-compose" >&2
        prebuild_log="${TMPDIR:-/tmp}/minibroker-compose-prebuild.log"
        echo "test: building the compose image in the background (log: $prebuild_log)"
        setsid "$root/scripts/compose.sh" images >"$prebuild_log" 2>&1 &
        prebuild=$!
    fi
fi
finish() {
    # a build still running (the suite was interrupted): its whole process group
    if [ -n "${prebuild:-}" ]; then kill -- "-$prebuild" 2>/dev/null || true; wait "$prebuild" 2>/dev/null || true; fi
    if [ "$engine_started" = 1 ]; then "$root/scripts/compose.sh" stop-engine || true; fi
}
trap finish EXIT

"$root/scripts/setup.sh"

# The suite mostly waits on real processes, sockets and timers: pytest-xdist runs it on several workers
# (tests/conftest.py says how tests are grouped). MINIBROKER_TEST_WORKERS=1 runs it in one process;
# a -n/--numprocesses or -p no:xdist among the arguments wins.
workers="${MINIBROKER_TEST_WORKERS:-4}"
xdist=()
case " $* " in
    *" -n"* | *" --numprocesses"* | *"no:xdist"*) ;;
    *) if [ "$workers" -gt 1 ]; then xdist=(-n "$workers"); fi ;;
esac

export PYTHONDONTWRITEBYTECODE=1
set +e
.venv/bin/python -m pytest "${xdist[@]}" "$@"
status=$?
set -e
if [ "$status" -eq 5 ]; then
    echo "test: pytest collected no tests" >&2
fi
exit "$status"
