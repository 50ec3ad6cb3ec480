#!/usr/bin/env bash
# Rebuild the example gallery in reports/gallery (about 30 s): an estimate sweep and a
# bench comparison, rendered by `kvplan report`. Run from the repository root:
#   bash reports/make_gallery.sh
set -euo pipefail
out=reports/gallery
mkdir -p "$out"
kvplan estimate llama-3.1-70b --sweep context=1k..128k --sweep kv-dtype=bf16,fp8,int4 \
    --sweep gpu=h100-80gb,h200,a100-80gb --sweep tp=2,4,8 --out "$out/estimate.jsonl" > /dev/null
kvplan bench --model llama-3.1-8b --gpu l4 --rate 3 --num-requests 1000 \
    --optimizations contiguous-max,contiguous-pow2,contiguous-oracle,paged,paged+fp8 \
    --out "$out/bench.jsonl" > /dev/null
kvplan report "$out/bench.jsonl" "$out/estimate.jsonl" --out "$out"
