#!/bin/bash
# Memory as users see it: the chart's pods on a real node (README's install, in enforce mode),
# each guard's VmRSS and its container's cgroup working set (the memory cgroup's usage less its
# inactive file cache: what the kubelet reports and evicts by) once every payload is read ahead, and again after
# DELETES refusals the API server sends it (`kubectl delete` of each release's deployed latest,
# 16 at once: D8). Prints one line per pod and moment.
#   benches/pod-memory.sh [DELETES]
# Needs: KUBECONFIG with a node that runs pods (`kube-local node`), the image loaded
# (`image/build.sh && kube-local load helm-guard:0.1.0`), and the records seeded first, e.g.
# 100,000: `cargo run --release --example live_load -- seed 1000 10 10` (BENCHMARKS.md, "Memory").
set -euo pipefail
cd "$(dirname "$0")/.."
deletes=${1:-2000}
ns=hg-pod-bench
records=$(kubectl get secrets -A -l owner=helm -o name | wc -l)
echo "$records records; chart in $ns, enforce mode"
helm upgrade --install helm-guard charts/helm-guard -n $ns --create-namespace --set mode=enforce --wait >/dev/null
pods=$(kubectl -n $ns get pods -l app.kubernetes.io/name=helm-guard -o jsonpath='{.items[*].metadata.name}')

pid_of() {  # the guard's process in pod $1: the helm-guard whose cgroup names its container
  local id p
  id=$(kubectl -n $ns get pod "$1" -o jsonpath='{.status.containerStatuses[0].containerID}')
  id=${id#*://}
  for p in $(pgrep -x helm-guard); do
    grep -q "$id" "/proc/$p/cgroup" 2>/dev/null && { echo "$p"; return; }
  done
  echo "no helm-guard process of pod $1 on this machine" >&2; exit 1
}

usage() {  # pid: the container's memory use and inactive file cache, in bytes (cgroup v2 or v1)
  local path
  if path=$(grep -m1 '^[0-9]*:memory:' "/proc/$1/cgroup"); then
    path=/sys/fs/cgroup/memory${path#*:memory:}
    echo "$(cat "$path/memory.usage_in_bytes") $(awk '/^total_inactive_file / {print $2}' "$path/memory.stat")"
  else
    path=/sys/fs/cgroup$(cut -d: -f3 "/proc/$1/cgroup")
    echo "$(cat "$path/memory.current") $(awk '/^inactive_file / {print $2}' "$path/memory.stat")"
  fi
}

report() {  # moment
  local pod pid current inactive
  for pod in $pods; do
    pid=$(pid_of "$pod")
    read -r current inactive < <(usage "$pid")
    printf '%s %s: VmRSS %s, VmHWM %s, working set %.1f MiB (cgroup usage %.1f MiB)\n' "$pod" "$1" \
      "$(awk '/VmRSS/ {print $2, $3}' "/proc/$pid/status")" "$(awk '/VmHWM/ {print $2, $3}' "/proc/$pid/status")" \
      "$(echo "($current - $inactive) / 1048576" | bc -l)" "$(echo "$current / 1048576" | bc -l)"
  done
}

for pod in $pods; do
  ip=$(kubectl -n $ns get pod "$pod" -o jsonpath='{.status.podIP}')
  started=$(date +%s)
  until [ "$(curl -s "http://$ip:9090/metrics" | awk '/^helm_guard_payloads_read_ahead_total/ {print int($2)}')" -ge "$records" ] 2>/dev/null; do
    [ $(($(date +%s) - started)) -lt 600 ] || { echo "$pod: the read-ahead did not finish in 10 minutes" >&2; exit 1; }
    sleep 1
  done
done
sleep 5
report "after the read-ahead"
refused=$(for i in $(seq 0 $((deletes - 1))); do
  printf 'bench-%03d sh.helm.release.v1.r%04d.v10\n' $(((i / 10) % 1000)) $((i % 10))
done | xargs -P 16 -L 1 sh -c 'kubectl delete secret -n "$0" "$1" --wait=false 2>&1 | grep -c "is the latest, deployed revision" || true' | awk '{s += $1} END {print s}')
echo "$refused of $deletes deletions refused"
sleep 5
report "after the load"
