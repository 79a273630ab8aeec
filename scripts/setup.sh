#!/usr/bin/env bash
# Creates or updates .venv at the repository root with minibroker and every extra installed.
# Idempotent: a second run only checks that everything is in place.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

python="${PYTHON:-python3}"
if ! "$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)'; then
    echo "setup: Python >= 3.11 is required (found $("$python" --version 2>&1))" >&2
    exit 1
fi

if [ ! -x .venv/bin/python ]; then
    echo "setup: creating .venv"
    "$python" -m venv .venv
fi

stamp=.venv/.minibroker-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ] || [ ! -x .venv/bin/minibroker ]; then
    echo "setup: installing minibroker with all extras into .venv"
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet -e ".[all]" --config-settings editable_mode=compat
    touch "$stamp"
else
    echo "setup: .venv is up to date"
fi

# The project's JavaScript Kafka clients (KafkaJS, for `chaos ... --client kafkajs`): one package.json and its
# lockfile in cluster/js, installed exactly as locked. Node.js and npm are optional: without them that one
# client is unavailable (the CLI says so), nothing else is.
if command -v npm >/dev/null 2>&1 && command -v node >/dev/null 2>&1; then
    if [ ! -f cluster/js/node_modules/.package-lock.json ] || [ cluster/js/package-lock.json -nt cluster/js/node_modules/.package-lock.json ]; then
        echo "setup: installing the JavaScript clients into cluster/js/node_modules (npm ci)"
        npm ci --prefix cluster/js --no-audit --no-fund --loglevel=error
    fi
else
    echo "setup: warning: node/npm not found; \`chaos ... --client kafkajs\` needs Node.js 18+ and npm" >&2
fi

if ! command -v java >/dev/null 2>&1; then
    echo "setup: warning: java not found; the Spark lag job needs Java 17" >&2
fi
