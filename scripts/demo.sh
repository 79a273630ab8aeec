#!/usr/bin/env bash
# The main job on the embedded default (local processes, file metrics):
# start a 3-broker cluster, create a topic, write some data, run leader-kill chaos under load,
# print the verdict, move leaders back to their preferred replicas, build the Spark lag dashboard from
# the brokers' metrics, stop the cluster.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"

"$root/scripts/setup.sh"
mb="$root/.venv/bin/minibroker"
dir="${MINIBROKER_DEMO_DIR:-$root/demo-cluster}"
base_port="${MINIBROKER_DEMO_BASE_PORT:-9092}"

step() { printf '\n== %s\n' "$*"; }
# Spark binds its driver to this address instead of guessing one from the host name (and warning).
export SPARK_LOCAL_IP="${SPARK_LOCAL_IP:-127.0.0.1}"

if [ -f "$dir/cluster.json" ]; then
    "$mb" cluster down --dir "$dir" >/dev/null 2>&1 || true
fi
rm -rf "$dir"

step "starting a controller and 3 brokers in $dir"
# Metrics every 250 ms, so the lag charts draw the fall behind and the catch-up of a killed follower.
"$mb" cluster up --brokers 3 --dir "$dir" --base-port "$base_port" --detach --override metrics.interval.ms=250
trap '"$mb" cluster down --dir "$dir" >/dev/null 2>&1 || true' EXIT

# Every broker listens on a loopback address of its own (127.0.0.11, .12, ...): the commands find them
# through --dir, which holds the bootstrap servers `cluster up` chose.
step "creating topic demo (6 partitions, replication factor 3, min.insync.replicas=2)"
"$mb" topic create demo --partitions 6 --replication-factor 3 --config min.insync.replicas=2 --dir "$dir"
"$mb" topic describe demo --dir "$dir"

step "writing 20000 records with acks=all"
"$mb" produce demo --count 20000 --size 200 --acks all --dir "$dir"

step "leader-kill chaos: 3 rounds of SIGKILL on the busiest leader under acks=all load, each down 6 s"
# The load goes on through the kills and each killed broker stays down 6 s, long enough to fall visibly
# behind; the dashboard then shows its lag climb, the ISR shrink, the
# catch-up after the restart and the ISR expand.
status=0
"$mb" chaos leader-kill --dir "$dir" --rounds 3 --restart --down-ms 6000 --interval-ms 3000 --json "$dir/chaos-report.json" || status=$?

step "leaders back to their preferred replicas (as kafka-leader-election.sh --election-type PREFERRED)"
# The kills left leadership on the survivors; the dashboard's leader count per broker shows it return.
"$mb" topic elect-leaders --all-topic-partitions --dir "$dir" || echo "(a preferred replica is still catching up: it stays a follower for now)"

step "cluster after the chaos"
"$mb" cluster status --dir "$dir"

step "Spark lag job over $dir/metrics"
"$mb" dashboard --metrics "$dir/metrics" --out "$dir/dashboard"

step "stopping the cluster"
"$mb" cluster down --dir "$dir"
trap - EXIT

cat <<EOT

Done.
  chaos verdict (JSON):   $dir/chaos-report.json   ($( [ "$status" = 0 ] && echo valid || echo INVALID ))
  lag dashboard:          $dir/dashboard/dashboard.html   (open it in a browser)
  lag tables (Parquet):   $dir/dashboard/
  broker logs:            $dir/broker-*/storage
EOT
exit "$status"
