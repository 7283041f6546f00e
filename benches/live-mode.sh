#!/bin/bash
# Live mode against the real API server, beside snapshot mode over the same records: DELETE
# verdicts (a refusal; approvals of history pruning, of a break-glass deletion that keeps a copy
# in the recycle bin, and of a stuck revision's removal agreed with the other replicas; KINDS
# picks some) spread over SPREAD releases, at
# concurrency 1 and 16, with the defaults (the watch's fence, payloads read ahead, claim books)
# and as the guard did before them (a listing, GETs and a Lease per release per verdict), and the
# API server's count of the requests the guard made. Prints one table row per run.
#   benches/live-mode.sh [REQUESTS] [SPREAD]     (the cluster in KUBECONFIG; BENCHMARKS.md)
# Seeds 100 namespaces x 10 releases x 10 revisions first unless bench-000 exists.
set -euo pipefail
cd "$(dirname "$0")/.."
requests=${1:-4000}; spread=${2:-200}; kinds=${KINDS:-refusal approval keep coordinated}
cargo build --release --locked --bin helm-guard --example load --example live_load >&2
bin=target/release/helm-guard; rig=target/release/examples/live_load; load=target/release/examples/load
kubectl get ns bench-000 >/dev/null 2>&1 || $rig seed 100 10 10 >&2
kubectl create ns hg-bench >/dev/null 2>&1 || true
certs=target/live-mode-certs
$bin certs --out $certs --san localhost --san 127.0.0.1 --force >/dev/null
for kind in $kinds; do [ -s target/$kind.jsonl ] || $rig reviews $kind "$spread" target/$kind.jsonl; done
kubectl get secrets -A -l owner=helm -o json > target/live-mode-dump.json
records=$(jq '.items | length' target/live-mode-dump.json)

run() {  # mode label, serve args...
  local label=$1; shift
  taskset -c 0 $bin serve --listen 127.0.0.1:18443 --metrics-listen 127.0.0.1:19090 \
    --tls-cert $certs/tls.crt --tls-key $certs/tls.key --shutdown-delay 0s "$@" >/dev/null 2>&1 &
  local pid=$!
  for _ in $(seq 1 600); do curl -sf localhost:19090/readyz >/dev/null && break; sleep 0.1; done
  # With the read-ahead, measure once it has read every record (as a guard that has been up).
  if [[ "$*" != *--read-ahead=false* && "$*" != *--snapshot* ]]; then
    for _ in $(seq 1 1200); do
      read_ahead=$(curl -s localhost:19090/metrics | awk '/^helm_guard_payloads_read_ahead_total/ {print int($2)}')
      [ "${read_ahead:-0}" -ge "$records" ] && break; sleep 0.1
    done
  fi
  for kind in $kinds; do
    for c in 1 16; do
      local n=$requests; [ "$c" = 1 ] && n=$((requests / 4))
      if [ "$kind" = keep ]; then
        # Each approval keeps a new copy: the bin emptied first, no review sent twice.
        kubectl delete secrets -n hg-bench -l helm-guard.io/recycle-bin=copy >/dev/null
        local distinct; distinct=$(wc -l < target/keep.jsonl); [ "$n" -gt "$distinct" ] && n=$distinct
      fi
      local before; before=$($rig apicalls)
      local out; out=$(taskset -c 1 $load 127.0.0.1:18443 $certs/ca.crt target/$kind.jsonl "$n" "$c")
      local after; after=$($rig apicalls)
      local answered; answered=$(echo "$out" | sed -n 's/requests: \([0-9]*\) answered (\([0-9]*\) allowed).*/\1 \2/p')
      local rate; rate=$(echo "$out" | sed -n 's/throughput: \([0-9]*\).*/\1/p')
      local lat; lat=$(echo "$out" | sed -n 's/latency: p50 \([^ ]*\) .*p99 \([^ ]*\) .*/p50 \1, p99 \2/p')
      local calls; calls=$(awk -v a="$after" -v b="$before" -v n="${answered%% *}" 'BEGIN { printf "%.3f", (a - b) / n }')
      echo "| $label | $kind | $c | $rate req/s | $lat | ${answered#* } of ${answered%% *} allowed | $calls |"
    done
  done
  kill $pid; wait $pid 2>/dev/null || true
}

echo "| mode | DELETE | c | throughput | latency | answers | API calls per verdict |"
echo "|---|---|---|---|---|---|---|"
run "live (defaults: fence, read-ahead, claim books)" --guard-namespace hg-bench
run "live, no fence nor read-ahead (listing, GETs)" --guard-namespace hg-bench --watch-fence=false --read-ahead=false
run "snapshot" --snapshot target/live-mode-dump.json
