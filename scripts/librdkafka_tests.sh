#!/usr/bin/env bash
# Runs librdkafka's own integration tests (its tests/ test-runner) against a local 3-broker minibroker
# cluster, through the brokers' Kafka listeners. Not part of ./scripts/test.sh: it fetches and builds
# librdkafka (a few minutes on 2 cores, once per work dir) and the run takes tens of minutes.
#
#   ./scripts/librdkafka_tests.sh                 the tests chosen below (DEFAULT_TESTS)
#   ./scripts/librdkafka_tests.sh 0001 0090       only these test ids (or TESTS=0001,0090)
#
# Environment:
#   WORK_DIR            where node-rdkafka is unpacked and built, and logs go (default /tmp/librdkafka-tests)
#   NODE_RDKAFKA        the npm package spec (default node-rdkafka@3.6.1, which ships librdkafka 2.12.0
#                       with its tests/; the version docs/kafka-protocol.md records results for)
#   TESTS               comma-separated test ids (4 digits), as librdkafka's test docs use it
#   TEST_KAFKA_VERSION  the broker version the tests assume (default 2.8.0): tests needing newer
#                       brokers skip themselves
#   TEST_TIMEOUT        seconds one test id may run before it is killed (default 300)
#   PARALLEL            test ids run at once, each in its own test-runner (default 1)
#   BASE_PORT           the cluster's first broker port (default 29400; Kafka listeners at +200)
#   BASE_ADDRESS        the controller's loopback address (default 127.0.0.10, brokers .11-.13)
#   PYTHON              the interpreter with minibroker's dependencies (default .venv/bin/python)
#
# librdkafka comes from npm because node-rdkafka's package carries librdkafka's complete source, tests
# included (deps/librdkafka); no other registry this project reaches ships them.
# Per test id it writes WORK_DIR/logs/<id>.log; the cluster's logs stay in WORK_DIR/cluster/broker-N/.
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK_DIR="${WORK_DIR:-/tmp/librdkafka-tests}"
NODE_RDKAFKA="${NODE_RDKAFKA:-node-rdkafka@3.6.1}"
TEST_KAFKA_VERSION="${TEST_KAFKA_VERSION:-2.8.0}"
TEST_TIMEOUT="${TEST_TIMEOUT:-300}"
PARALLEL="${PARALLEL:-1}"
BASE_PORT="${BASE_PORT:-29400}"
BASE_ADDRESS="${BASE_ADDRESS:-127.0.0.10}"
PYTHON="${PYTHON:-$root/.venv/bin/python}"

# The tests that apply to a broker without transactions, SASL, SSL, ACLs or KIP-848 groups: producer,
# consumer, offsets, metadata, groups and idempotence. Left out: tests that need no broker (TEST_F_LOCAL,
# the *_mock ones), the socket-emulator ones (0049 0068 0075 0076 0088 0094, need a sockem build and
# inject faults in the client), transactions (0098 0103 0129), SSL/SASL/OAUTH/ACLs (0097 0115 0119 0126
# 0135 0142), the "noautocreate" scenario (0045 topic-remove variants, 0107 0111: need a second cluster
# with auto.create.topics.enable=false), admin (0081: ACLs, AlterConfigs, DeleteRecords, ...),
# fetch-from-follower (0101: rack-aware replica selector), 0066 (plugins), 0038 (a benchmark), 0028 and
# 0079 (flagged known-issue or local: the runner filters them anyway).
DEFAULT_TESTS="0001 0002 0003 0005 0007 0008 0011 0012 0013 0014 0015 0016 0017 0018 0019 0020 0021
0022 0026 0029 0030 0031 0033 0034 0035 0036 0039 0040 0041 0042 0044 0045 0048 0050 0051 0052
0053 0054 0055 0056 0057 0059 0060 0061 0063 0064 0065 0067 0069 0070 0073 0077 0082 0083 0084
0085 0086 0089 0090 0091 0092 0093 0099 0102 0109 0110 0112 0113 0114 0118 0122 0123 0125 0127 0130
0132 0137 0140 0153"

if [ $# -gt 0 ]; then
    ids="$*"
elif [ -n "${TESTS:-}" ]; then
    ids="${TESTS//,/ }"
else
    ids="$DEFAULT_TESTS"
fi
ids="$(echo $ids)"

log() { echo "librdkafka_tests: $*" >&2; }

if [ ! -x "$PYTHON" ]; then
    log "no interpreter at $PYTHON: run ./scripts/setup.sh or set PYTHON"
    exit 2
fi

mkdir -p "$WORK_DIR"
WORK_DIR="$(cd "$WORK_DIR" && pwd)"
src="$WORK_DIR/package/deps/librdkafka"
tests_dir="$src/tests"
cluster_dir="$WORK_DIR/cluster"
logs="$WORK_DIR/logs"

# (1) librdkafka's source, tests included, from the node-rdkafka package.
if [ ! -f "$tests_dir/test.c" ]; then
    log "fetching $NODE_RDKAFKA"
    (cd "$WORK_DIR" && rm -f node-rdkafka-*.tgz && npm pack --silent "$NODE_RDKAFKA" >/dev/null)
    tgz="$(ls "$WORK_DIR"/node-rdkafka-*.tgz | head -n1)"
    tar -xzf "$tgz" -C "$WORK_DIR"
    if [ ! -f "$tests_dir/test.c" ]; then
        log "$tgz has no deps/librdkafka/tests/test.c"
        exit 2
    fi
fi
rdk_version="$(sed -n 's/^# librdkafka v\([0-9.]*\).*/\1/p' "$src/CHANGELOG.md" | head -n1)"
log "librdkafka $rdk_version in $src"

# (2) Build librdkafka (no SSL, SASL or libcurl: minibroker serves none of them) and the test runner.
if [ ! -x "$tests_dir/test-runner" ]; then
    missing=()
    [ -f /usr/include/zlib.h ] || missing+=(zlib1g-dev)
    [ -f /usr/include/zstd.h ] || missing+=(libzstd-dev)
    command -v make >/dev/null 2>&1 || missing+=(make)
    command -v g++ >/dev/null 2>&1 || missing+=(g++)
    if [ ${#missing[@]} -gt 0 ]; then
        if [ "$(id -u)" = 0 ]; then
            log "installing ${missing[*]}"
            export DEBIAN_FRONTEND=noninteractive
            apt-get update -qq
            apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
        else
            log "warning: ${missing[*]} missing and not root"
        fi
    fi
    jobs="$(nproc 2>/dev/null || echo 2)"
    log "building librdkafka and tests/test-runner (make -j$jobs; logs in $WORK_DIR/build.log)"
    (
        cd "$src"
        ./configure --disable-ssl --disable-gssapi --disable-lz4-ext --disable-curl
        make -j"$jobs" libs
        make -j"$jobs" -C tests build
    ) >"$WORK_DIR/build.log" 2>&1 || {
        tail -n 30 "$WORK_DIR/build.log" >&2
        log "build failed; see $WORK_DIR/build.log"
        exit 2
    }
fi

# (3) A 3-broker cluster as librdkafka's "default" test scenario describes it (tests/scenarios/
# default.json: auto-created topics with 4 partitions, replication factor 3).
cluster() { (cd "$root" && "$PYTHON" -m cluster cluster "$@"); }
stop_cluster() {
    if [ -f "$cluster_dir/cluster.json" ]; then
        log "stopping the cluster in $cluster_dir"
        cluster down --dir "$cluster_dir" >/dev/null 2>&1 || true
    fi
}
trap stop_cluster EXIT
trap 'exit 130' INT TERM

stop_cluster
rm -rf "$cluster_dir"
log "starting a 3-broker cluster in $cluster_dir"
cluster up --dir "$cluster_dir" --detach --brokers 3 --base-port "$BASE_PORT" --base-address "$BASE_ADDRESS" \
    --override offsets.topic.num.partitions=3 \
    --override group.initial.rebalance.delay.ms=100 \
    --override default.replication.factor=3 \
    --override num.partitions=4 \
    --override auto.create.topics.enable=true >"$WORK_DIR/cluster-up.log" 2>&1 || {
    cat "$WORK_DIR/cluster-up.log" >&2
    exit 2
}
bootstrap="$("$PYTHON" -c '
import json, sys
state = json.load(open(sys.argv[1]))
print(",".join("%s:%d" % (b["host"], b["kafka_port"]) for b in state["brokers"] if b.get("kafka_port")))
' "$cluster_dir/cluster.json")"
log "bootstrap.servers=$bootstrap"

# tests/test.conf: the broker list plus test-framework keys (tests/test.conf.example). Random topic
# names keep reruns and parallel test-runners off each other's topics.
test_conf="$WORK_DIR/test.conf"
cat >"$test_conf" <<EOF
bootstrap.servers=$bootstrap
test.topic.random=true
test.timeout.multiplier=2
EOF
cp "$test_conf" "$tests_dir/test.conf"

# Tests that create topics with configs (0052's message.timestamp.type) run Kafka's kafka-topics.sh from
# KAFKA_PATH, with the brokers in ZK_ADDRESS (TEST_KAFKA_VERSION < 3.0) or BROKERS: scripts/kafka-cli has
# a kafka-topics.sh that does its --create as `minibroker topic create` on this cluster. Kafka's other
# tools (kafka-acls.sh, kafka-configs.sh, ...) are not there: the tests that run them fail as before.
export KAFKA_PATH="$root/scripts/kafka-cli" ZK_ADDRESS="$bootstrap" BROKERS="$bootstrap"
export MINIBROKER_TEST_CLUSTER_DIR="$cluster_dir" PYTHON

# (4) One test-runner per test id, so a hang costs one id, not the run. -Q: the quick mode CI uses;
# -L: leave out the tests that need no broker; -E: no socket-emulator tests.
rm -rf "$logs"
mkdir -p "$logs"
run_one() {
    local id="$1" rc=0
    (
        cd "$tests_dir"
        LD_LIBRARY_PATH="../src:../src-cpp${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" \
            TESTS="$id" TEST_KAFKA_VERSION="$TEST_KAFKA_VERSION" RDKAFKA_TEST_CONF="$test_conf" \
            timeout -k 10 "$TEST_TIMEOUT" ./test-runner -Q -L -E -p1
    ) >"$logs/$id.log" 2>&1 </dev/null || rc=$?
    echo "$rc" >"$logs/$id.rc"
    log "$id done (exit $rc)"
}

log "running $(echo $ids | wc -w) test ids, $PARALLEL at a time, ${TEST_TIMEOUT}s each: $ids"
for id in $ids; do
    while [ "$(jobs -rp | wc -l)" -ge "$PARALLEL" ]; do wait -n || true; done
    run_one "$id" &
done
wait

# (5) The summary: every sub-test the runners reported, with the first failure line.
"$PYTHON" - "$logs" "$TEST_TIMEOUT" "$WORK_DIR/summary.txt" $ids <<'EOF'
import re, sys
from pathlib import Path

logs, timeout, out_path, ids = Path(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4:]
ansi = re.compile(r"\x1b\[[0-9;]*m")
row = re.compile(r"^\|\s*(\S+)\s*\|\s*(\w+)\s*\|\s*[\d.]+s\s*\|\s?(.*)$")
rows = []
for tid in ids:
    text = ansi.sub("", (logs / f"{tid}.log").read_text(errors="replace"))
    rc = (logs / f"{tid}.rc").read_text().strip()
    lines = text.splitlines()
    found = []
    for line in lines:
        m = row.match(line)
        if m and m.group(1) != "<MAIN>" and m.group(1).startswith(tid):
            found.append([tid, m.group(1), m.group(2), m.group(3).strip()])
    # TEST_FAIL prints '### Test "NAME (SUBTEST)" failed at FILE:LINE:FUNC() at TIME: ###' and the reason
    # below it; the runner then aborts without its summary table. <MAIN>'s own failure (threads left
    # behind by the failed test) says nothing about the broker.
    fails = [(l.split('"')[1], f"{lines[i + 1].strip()} ({l.split(' failed at ')[1].split('()')[0]}())")
             for i, l in enumerate(lines[:-1])
             if l.startswith("### Test") and " failed at " in l and '"<MAIN>"' not in l]
    for name, _ in fails:
        base = name.split(" ")[0]
        if not any(f[1] == base for f in found):
            found.append([tid, base, "TIMEOUT" if rc in ("124", "137") else "FAILED", ""])
    if rc in ("124", "137"):
        # killed by timeout(1) before any summary
        names = sorted(set(re.findall(r"=+ Running test (" + tid + r"\w*)", text))) or [tid]
        for n in names:
            if not any(f[1] == n for f in found):
                found.append([tid, n, "TIMEOUT", f"killed after {timeout}s"])
    if not found:
        detail = next((l.strip() for l in reversed(lines) if l.strip()), "")
        found.append([tid, tid, "PASSED" if rc == "0" else "FAILED", "" if rc == "0" else detail])
    found = [f for f in found if f[3] != "Filtered due to negative test flags"]  # -L/-E/-K filtered
    for f in found:
        if f[2] == "SKIPPED" and not f[3]:
            f[3] = "needs another test scenario (tests/scenarios/)"
        if f[2] in ("FAILED", "TIMEOUT") and (not f[3] or f[2] == "TIMEOUT"):
            own = [r for n, r in fails if n.split(" ")[0] == f[1]]
            f[3] = (own or [r for _, r in fails] or [f[3]])[0]
        f[3] = f[3][:200]
    rows.extend(found)

w = max(len(r[1]) for r in rows)
out = [f"{'id':4}  {'test':{w}}  {'result':8}  first failure line / skip reason", "-" * (w + 60)]
out += [f"{r[0]:4}  {r[1]:{w}}  {r[2]:8}  {r[3]}" for r in rows]
count = lambda s: sum(1 for r in rows if r[2] == s)
failed = count("FAILED") + count("TIMEOUT")
out.append("")
out.append(f"librdkafka: {count('PASSED')} passed, {failed} failed, {count('SKIPPED')} skipped")
Path(out_path).write_text("\n".join(out) + "\n")
print("\n".join(out))
sys.exit(1 if failed else 0)
EOF
