#!/usr/bin/env bash
# One H200 check for kvplan's real mode, run from the repository root (the device tool's
# working-tree copy):   benchmarks/gpu_check.sh            writes into $OUT
#                       benchmarks/gpu_check.sh --cpu-dry-run   tiny shapes, Triton interpreter, CPU
# Budget: at most 8 minutes; every stage has its own timeout so a hang cannot eat the rest, and
# all of them together are cut to one deadline (BUDGET s from the start, then the summary).
# Writes at most 8 files into $OUT (the device tool brings back 8): env.txt, pytest.txt,
# decode.csv, prefill.csv, real_bench.jsonl, real_bench.txt, log.txt, RESULTS_section.md.
# Then, here: python benchmarks/gpu_results_md.py <fetched folder> >> benchmarks/RESULTS.md
#
# Packages: the device image has no registry access, so the script uses its python3's torch,
# triton and transformers (2026-11: torch 2.11, triton 3.6, transformers 5.17, Python 3.12);
# only if one is missing does it try pip (unpinned, so it never replaces the image's CUDA torch;
# it works only where PyPI is reachable, and fails in seconds where not). kvplan itself is put
# on PYTHONPATH from this tree (kernels/kvplan_kernels/ as kvplan.kernels, profiles/ as
# kvplan.profiles_data), no install; every stage runs from a scratch folder, since the
# repository root on sys.path (python -m puts the working folder there) would give the tree's
# kvplan/, which lacks kernels.
set -uo pipefail
DRY=0
if [[ "${1:-}" == "--cpu-dry-run" ]]; then DRY=1; fi
OUT="${OUT:-$(mktemp -d /tmp/kvplan-gpu-check.XXXX)}"
mkdir -p "$OUT"
OUT="$(cd "$OUT" && pwd)"  # the stages below run from a scratch folder
export PYTHONUNBUFFERED=1 TRITON_DEFAULT_FP_FUSION=1
PY="${PYTHON:-python3}"
LOG="$OUT/log.txt"
START=$(date +%s)
stage() { echo "== $1 ($(( $(date +%s) - START )) s)" | tee -a "$LOG"; }
SLOW=1  # timeouts below are for the H200; the interpreter on a CPU gets 4x longer
if [[ $DRY == 1 ]]; then SLOW=4; fi
BUDGET=$((460 * SLOW))  # every stage ends by then; the summary (at most 10 s) follows
# limit N: N * SLOW seconds, or what is left of BUDGET if that is less (at least 1)
limit() {
  local want=$(($1 * SLOW)) left=$((BUDGET - ($(date +%s) - START)))
  (( left < want )) && want=$left
  (( want < 1 )) && want=1
  echo "$want"
}

stage "environment"
ENV_PY="import sys, torch, triton, transformers, typer, rich, numpy; print(sys.version.split()[0], 'torch', torch.__version__, 'cuda', torch.version.cuda, 'triton', triton.__version__, 'transformers', transformers.__version__); print('gpu', torch.cuda.get_device_name(0) if torch.cuda.is_available() else 'none')"
{
  date -u; uname -a
  timeout 20 nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,clocks.mem --format=csv 2>&1
  timeout 60 "$PY" -c "$ENV_PY" 2>&1
} > "$OUT/env.txt"
ENV_RC=$?  # the python line's: 124 is a slow import, not a missing package
if [[ $ENV_RC != 0 && $ENV_RC != 124 ]]; then
  echo "missing packages: trying pip (needs PyPI)" | tee -a "$LOG"
  timeout 30 "$PY" -m pip install -q --retries 0 --timeout 5 torch triton transformers typer rich numpy pandas >> "$LOG" 2>&1 \
    || echo "pip install failed (no registry?)" | tee -a "$LOG"
fi
SITE="$(mktemp -d /tmp/kvplan-site.XXXX)"
cp -r kvplan "$SITE/kvplan" && cp -r kernels/kvplan_kernels "$SITE/kvplan/kernels" && cp -r profiles "$SITE/kvplan/profiles_data"
export PYTHONPATH="$SITE${PYTHONPATH:+:$PYTHONPATH}"
REPO="$(pwd)"
SCRATCH="$(mktemp -d /tmp/kvplan-run.XXXX)"
cd "$SCRATCH"
cat "$OUT/env.txt" | tee -a "$LOG"

# Compiled kernels need triton imported with the interpreter off (its standard library is
# jitted at import; the test modules default the variable to 1 for CPU runs).
export TRITON_INTERPRET=0
if [[ $DRY == 1 ]]; then
  # the gpu tests are collected and skip without CUDA: that proves they import
  export TRITON_INTERPRET=1 CUDA_VISIBLE_DEVICES=""
fi

stage "pytest -m gpu"
timeout "$(limit 150)" "$PY" -m pytest -q -p no:cacheprovider -m gpu "$REPO/tests/test_kernels_gpu.py" \
  -o addopts="" > "$OUT/pytest.txt" 2>&1
echo "pytest exit $?: $(tail -1 "$OUT/pytest.txt")" | tee -a "$LOG"

DRYFLAG=""; [[ $DRY == 1 ]] && DRYFLAG="--cpu-dry-run"
stage "decode kernel vs SDPA and the HBM roofline"
timeout "$(limit 150)" "$PY" "$REPO/benchmarks/gpu_bench.py" decode "$OUT/decode.csv" $DRYFLAG >> "$LOG" 2>&1
echo "decode exit $?" | tee -a "$LOG"

stage "prefill kernel TFLOP/s"
timeout "$(limit 50)" "$PY" "$REPO/benchmarks/gpu_bench.py" prefill "$OUT/prefill.csv" $DRYFLAG >> "$LOG" 2>&1
echo "prefill exit $?" | tee -a "$LOG"

stage "real mode: random-weight Llama-3.1-8B shape, 4 layers, paged vs contiguous"
if [[ $DRY == 1 ]]; then
  REAL_ARGS=(--model stories260K --model-path "${KVPLAN_DRY_MODEL:-$REPO/kvplan/samples/stories260K/hf}" --device cpu
             --num-requests 4 --max-model-len 256 --kv-cache-gib 0.05 --kernel-backend torch)
else
  REAL_ARGS=(--model llama-3.1-8b --layers 4 --device cuda --model-dtype bf16 --num-requests 128
             --max-model-len 4096 --kv-cache-gib 16)
fi
# The rest of the budget (about 100 s when every stage above used all of its own): cut short, the
# bench keeps the optimizations that finished. Its --out is in the scratch folder, since it
# writes a `latest` pointer beside it: in $OUT that would be a ninth file.
timeout "$(limit 460)" "$PY" -m kvplan bench --mode real --gpu h200 "${REAL_ARGS[@]}" --workload sharegpt --arrival burst \
  --optimizations contiguous-max,paged,paged+fp8 --out "$SCRATCH/real_bench.jsonl" > "$OUT/real_bench.txt" 2>&1
echo "real bench exit $?" | tee -a "$LOG"
[[ -s "$SCRATCH/real_bench.jsonl" ]] && cp "$SCRATCH/real_bench.jsonl" "$OUT/real_bench.jsonl"

stage "summary"
timeout 10 "$PY" "$REPO/benchmarks/gpu_results_md.py" "$OUT" > "$OUT/RESULTS_section.md" 2>> "$LOG"
cat "$OUT/RESULTS_section.md"
stage "done"
rm -rf "$SITE" "$SCRATCH"
