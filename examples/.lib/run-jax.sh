#!/usr/bin/env bash
# Shared by examples that hold a JAX model file: capture it (graphguard capture --frontend hlo: the
# pre-partition HLO, the module after XLA's SPMD partitioner and the relation the shardings state), verify.
#   run-jax.sh MODEL.py [--world-size N] [--backward] [extra graphguard verify options]
set -euo pipefail
model="$1"; shift
ws=2; bw=(); args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --world-size) ws="$2"; shift 2 ;;
    --world-size=*) ws="${1#*=}"; shift ;;
    --backward) bw=(--backward); shift ;;
    *) args+=("$1"); shift ;;
  esac
done
py="${PYTHON:-python3}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
"$py" -m graphguard capture --frontend hlo "$model" --world-size "$ws" ${bw[@]+"${bw[@]}"} -o "$out" >/dev/null
set +e
"$py" -m graphguard verify --frontend hlo --spec "$out/spec.hlo.pb" --impl "$out/impl.hlo.pb" \
  --relation "$out/relation.yaml" ${args[@]+"${args[@]}"}
exit $?
