#!/usr/bin/env bash
# GPU checks for EAGLE Playground, on a machine with a CUDA GPU (not part of CI: CI machines have none).
#
#   bash scripts/gpu_check.sh                # from any directory, with the environment's python
#   PYTHON=/opt/venv/bin/python HF_TOKEN=hf_... bash scripts/gpu_check.sh
#
# Runs, each under its own time limit (under 8 minutes in all, kill grace included):
#   env             torch / CUDA / transformers / vLLM versions, GPUs, which presets can run here
#   local-default  the local engine on CUDA with the default pair: float32 (greedy = plain?) and bf16 speed
#   local-llama     Llama-3.1-8B-Instruct + EAGLE-3 on the local engine, bf16 (only with HF_TOKEN; pre-download
#                   the 16 GB with `huggingface-cli download meta-llama/Llama-3.1-8B-Instruct` or it may time out)
#   vllm            the vLLM backend, EAGLE-3.1 on the default pair, if vllm is importable
#                   (`python scripts/gpu_check.py vllm-llama` runs Llama-8B through vLLM; allow ~10 minutes)
# and prints tokens/s (plain vs speculative, medians after warm-up), mean acceptance length and per-position
# acceptance. A part that cannot run here says why and is skipped. Exit status: 1 if a part failed or timed out.
set -u
cd "$(dirname "$0")/.." || exit 1
PY=${PYTHON:-python3}
status=0

run() {
  local limit=$1 part=$2
  echo
  echo "=== ${part} (at most ${limit} s)"
  timeout --signal=INT --kill-after=15 "${limit}" "${PY}" scripts/gpu_check.py "${part}" "${@:3}"
  local rc=$?
  if [ "${rc}" -eq 124 ] || [ "${rc}" -eq 130 ] || [ "${rc}" -eq 137 ]; then
    echo "--- ${part}: stopped at the ${limit} s limit"
    status=1
  elif [ "${rc}" -ne 0 ]; then
    echo "--- ${part}: failed (exit ${rc})"
    status=1
  fi
}

run 25 env
run 85 local-default
if [ -n "${HF_TOKEN:-}" ]; then
  run 150 local-llama --max-new-tokens 96 --repeats 2
else
  echo; echo "=== local-llama skipped: set HF_TOKEN (an account that accepted the Llama 3.1 licence)"
fi
if "${PY}" -c "import vllm" >/dev/null 2>&1; then
  run 150 vllm --max-new-tokens 96 --repeats 2
else
  echo; echo "=== vllm skipped: vllm is not importable with ${PY} (see requirements-vllm.txt or the Dockerfile)"
fi
exit "${status}"
