#!/usr/bin/env bash
# Kafka's kafka-topics.sh as far as librdkafka's test suite runs it (test_kafka_topics in its tests/test.c),
# on the cluster scripts/librdkafka_tests.sh started, through minibroker's CLI:
#
#   --create --topic T --partitions N --replication-factor R [--config K=V]...   minibroker topic create
#   --alter --topic T --partitions N                                             minibroker topic alter
#   --delete --topic T                                                           minibroker topic delete
#
# The address flag (--bootstrap-server, or --zookeeper for the tests' pre-3.0 brokers) is read and left
# unused: the cluster directory names the brokers. Anything else exits 2, naming what it does not do.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../../.." && pwd)"
: "${MINIBROKER_TEST_CLUSTER_DIR:?set by scripts/librdkafka_tests.sh}"
PYTHON="${PYTHON:-$root/.venv/bin/python}"

action=""
topic=""
args=()
while [ $# -gt 0 ]; do
    case "$1" in
        --create | --alter | --delete) action="${1#--}" ;;
        --bootstrap-server | --zookeeper) shift ;;
        --topic) topic="$2"; shift ;;
        --partitions) args+=(--partitions "$2"); shift ;;
        --replication-factor) args+=(--replication-factor "$2"); shift ;;
        --config) args+=(--config "$2"); shift ;;
        *) echo "kafka-topics.sh (minibroker): $1 is not supported" >&2; exit 2 ;;
    esac
    shift
done
if [ -z "$action" ] || [ -z "$topic" ]; then
    echo "kafka-topics.sh (minibroker): needs --create, --alter or --delete, and --topic" >&2
    exit 2
fi
cd "$root"
exec "$PYTHON" -m cluster topic "$action" "$topic" ${args[@]+"${args[@]}"} --dir "$MINIBROKER_TEST_CLUSTER_DIR"
