#!/usr/bin/env bash
# Shared by examples that hold a model file: capture it (graphguard capture), then verify.
#   run-model.sh MODEL.py [--frontend fx|hlo|onnx] [--world-size N] [--backward] [extra graphguard verify options]
# fx (default): a PyTorch model file; hlo: a JAX model file (the pre-partition HLO, the module after XLA's SPMD
# partitioner and the relation the shardings state); onnx: a PyTorch model file exported with torch.onnx.export.
set -euo pipefail
model="$1"; shift
ws=2; bw=(); args=(); fe=fx
while [ $# -gt 0 ]; do
  case "$1" in
    --frontend) fe="$2"; shift 2 ;;
    --world-size) ws="$2"; shift 2 ;;
    --world-size=*) ws="${1#*=}"; shift ;;
    --backward) bw=(--backward); shift ;;
    *) args+=("$1"); shift ;;
  esac
done
py="${PYTHON:-python3}"
out="$(mktemp -d)"
trap 'rm -rf "$out"' EXIT
if [ "$fe" = hlo ]; then
  files=(--frontend hlo --spec "$out/spec.hlo.pb" --impl "$out/impl.hlo.pb")
elif [ "$fe" = onnx ]; then
  files=(--frontend onnx --spec "$out/spec.onnx" --impl)
  for ((r = 0; r < ws; r++)); do files+=("$out/impl.rank$r.onnx"); done
else
  files=(--spec "$out/spec.gg.json" --impl "$out/impl.gg.json")
fi
"$py" -m graphguard capture --frontend "$fe" "$model" --world-size "$ws" ${bw[@]+"${bw[@]}"} -o "$out" >/dev/null
set +e
"$py" -m graphguard verify "${files[@]}" --relation "$out/relation.yaml" ${args[@]+"${args[@]}"}
exit $?
