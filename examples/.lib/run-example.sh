#!/usr/bin/env bash
# Shared by every examples/*/run: verify the example's files (or, with --world-size N, files generated for
# N ranks by the example's make.py), print the verdict and exit with graphguard's exit code.
#   run-example.sh DIR [MAKE_PY VARIANT] -- [--world-size N] [extra graphguard verify options]
set -euo pipefail
dir="$1"; shift
make_py=""; variant=""
if [ "${1:-}" != "--" ]; then make_py="$1"; variant="$2"; shift 2; fi
shift  # --
ws=""; args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --world-size) ws="$2"; shift 2 ;;
    --world-size=*) ws="${1#*=}"; shift ;;
    *) args+=("$1"); shift ;;
  esac
done
py="${PYTHON:-python3}"
files="$dir"
if [ -n "$ws" ]; then
  if [ -z "$make_py" ]; then echo "this example has no --world-size" >&2; exit 2; fi
  files="$(mktemp -d)"
  trap 'rm -rf "$files"' EXIT
  "$py" "$make_py" --world-size "$ws" --variant "$variant" --out "$files"
fi
set +e
"$py" -m graphguard verify --spec "$files/spec.gg.json" --impl "$files/impl.gg.json" \
  --relation "$files/relation.yaml" ${args[@]+"${args[@]}"}
exit $?
