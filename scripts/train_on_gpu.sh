#!/usr/bin/env bash
# Distil and train both drafters on one CUDA GPU, in one go: the recipe of the shipped drafters (see the model card).
# The same stages as the CPU recipe in docs/training.md, with bigger batches and more data; the target runs in float32.
#   WORK             working folder (default runs/smollm2-gpu): distill/, run/, drafters/eagle3, drafters/eagle3.1
#   DRAWS            draws of the prompt templates to answer (default 0-7; draw n adds prompts no earlier draw asked)
#   DISTILL_SECONDS  time cap for answering them (default: none); the shards finished by then are the training data
#   MINUTES          training budget (default 30), BATCH blocks per step (64) of SEQ_LEN tokens (512), DEPTH TTT
#                    unroll (5)
set -euo pipefail
WORK=${WORK:-runs/smollm2-gpu}
mkdir -p "$WORK"
python -m playground train distill --device cuda --batch-size 256 --splits validation \
  --collection tasks,tasks2,base --out "$WORK/distill"
timeout "${DISTILL_SECONDS:-0}" python -m playground train distill --device cuda --batch-size 256 --splits train \
  --collection tasks,tasks2,base --draws "${DRAWS:-0-7}" --out "$WORK/distill" || [ $? -eq 124 ]
python -m playground train drafter --device cuda --minutes "${MINUTES:-30}" --batch-size "${BATCH:-64}" \
  --seq-len "${SEQ_LEN:-512}" --ttt-depth "${DEPTH:-5}" --data "$WORK/distill" --run-dir "$WORK/run" --out "$WORK/drafters"
