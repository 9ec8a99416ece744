#!/usr/bin/env bash
# Regenerate the curated counterexamples from the explorer, and the standalone pytest repro of
# each (pytest/test_POLICY_NAME.py). Each line names the ranges; the explorer minimises inside
# them (smallest T, then B, L, M, then trace length).
set -euo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

pick() {  # pick NAME POLICY PROPERTY [RANGES...]
  local name=$1 policy=$2 prop=$3
  shift 3
  chunkproof explore "$policy" --property "$prop" --out "$tmp/$name" --jobs 1 "$@" >/dev/null || true
  mkdir -p "$policy"
  cp "$tmp/$name/$policy/$prop.json" "$policy/$name.json"
  local stem="${policy}_${name}"
  chunkproof repro "$policy/$name.json" --pytest "pytest/test_${stem//[^[:alnum:]]/_}.py" >/dev/null
}

# vllm-0.33: the multi-module MTP livelock (0 < T mod B < L), smallest over the default grid.
pick p1-livelock-smallest vllm-0.33 P1
# SPEC K: B=16, L=3, T=49 under const(16): 16, 32, 46, then 0 forever.
pick p1-livelock-T49-B16-L3 vllm-0.33 P1 --block 16 --lookahead 3 --prompt 49 --max-sched 16 --budget 16-16 --drop off
# SPEC K: the smallest T for B=16, L=3 with M=16 is 17: one chunk to 14, then 0 forever.
pick p1-livelock-T17-B16-L3 vllm-0.33 P1 --block 16 --lookahead 3 --prompt 1-48 --max-sched 16 --drop off
# vllm-0.33: the reservation trims a chunk to an off-grid T - L.
pick p4-offgrid-reservation vllm-0.33 P4
# vllm-0.15: starvation when the budget is below a block (V1 floors the length to 0).
pick p1-starvation-below-block vllm-0.15 P1
# vllm-0.17 (V2, EAGLE drop on): a chunk from a mid-block end crosses the block end (#51113 class).
pick p3-poisoned-slot-eagle vllm-0.17 P3
# vllm-0.28 (V5): a prompt of exactly k blocks in one chunk loses the resend state (#50235).
pick p6-lost-resend-state vllm-0.28 P6
# lookahead-in-split: the proposed fix finishes over lambda, so R* is not cached.
pick p6-fix-skips-resend lookahead-in-split P6
# lookahead-in-split: in the sub-block regime a block end inside the window survives.
pick p5-fix-window-subblock lookahead-in-split P5
