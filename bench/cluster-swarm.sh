#!/usr/bin/env bash
# cluster-swarm.sh -- a bigger swarm on a Valkey Cluster of 3 primaries and 3
# replicas (child processes on loopback, started by testkit): one queue per shard and
# a swarm through each at once, through queue-api, queue-manager and chat-server
# given the seed list with --cluster. Every audit must be zero. ROUNDS rounds per
# backend, interleaved (round r seeds the swarms with r); prints each swarm's line
# and the failover figures.
#
#   bash bench/cluster-swarm.sh        # ROUNDS=3 USERS=500 (people per queue)
#   FAILOVER=1 bash bench/cluster-swarm.sh   # also the failover runs, each round
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
ROUNDS=${ROUNDS:-3}; USERS=${USERS:-500}; FAILOVER=${FAILOVER:-}
cargo build --release -p valkey-queue -p queue-api -p queue-manager -p chat-server -p queue-cli >/dev/null
cargo test --release -p e2e --test cluster --no-run >/dev/null 2>&1
filter=swarm_on_every_shard
[ -n "$FAILOVER" ] && filter=""
for round in $(seq "$ROUNDS"); do
  for backend in module lua; do
    echo "== round $round, $backend"
    CLUSTER_SWARM_USERS=$USERS CLUSTER_SWARM_SEED=$round cargo test --release -p e2e --test cluster -- \
      --test-threads 1 --nocapture "$backend::${filter}" 2>&1 | sed -E 's/^test .*\.\.\. //' \
      | grep -E "^(cluster swarm|manual failover|kill -9)|test result|panicked"
  done
done
