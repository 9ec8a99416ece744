#!/usr/bin/env bash
# Regenerate the curated counterexamples from the explorer (and, for several requests, from
# `chunkproof system`), and the pytest repro of each (pytest/test_POLICY_NAME.py): the short
# form a vLLM PR would add (`repro --style vllm`: vLLM's own Scheduler methods on a stub self)
# where it serves, one request without encoder items whose property is not P3, P6 or P8 (they
# need the tree's own Mamba keys, KV cache lookup or block allocation); else the standalone form,
# which reads the methods from a source tree. `chunkproof repro FILE --pytest OUT` writes the
# standalone form of any of them on demand.
# Each line names the ranges; the explorer minimises inside them (smallest T, then B, L, M, then
# trace length). The ranges are small so that each line takes seconds; every file must replay
# on the policy it was found on.
set -euo pipefail
cd "$(dirname "$0")"
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# The set of files is exactly what the lines below write.
rm -f ./*/*.json pytest/test_*.py

pick() {  # pick NAME POLICY PROPERTY [RANGES...]
  local name=$1 policy=$2 prop=$3 status=0
  shift 3
  chunkproof explore "$policy" --property "$prop" --out "$tmp/$name" --jobs 1 "$@" >/dev/null \
    || status=$?
  keep "$name" "$policy" "$prop.json" "$status" "explore $policy --property $prop $*"
}

style() {  # style FILE: vllm for one request without encoder items, not P3, P6 or P8, else standalone
  python3 -c 'import json, sys
data = json.load(open(sys.argv[1]))
single = "config" in data and not data["config"].get("items")
print("vllm" if single and data["property"] not in ("P3", "P6", "P8") else "standalone")' "$1"
}

pick_system() {  # pick_system NAME POLICY PROPERTY [RANGES...]: several requests, one step
  local name=$1 policy=$2 prop=$3 status=0
  shift 3
  chunkproof system "$policy" --out "$tmp/$name" "$@" >/dev/null || status=$?
  keep "$name" "$policy" "system-$prop.json" "$status" "system $policy $*"
}

keep() {  # keep NAME POLICY FILE STATUS COMMAND: the run's FILE as POLICY/NAME.json, and its repro
  local name=$1 policy=$2 file=$3 status=$4 command=$5
  if [ "$status" -ne 1 ]; then  # 1: a property is violated
    echo "$name: chunkproof $command exited $status, not 1" >&2
    exit 1
  fi
  mkdir -p "$policy"
  cp "$tmp/$name/$policy/$file" "$policy/$name.json"
  chunkproof replay "$policy/$name.json" >/dev/null
  local stem="${policy}_${name}"
  chunkproof repro "$policy/$name.json" --style "$(style "$policy/$name.json")" \
    --pytest "pytest/test_${stem//[^[:alnum:]]/_}.py" >/dev/null
}

CLASSIC=(--block 4,8,16 --lookahead 0-4 --prompt 1-16 --max-sched 1-8 --drop both)
SMALL=(--block 4,8 --lookahead 0-3 --prompt 1-16 --max-sched 1-8 --drop both)

# vllm-0.33: the multi-module MTP livelock (0 < T mod B < L), smallest over the classic grid
# (SPEC K: T=5, B=4, L=2).
pick p1-livelock-smallest vllm-0.33 P1 "${CLASSIC[@]}"
# SPEC K: B=16, L=3, T=49 under const(16): 16, 32, 46, then 0 forever.
pick p1-livelock-T49-B16-L3 vllm-0.33 P1 --block 16 --lookahead 3 --prompt 49 --max-sched 16 --budget 16-16 --drop off
# SPEC K: the smallest T for B=16, L=3 with M=16 is 17: one chunk to 14, then 0 forever.
pick p1-livelock-T17-B16-L3 vllm-0.33 P1 --block 16 --lookahead 3 --prompt 1-48 --max-sched 16 --drop off
# SPEC K as P7: const(16) never finishes (16, 32, 46, then 0 on every step).
pick p7-const16-never-finishes-T49-B16-L3 vllm-0.33 P7 --block 16 --lookahead 3 --prompt 49 --max-sched 16 --budget 16-16 --drop off
# vllm-0.33: the reservation trims a chunk to an off-grid T - L.
pick p4-offgrid-reservation vllm-0.33 P4 "${CLASSIC[@]}"
# vllm-0.33: a KV connector loads the prefix up to T - L (c0 = x); the admission chunk would end
# inside the lookahead window (T - L, T), the reservation trims it to 0 for every budget, and the
# request waits forever.
pick p1-livelock-external-start vllm-0.33 P1 --block 4 --lookahead 3 --prompt 1-16 --max-sched 1-8 --drop off --start external
# vllm-0.33 with internal checkpoints (alpha = 1) and partial hits (H = G/2): admitted at a
# mid-block hit, the first chunk runs past the block end.
pick p3-checkpoints-partial-hit vllm-0.33 P3 "${SMALL[@]}" --checkpoints on --checkpoint-alignment 1 --hash-block G/2 --start 0,hash
# vllm-0.33 with the split on a finer grid than the Mamba block (G = B/2): a chunk from a
# G-aligned, mid-block end crosses the block end (P3), and chunks end off the B grid (P4).
pick p3-split-grid-half-block vllm-0.33 P3 "${SMALL[@]}" --split-block B/2
pick p4-split-grid-half-block vllm-0.33 P4 "${SMALL[@]}" --split-block B/2
# vllm-0.15: starvation when the budget is below a block (V1 floors the length to 0).
pick p1-starvation-below-block vllm-0.15 P1 "${CLASSIC[@]}"
# vllm-0.17 (V2): an external (KV connector) hit at admission trips the split's assert (P0).
pick p0-external-hit-assert vllm-0.17 P0 --block 4 --lookahead 0 --prompt 1-8 --max-sched 1-4 --drop off --start external
# vllm-0.17 (V2, EAGLE drop on, with L = 1 as 0.17 requires): a chunk from a mid-block end
# crosses the block end (#51113 class).
pick p3-poisoned-slot-eagle vllm-0.17 P3 "${CLASSIC[@]}"
# vllm-0.26 (P3 under 0.24-0.29's retention mask, R = 0): under the EAGLE drop the mask keeps
# the column of N - 1 = 4, so the chunk [1, 5) keys 4 onto the block holding state@1 (0.30's
# mask keeps the drop's boundaries instead and keys nothing there).
pick p3-retention-mask-drop vllm-0.26 P3 --block 4 --lookahead 1 --drop on --retention 0 --prompt 1-12 --max-sched 1-4
# vllm-0.30 (P3, 0.30-0.31): the chunk [4, 13) writes a checkpoint and keeps the speculative block
# of the chunk before it in place at column 1; the cache keys 8 onto it, and it holds no state
# (0.32 moves it past the checkpoint).
pick p3-spare-speculative-block vllm-0.30 P3 --block 4 --lookahead 1 --drop off --checkpoints on --checkpoint-alignment 1 --prompt 1-16 --max-sched 1-12
# vllm-0.30 (P6 with internal checkpoints at R = 0): the chunk [0, 5) writes its checkpoint at
# R* = 4, and 0.30 evicts every checkpoint under R = 0, the prompt's own too (0.31 keeps it).
pick p6-checkpoint-evicted-retention-0 vllm-0.30 P6 --block 4 --lookahead 0 --checkpoints on --checkpoint-alignment 1 --retention 0 --prompt 1-12 --max-sched 1-12
# vllm-0.27 (#40707): two images the encoder cache holds one at a time; the encoder cap, before
# the split, leaves the 2 tokens before the second image and the split floors them to 0.
pick p1-encoder-two-items vllm-0.27 P1 --block 4 --lookahead 0 --drop off --prompt 16 --max-sched 6 --items 1+4,6+4
# vllm-0.28 (V5): a prompt of exactly k blocks in one chunk loses the resend state (#50235).
pick p6-lost-resend-state vllm-0.28 P6 "${CLASSIC[@]}"
# vllm-0.33 (SPEC KV2, P8): the chunk after the prompt's tail T = 6, keyed off the Mamba grid
# (h = G = 2 < B = 8), asks for a copy-on-write block the start-up sizer does not count. In the
# smallest pool 0.33 starts with for max_model_len = 9, the running request preempts itself.
pick p8-tail-copy-beyond-startup-pool vllm-0.33 P8 --block 8 --split-block B/4 --lookahead 1 --drop on --prompt 1-12 --max-sched 1-4
# vllm-0.28 (P8): 0.23-0.28's start-up check counts the null block as the request's, so a
# prompt of max_model_len = 9 tokens (B = 8) is refused its last token's blocks.
pick p8-null-block-startup-pool vllm-0.28 P8 --block 8 --lookahead 0 --drop off --prompt 1-12 --max-sched 1-2
# vllm-0.33 (KV2 rule 2d): an identical request left its state at the prompt's tail T = 2
# (h = 2 < B = 4); the resend's first chunk [2, 3) at that hit asks 4 blocks (the partial
# attention block's copy and the tail copy among them) with 3 free in the pool of 4 that held
# the first request. The waiting loop never admits it.
pick p8-seeded-partial-hit vllm-0.33 P8 --block 4 --hash-block 2 --lookahead 0 --drop off --start hash --prompt 1-8 --max-sched 1-4
# vllm-0.30 (KV2 rule 2c): with prefill checkpoints on, the chunk [4, 13) writes one and asks
# every Mamba block it spans (3), uncapped, beyond the one checkpoint block the sizer counts.
pick p8-checkpoint-uncapped-ask vllm-0.30 P8 --block 4 --lookahead 0 --drop off --checkpoints on --checkpoint-alignment 1 --prompt 1-13 --max-sched 1-9
# vllm-0.28 (KV2 rule 2e): at a KV connector's external hit x = 4, the chunk [4, 5) crosses
# into the next Mamba block; the Mamba group counts S + 1 = 1 block and takes 2 (one for the
# loaded state), and 0.23-0.28's least pool has no block to spare: get_new_blocks raises.
pick p8-external-hit-miscount vllm-0.28 P8 --block 4 --lookahead 0 --drop off --start external --prompt 1-8 --max-sched 1-2
# lookahead-in-split: the proposed fix finishes over lambda, so R* is not cached.
pick p6-fix-skips-resend lookahead-in-split P6 "${CLASSIC[@]}"
# lookahead-in-split: in the sub-block regime a block end inside the window survives even the
# relaxed form of P5 (the trade-off the fix chooses): the budget could have finished.
pick p5-fix-window-subblock lookahead-in-split P5 "${CLASSIC[@]}" --window relaxed
# vllm-0.33, two requests (`chunkproof system`): head-of-line blocking behind a split zero. The
# 4-token request at the head of the waiting queue, offered 3 tokens, gets 0 from the split
# (B=4) and the waiting loop breaks, while the 3-token request behind it would take all 3.
pick_system system-hol-split-zero vllm-0.33 HOL --block 4 --lookahead 0 --drop off --prompt 3-4 --max-sched 8
# vllm-0.27, two requests, one with #40707's two images: the other request finishes, then the
# whole budget schedules nothing for ever (S-LIVE): the encoder cap leaves 2 tokens, the split 0.
pick_system system-slive-encoder-two-items vllm-0.27 S-LIVE --requests 2 --block 4 --lookahead 0 --drop off --prompt 16 --max-sched 6 --items 'none;1+4,6+4'
# vllm-0.33, two requests, theta=1 < L=2 with the adaptive floor on (0.31+): the first step,
# two eligible requests, offers each M // 2 = 4 tokens; #0 (T=3) finishes, the reservation
# trims #1 (T=5) to c=3, and alone there it livelocks (the single-request 0 < T mod B < L).
# Without the floor every instance of this range livelocks at theta=1 instead.
pick_system system-slive-adaptive-floor vllm-0.33 S-LIVE --block 4 --lookahead 2 --drop off --prompt 3-13 --max-sched 8 --threshold 1 --adaptive-threshold
# vllm-0.28, two requests with two adjacent images each, a cache that holds one request's two
# (C=8), theta=4 and L=1: each encodes its first image, then stops one token before its second,
# which has no room while both first images are held; 0.28-0.32 free an image only once c
# reaches its end + L, so neither moves again (S-LIVE). Alone the request is live; 0.33, which
# frees an image at its end, has no deadlock.
pick_system system-slive-shared-encoder-cache vllm-0.28 S-LIVE --block 1 --lookahead 1 --drop on --threshold 4 --prompt 12 --max-sched 8 --items 2+4,6+4 --encoder-cache 8

# vllm-0.28, two requests sharing the least KV block pool 0.28's start-up check accepts for
# max_model_len 10 (4 blocks, the null block among them): T=9 is refused its last chunk even
# alone, preempts itself at c=8 and resumes at hit 0 (its blocks evicted), for ever (S-POOL, a
# lasso; resumed at its hit 8 it is refused at every step, S-LIVE); 0.29 counts the null block
# on top of its least pool, which serves it.
pick_system system-s-pool-least-pool vllm-0.28 S-POOL --block 8 --lookahead 0 --drop off --prompt 3,9 --max-sched 8 --pool min
# The same instance with nothing evicted (SPEC KV2 rule 5e): preempted at c=8, T=9 resumes at its
# hit 8, where the release's own lookup finds it, and the pool refuses that admission at every
# step (S-LIVE, a stall after a preemption).
pick_system system-slive-resume-at-hit vllm-0.28 S-LIVE --block 8 --lookahead 0 --drop off --prompt 3,9 --max-sched 8 --pool min
# vllm-0.33, two requests sharing a pool of 11 KV blocks, found by `chunkproof system vllm-0.33`'s
# default pools: T=5 stops at c=3 inside its lookahead window (the single-request livelock,
# 0 < T mod B < L) and keeps its blocks; T=6's last chunk then asks more than are free, so it
# preempts itself and resumes at hit 0, to c=4, for ever (S-POOL, a lasso). Of the pools 2-32 only
# 11 does it: below, T=6 is not admitted beside T=5; above, its last chunk fits.
pick_system system-s-pool-stuck-holder vllm-0.33 S-POOL --block 4 --lookahead 2 --drop off --prompt 5,6 --max-sched 8 --pool 2-32
# vllm-0.34, a KV connector's hit in a shared pool (SPEC KV2 rules 2e and 5g): T=1 takes 2 of
# the 5 free blocks of a pool of 6; T=5, admitted at the connector's hit x=4, passes the
# admission test and its chunk's count (3 of 3 free), and the Mamba group takes one block more
# for the state loaded at x: the pool's get_new_blocks raises (P0, the engine core is down).
# A lone request never raises in 0.29-0.34's least pool; beside another it does.
pick_system system-p0-connector-hit-raises vllm-0.34 P0 --block 4 --lookahead 0 --drop off --start 0,external --prompt 1-8 --max-sched 4 --pool 2-12
