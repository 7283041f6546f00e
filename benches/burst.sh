#!/bin/bash
# A burst of history-pruning DELETEs, one per release over RELEASES releases, sent at once to two
# live replicas (half each), as the API server sends a fleet's
# `helm upgrade --history-max` prunes (200 connections to each: a replica takes 256 at most):
# how many were approved, the latency, the API calls.
#   benches/burst.sh [RELEASES]     (after benches/live-mode.sh has seeded the cluster)
# BIN measures another build of the guard (the rig and the load are this checkout's); builds
# before 2026-12-03 named the guard's namespace --lease-namespace (NAMESPACE_FLAG=--lease-namespace).
set -euo pipefail
cd "$(dirname "$0")/.."
releases=${1:-1000}; shift || true
bin=${BIN:-target/release/helm-guard}; rig=target/release/examples/live_load; load=target/release/examples/load
certs=target/live-mode-certs
[ -s target/burst.jsonl ] || $rig reviews approval "$releases" target/burst.jsonl
head -n $((releases / 2)) target/burst.jsonl > target/burst-a.jsonl
tail -n +$((releases / 2 + 1)) target/burst.jsonl > target/burst-b.jsonl
kubectl create ns hg-bench >/dev/null 2>&1 || true   # the replicas' namespace: fence, claim books
records=$(kubectl get secrets -A -l owner=helm -o name | wc -l)
pids=()
# The replicas end with the script, however it ends (a replica that exits early included).
trap 'kill "${pids[@]}" 2>/dev/null || true; wait 2>/dev/null || true' EXIT
for r in a b; do
  port=$([ $r = a ] && echo 18443 || echo 18444); metrics=$([ $r = a ] && echo 19090 || echo 19091)
  $bin serve --listen 127.0.0.1:$port --metrics-listen 127.0.0.1:$metrics --tls-cert $certs/tls.crt \
    --tls-key $certs/tls.key --shutdown-delay 0s ${NAMESPACE_FLAG:---guard-namespace} hg-bench --replica-id burst-$r "$@" >target/burst-$r.log 2>&1 &
  pids+=($!)
done
for metrics in 19090 19091; do
  for _ in $(seq 1 1200); do
    for pid in "${pids[@]}"; do kill -0 "$pid" 2>/dev/null || { echo "a replica exited: target/burst-*.log" >&2; exit 1; }; done
    n=$(curl -s localhost:$metrics/metrics | awk '/^helm_guard_payloads_read_ahead_total/ {print int($2)}')
    [ "${n:-0}" -ge "$records" ] && break; sleep 0.1
  done
done
before=$($rig apicalls)
$load 127.0.0.1:18443 $certs/ca.crt target/burst-a.jsonl $((releases / 2)) 200 > target/burst-a.out &
$load 127.0.0.1:18444 $certs/ca.crt target/burst-b.jsonl $((releases / 2)) 200 > target/burst-b.out
wait "$!" 2>/dev/null || true
after=$($rig apicalls)
cat target/burst-a.out target/burst-b.out
echo "API calls: $(awk -v a="$after" -v b="$before" 'BEGIN { print a - b }') for $releases verdicts"
