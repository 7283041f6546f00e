#!/bin/bash
# Live mode against the real API server, beside snapshot mode over the same records: DELETE
# verdicts (a refusal; approvals of history pruning, of a break-glass deletion that keeps a copy
# in the recycle bin, and of a stuck revision's removal agreed with the other replicas; KINDS
# picks some) spread over SPREAD releases, at
# concurrency 1 and 16, with the defaults (the watch's fence, payloads read ahead, claim books)
# and as the guard did before them (a listing, GETs and a Lease per release per verdict), and the
# API server's count of the requests the guard made. Prints one table row per run.
#   benches/live-mode.sh [REQUESTS] [SPREAD]     (the cluster in KUBECONFIG; BENCHMARKS.md)
# RUNS picks the guards measured (default all): `warm` (the defaults, measured once every payload
# is read ahead: a guard that has been up), `cold` (the defaults, measured from the moment the
# guard is ready, while the read-ahead still reads: a guard just restarted or rolled), `before`
# (no fence nor read-ahead), `snapshot` (the same records from a dump; needs the dump).
# Seeds 100 namespaces x 10 releases x 10 revisions first unless bench-000 exists (SEED="N R V"
# seeds another size: 1000 10 10 is 100,000 records). BIN measures another build of the guard;
# SERVE_ARGS adds flags to every guard measured (e.g. --read-ahead=false); NAMESPACE_FLAG names
# the guard's namespace flag for builds before it was --guard-namespace (--lease-namespace).
# `previous` in RUNS measures PREVIOUS_BIN (the previous release's build) as `warm` does, in the
# same run: RUNS="previous warm previous warm" alternates them (issue 62).
set -euo pipefail
cd "$(dirname "$0")/.."
requests=${1:-4000}; spread=${2:-200}; kinds=${KINDS:-refusal approval keep coordinated}
runs=${RUNS:-warm cold before snapshot}; ns_flag=${NAMESPACE_FLAG:---guard-namespace}
# With BIN, the builds at hand are measured as they are (no rebuild).
[ -n "${BIN:-}" ] || cargo build --release --locked --bin helm-guard --example load --example live_load >&2
bin=${BIN:-target/release/helm-guard}; rig=target/release/examples/live_load; load=target/release/examples/load
kubectl get ns bench-000 >/dev/null 2>&1 || $rig seed ${SEED:-100 10 10} >&2
kubectl create ns hg-bench >/dev/null 2>&1 || true
certs=target/live-mode-certs
$bin certs --out $certs --san localhost --san 127.0.0.1 --force >/dev/null
# Made at each run: a review carries the record as stored (uid, resourceVersion), and reviews
# kept from records since deleted and seeded again are forged ones to the guard.
for kind in $kinds; do $rig reviews $kind "$spread" target/$kind.jsonl; done
if [[ " $runs " == *" snapshot "* ]]; then
  kubectl get secrets -A -l owner=helm -o json > target/live-mode-dump.json
fi
records=$($rig count)

run() {  # label, cold or warm, serve args...
  local label=$1 when=$2; shift 2
  taskset -c 0 ${RUN_BIN:-$bin} serve --listen 127.0.0.1:18443 --metrics-listen 127.0.0.1:19090 \
    --tls-cert $certs/tls.crt --tls-key $certs/tls.key --shutdown-delay 0s "$@" ${SERVE_ARGS:-} >/dev/null 2>&1 &
  local pid=$!
  for _ in $(seq 1 3000); do curl -sf localhost:19090/readyz >/dev/null && break; sleep 0.1; done
  # Warm: measured once the read-ahead has read every record (as a guard that has been up).
  if [ "$when" = warm ]; then
    for _ in $(seq 1 6000); do
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
  local rss; rss=$(awk '/VmRSS/ {printf "%.1f", $2 / 1024}' /proc/$pid/status)
  local hwm; hwm=$(awk '/VmHWM/ {printf "%.1f", $2 / 1024}' /proc/$pid/status)
  local read; read=$(curl -s localhost:19090/metrics | awk '/^helm_guard_payloads_read_ahead_total/ {print int($2)}')
  echo "| $label: after the load | RSS ${rss} MiB (peak ${hwm} MiB) | ${read:-0} of $records payloads read ahead |"
  kill $pid; wait $pid 2>/dev/null || true
}

echo "| mode | DELETE | c | throughput | latency | answers | API calls per verdict |"
echo "|---|---|---|---|---|---|---|"
for r in $runs; do
  case $r in
    warm) run "live (defaults: fence, read-ahead, claim books)" warm $ns_flag hg-bench ;;
    previous) RUN_BIN=${PREVIOUS_BIN:?PREVIOUS_BIN names the previous release\'s binary} \
        run "previous release, live (defaults)" warm ${PREVIOUS_NAMESPACE_FLAG:-$ns_flag} hg-bench ;;
    cold) run "live, just ready (read-ahead under way)" cold $ns_flag hg-bench ;;
    before) run "live, no fence nor read-ahead (listing, GETs)" cold $ns_flag hg-bench --watch-fence=false --read-ahead=false ;;
    snapshot) run "snapshot" cold --snapshot target/live-mode-dump.json ;;
  esac
done
