#!/usr/bin/env bash
# One prepared check on a lent GPU machine (the workplace's `device` tool; results in benchmarks/RESULTS.md):
#   bash benchmarks/gpu_check.sh [PART ...]     PART: eval-bf16 eval-fp32 train profile quickstart (default: all)
# eval throughput (medqa vs lm-evaluation-harness vs generate-and-parse), training throughput (default vs the
# seed recipe through HF Trainer) in bf16, a cProfile of one medqa training run, and the README main job with
# device auto.  The real embedded weights (a 250 MB GGUF) cannot travel there, so the model is the embedded
# architecture and tokenizer with random weights (benchmarks/gpu_model.py): timings are real, accuracies are
# not.  Prepared here beforehand (ignored by git, named in the call's `carry`):
#   .whl/          wheels the GPU image lacks (lm_eval and its deps; transformers/peft/tokenizers as here)
#   .gpu/model/    the embedded model's config + tokenizer (tokenizer.json.gz)
#   .gpu/data/     ../shared/data/medmcqa/{dev_public,train_cardio_subset}.jsonl
set -uo pipefail
OUT=${OUT:-/tmp/medqa-gpu-out}
PARTS=${*:-eval-bf16 eval-fp32 train profile quickstart}
mkdir -p "$OUT"
exec > >(tee "$OUT/all.log") 2>&1
rm -rf /tmp/site
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
  || exit 1
export PYTHONPATH=/tmp/site:$PWD HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 PYTHONUNBUFFERED=1 \
  MEDQA_CACHE=/tmp/medqa-cache TOKENIZERS_PARALLELISM=false
mkdir -p ../shared && cp -r .gpu/data ../shared/
M=/tmp/gemma3-270m-random
{ nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv; nproc
  python3 -c "import torch, transformers, peft, lm_eval; print('torch', torch.__version__, 'transformers',
transformers.__version__, 'peft', peft.__version__, 'cuda', torch.cuda.is_available())"; } | tee "$OUT/env.txt"
python3 benchmarks/gpu_model.py .gpu/model "$M" || exit 1
EVAL="python3 benchmarks/eval_speed.py --model $M --device cuda --batch-size 8 --threads 0 --rounds 1"
METHODS=medqa,lmeval,generate,medqa-tmpl
for part in $PARTS; do
  echo "=== $part"
  case $part in
    eval-bf16|eval-fp32)
      dt=${part#eval-}
      # untimed first pass: a fresh machine compiles/loads kernels on first use (seen: the first method of the
      # first run was 4-10x slower than the same method later), so every method then starts warm
      timeout 120 $EVAL --dtype "$dt" --n 16 --methods medqa,lmeval >/dev/null 2>&1
      timeout 240 $EVAL --dtype "$dt" --n 300 --methods $METHODS --json "$OUT/eval_$dt.json" ;;
    train)
      timeout 300 python3 benchmarks/train_speed.py --model "$M" --device cuda --dtype bf16 --n ${TRAIN_N:-512} --threads 0 \
        --recipes default,default-b16,seed --json "$OUT/train_bf16.json" ;;
    profile)
      mkdir -p /tmp/prof
      timeout 120 python3 -m cProfile -o "$OUT/train_default.prof" benchmarks/train_speed.py --worker default \
        --tmp /tmp/prof --n ${PROFILE_N:-256} --model "$M" --device cuda --dtype bf16 --threads 0 ;;
    quickstart)
      timeout 200 python3 -m medqa quickstart --model "$M" --out /tmp/qs ;;
    *) echo "unknown part $part" ;;
  esac
done
echo "=== done"
