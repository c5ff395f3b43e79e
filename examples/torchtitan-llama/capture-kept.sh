#!/usr/bin/env bash
# Regenerate the graphs kept in captured/ (the test suite verifies them without torchtitan installed).
# PYTHON: a Python with torchtitan 0.3.0 (see README).
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
py="${PYTHON:-python3}"
GG_TITAN_MESH=tp "$py" -m graphguard capture "$here/model.py" --world-size 2 --backward -o "$here/captured/tp2"
GG_TITAN_MESH=tp "$py" -m graphguard capture "$here/model.py" --world-size 4 --backward -o "$here/captured/tp4"
GG_TITAN_MESH=fsdp-tp GG_TITAN_TP=2 "$py" -m graphguard capture "$here/model.py" --world-size 4 --backward \
  -o "$here/captured/fsdp2x-tp2"
GG_TITAN_MESH=tp GG_TITAN_LOSS=1 "$py" -m graphguard capture "$here/model.py" --world-size 2 --backward \
  -o "$here/captured/tp2-loss"
GG_TITAN_MESH=tp GG_TITAN_LOSS=1 "$py" -m graphguard capture "$here/model.py" --world-size 4 --backward \
  -o "$here/captured/tp4-loss"
