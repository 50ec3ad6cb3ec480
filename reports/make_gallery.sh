#!/usr/bin/env bash
# Rebuild the example gallery in reports/gallery (about 1 minute): an estimate sweep, a
# bench comparison, a routing comparison and, where ../shared/data is present, the
# memory/quality table on stories260K, all rendered by `kvplan report`. The results go to
# reports/gallery-results (a report folder is replaced whole, so it holds only the report).
# From the repo root:
#   bash reports/make_gallery.sh
set -euo pipefail
out=reports/gallery-results
mkdir -p "$out"
kvplan estimate llama-3.1-70b --sweep context=1k..128k --sweep kv-dtype=bf16,fp8,int4 \
    --sweep gpu=h100-80gb,h200,a100-80gb --sweep tp=2,4,8 --out "$out/estimate.jsonl" > /dev/null
kvplan bench --model llama-3.1-8b --gpu l4 --rate 3 --num-requests 1000 \
    --optimizations contiguous-max,contiguous-pow2,contiguous-oracle,paged,prefix,paged+fp8 \
    --out "$out/bench.jsonl" > /dev/null
kvplan bench --workload chat --pods 4 --optimizations prefix --gpu l4 --rate 4 --num-requests 800 \
    --out "$out/routing.jsonl" > /dev/null
results=("$out/bench.jsonl" "$out/routing.jsonl" "$out/estimate.jsonl")
stories=../shared/data/models/stories260K
if [ -d "$stories" ]; then
    kvplan bench --mode real --device cpu --model-path "$stories/hf" --tokenizer "$stories/tok512.bin" \
        --quality-text "$stories/tinystories_validation_0.txt" --kv-budget 32 \
        --optimizations fp32,int8,int4,kivi-int4,sliding-window,streaming,h2o,snapkv,entropy-budget \
        --out "$out/quality.jsonl" > /dev/null
    results+=("$out/quality.jsonl")
fi
rm -f "$out/latest"  # bench's pointer to its newest file: not part of the gallery
kvplan report "${results[@]}" --out reports/gallery
