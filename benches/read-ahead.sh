#!/bin/bash
# How long a guard just started takes to read every payload ahead, what that costs the API
# server and etcd (their CPU from the guard's start to its last payload read, from
# /proc/PID/stat: run it where they run), and the guard's memory then. On the records
# benches/live-mode.sh seeds (run that first).
#   benches/read-ahead.sh [BIN]     (the cluster in KUBECONFIG; BENCHMARKS.md, "A restarted guard")
set -euo pipefail
cd "$(dirname "$0")/.."
bin=${1:-target/release/helm-guard}; certs=target/live-mode-certs
[ -n "${1:-}" ] || cargo build --release --locked --bin helm-guard --example live_load >&2
$bin certs --out $certs --san localhost --san 127.0.0.1 --force >/dev/null
kubectl create ns hg-bench >/dev/null 2>&1 || true
cpu() { awk '{print $14 + $15}' /proc/"$(pgrep -f "bin/$1" | head -1)"/stat; }
apiserver=$(cpu kube-apiserver); etcd=$(cpu etcd)
taskset -c 0 $bin serve --listen 127.0.0.1:18443 --metrics-listen 127.0.0.1:19090 --tls-cert $certs/tls.crt \
  --tls-key $certs/tls.key --shutdown-delay 0s ${NAMESPACE_FLAG:---guard-namespace} hg-bench >/dev/null 2>&1 &
pid=$!
trap 'kill $pid 2>/dev/null || true' EXIT
for _ in $(seq 1 3000); do curl -sf localhost:19090/readyz >/dev/null && break; sleep 0.1; done
ready=$(date +%s.%N); records=$(target/release/examples/live_load count); read=0
while [ "$read" -lt "$records" ] && kill -0 $pid; do
  sleep 0.1
  read=$(curl -s localhost:19090/metrics | awk '/^helm_guard_payloads_read_ahead_total/ {print int($2)}')
done
done_at=$(date +%s.%N); tick=$(getconf CLK_TCK)
echo "read ahead: $read of $records payloads, $(echo "$done_at - $ready" | bc) s after ready"
echo "CPU from the guard's start: API server $(( ($(cpu kube-apiserver) - apiserver) / tick )) s, etcd $(( ($(cpu etcd) - etcd) / tick )) s"
echo "guard: VmRSS $(awk '/VmRSS/ {printf "%.1f", $2 / 1024}' /proc/$pid/status) MiB, VmHWM $(awk '/VmHWM/ {printf "%.1f", $2 / 1024}' /proc/$pid/status) MiB"
