#!/bin/sh
# `helm guard ...`: runs the helm-guard binary (found on PATH) with Helm's namespace
# (-n/--namespace, HELM_NAMESPACE) and kube context (--kube-context, HELM_KUBECONTEXT). Helm
# passes --kubeconfig on as KUBECONFIG, which helm-guard reads itself. Works with Helm 3 and 4.
set -eu

usage() {
  cat <<'USAGE'
Scan, inspect, repair, restore, forget and prune Helm releases with helm-guard.

Usage:
  helm guard scan [-A] [--release NAME] [--broken] [-o text|json|yaml]
  helm guard inspect RELEASE [--revision N] [--manifest] [--values]
  helm guard repair RELEASE [--apply] [--stuck-after 15m]
  helm guard restore RELEASE [--revision N] [--apply] [--guard-namespace helm-guard]
  helm guard forget RELEASE [--apply] [--guard-namespace helm-guard]
  helm guard prune RELEASE --keep N [--apply]

Helm's -n/--namespace and --kube-context apply (-A: every namespace, for scan).
`helm-guard COMMAND --help` tells more.
USAGE
}

command=${1:-}
case "$command" in
  scan | inspect | repair | restore | forget | prune) shift ;;
  "" | -h | --help | help)
    usage
    exit 0
    ;;
  *)
    echo "Error: unknown command \"$command\" for \"helm guard\" (scan, inspect, repair, restore, forget, prune)" >&2
    exit 1
    ;;
esac

if ! command -v helm-guard >/dev/null 2>&1; then
  echo "Error: helm guard runs the helm-guard binary, and there is none on PATH. Install it (cargo install --path . in helm-guard's repository, or a release binary) and try again." >&2
  exit 1
fi

# Helm's namespace, unless the command asks for every namespace.
all=false
for arg in "$@"; do
  case "$arg" in
    -A | --all-namespaces) all=true ;;
  esac
done
set -- "$command" "$@"
if [ "$all" = false ] && [ -n "${HELM_NAMESPACE:-}" ]; then
  set -- "$@" --namespace "$HELM_NAMESPACE"
fi
if [ -n "${HELM_KUBECONTEXT:-}" ]; then
  set -- "$@" --context "$HELM_KUBECONTEXT"
fi
exec helm-guard "$@"
