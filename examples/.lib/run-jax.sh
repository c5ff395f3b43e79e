#!/usr/bin/env bash
# Shared by examples that hold a JAX model file: run-model.sh with the hlo frontend.
#   run-jax.sh MODEL.py [--world-size N] [--backward] [extra graphguard verify options]
model="$1"; shift
exec "$(dirname "${BASH_SOURCE[0]}")/run-model.sh" "$model" --frontend hlo "$@"
