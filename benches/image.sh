#!/bin/bash
# The image as users run it: its size, its start-to-ready time against the cluster in
# KUBECONFIG (with whatever records it holds; BENCHMARKS.md used the 10,000 of
# `examples/live_load.rs seed 100 10 10`), and its memory once ready and after the read-ahead.
#   benches/image.sh            (after image/build.sh; podman, the cluster in KUBECONFIG)
set -euo pipefail
cd "$(dirname "$0")/.."
image=helm-guard:0.1.0
certs=target/image-bench-certs
target/release/helm-guard certs --out $certs --san localhost --force >/dev/null 2>&1 \
  || cargo run --release --quiet -- certs --out $certs --san localhost --force >/dev/null
chmod 0644 $certs/*
kubectl create ns hg-image-bench >/dev/null 2>&1 || true
pki=$(dirname "$KUBECONFIG")
records=$(kubectl get secrets,configmaps -A -l owner=helm -o name | wc -l)
echo "image: $(podman image inspect $image --format '{{.Size}}') bytes; $records records in the cluster"
podman rm -f hg-image-bench >/dev/null 2>&1 || true
started=$(date +%s.%N)
podman run -d --name hg-image-bench --network host --user 65532 --read-only --read-only-tmpfs=false \
  --cap-drop ALL --security-opt no-new-privileges \
  -v "$pki:$pki:ro" -v "$PWD/$certs:/certs:ro" $image serve --kubeconfig "$KUBECONFIG" \
  --listen 127.0.0.1:28443 --metrics-listen 127.0.0.1:29090 --tls-cert /certs/tls.crt --tls-key /certs/tls.key \
  --guard-namespace hg-image-bench >/dev/null
until curl -sf localhost:29090/readyz >/dev/null; do sleep 0.05; done
ready=$(date +%s.%N)
pid=$(podman inspect --format '{{.State.Pid}}' hg-image-bench)
echo "start to ready: $(echo "$ready - $started" | bc) s; RSS once ready: $(awk '/VmRSS/ {print $2, $3}' /proc/$pid/status)"
for _ in $(seq 1 1200); do
  n=$(curl -s localhost:29090/metrics | awk '/^helm_guard_payloads_read_ahead_total/ {print int($2)}')
  [ "${n:-0}" -ge "$records" ] && break; sleep 0.1
done
echo "read ahead: ${n:-0} payloads in $(echo "$(date +%s.%N) - $ready" | bc) s; RSS $(awk '/VmRSS/ {print $2, $3}' /proc/$pid/status), peak $(awk '/VmHWM/ {print $2, $3}' /proc/$pid/status)"
podman rm -f hg-image-bench >/dev/null
