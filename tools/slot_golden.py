#!/usr/bin/env python3
"""Golden slot data from vLLM's real KV cache manager (Mamba "align" + full attention).

Regeneration tool for chunkproof's slot oracle (``chunkproof.spec.slots.oracle``).
It imports the KV cache manager from an unpacked vLLM source tree (``.py`` files
only) and contains no vLLM code: it builds a two-group ``KVCacheManager``
(full attention + Mamba "align"), drives requests through ``allocate_slots`` with
a given chunk-end sequence the way the scheduler does, and emulates the worker's
Mamba state writes (slot note W0, W6, W10) by tagging every physical block with
the state position it holds. After every step it records every live Mamba
prefix-cache entry (claim position -> physical block -> held state).

Usage:
    python harness.py VLLM_SRC [--cases 3000] [--seed 0] [--out golden.jsonl]
    python harness.py VLLM_SRC --replay golden.jsonl   # re-run and diff

Python deps: torch (CPU is enough), numpy, packaging, pydantic, msgspec.  Other
third-party packages that vLLM imports at module level but that play no part in
the KV cache manager are replaced by inert stub modules *only if they are not
installed* (see ``STUB_IF_MISSING``).

Worker model (per step [s, e), B = Mamba block, k = speculative blocks):
* pending copy-on-write copies queued by the manager run first (dst takes src's state);
* pre-copy: prev column = last step's running column, or (s - 1) // B for a request's
  first step; curr = ceil(e / B) - 1; if prev != -1 and prev != curr the block at
  curr takes the state of the block at prev;
* internal checkpoint: the worker re-derives it (``compute_mamba_prefill_checkpoints``
  rule: cp = ckpos(e, A), valid(s, e, cp, h, B, g)) and writes state@cp into
  column ceil(e / B) - 2 when that column is not the null block;
* the running block at curr ends holding state@e.
The worker's block table is append-only (first step: the manager's whole table;
later steps: the block ids returned by ``allocate_slots``), as in the real runner.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.abc
import importlib.machinery
import importlib.util
import json
import logging
import math
import os
import random
import sys
import types
from collections.abc import Iterator, Sequence
from typing import Any

# --------------------------------------------------------------------------------------
# Import plumbing: stub third-party packages vLLM imports at module level but the KV
# cache manager never uses. Only packages that are missing get stubbed.
# --------------------------------------------------------------------------------------

STUB_IF_MISSING = (
    "PIL",
    "aiohttp",
    "cachetools",
    "cbor2",
    "cloudpickle",
    "cpuinfo",
    "fastapi",
    "huggingface_hub",
    "llguidance",
    "openai",
    "openai_harmony",
    "partial_json_parser",
    "prometheus_client",
    "psutil",
    "pybase64",
    "regex",
    "requests",
    "safetensors",
    "transformers",
    "urllib3",
    "uvloop",
    "xgrammar",
    "zmq",
)
_STUBBED: set[str] = set()


class _StubMeta(type):
    def __getattr__(cls, name: str) -> type:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub_class(name)

    def __getitem__(cls, item: object) -> _StubMeta:
        return cls

    def __or__(cls, other: object) -> _StubMeta:
        return cls

    def __ror__(cls, other: object) -> _StubMeta:
        return cls

    def __iter__(cls) -> Iterator[Any]:
        return iter(())

    def __bool__(cls) -> bool:
        return False


class _StubBase(metaclass=_StubMeta):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: Any) -> Any:
        # pydantic_core is only imported at run time (when pydantic asks for a schema).
        core_schema: Any = importlib.import_module("pydantic_core.core_schema")

        return core_schema.any_schema()

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and callable(args[0]) and not kwargs:
            return args[0]  # used as a decorator
        return _stub_class("result")()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub_class(name)()

    def __getitem__(self, item: object) -> _StubBase:
        return self


def _stub_class(name: str) -> type:
    return _StubMeta(name, (_StubBase,), {})


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> type:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        return _stub_class(name)


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: types.ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname.split(".")[0] not in _STUBBED:
            return None
        return importlib.machinery.ModuleSpec(fullname, self, is_package=True)

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        module.__dict__["__version__"] = "0.0.0"
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


def load_vllm(src_root: str) -> types.SimpleNamespace:
    """Put ``src_root`` on sys.path, stub missing leaf packages, import what we drive."""
    for name in STUB_IF_MISSING:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):
            found = False
        if not found:
            _STUBBED.add(name)
    sys.meta_path.append(_StubFinder())
    sys.path.insert(0, os.path.abspath(src_root))
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    import warnings

    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)

    # vLLM (and torch) come from the source tree / the running environment, not from
    # anything mypy can see: import them dynamically and treat them as ``Any``.
    def _import(name: str) -> Any:
        return importlib.import_module(name)

    torch = _import("torch")
    SamplingParams = _import("vllm.sampling_params").SamplingParams
    get_hash_fn_by_name = _import("vllm.utils.hashing").get_hash_fn_by_name
    kv_cache_utils = _import("vllm.v1.core.kv_cache_utils")
    KVCacheManager = _import("vllm.v1.core.kv_cache_manager").KVCacheManager
    MambaManager = _import("vllm.v1.core.single_type_kv_cache_manager").MambaManager
    kv_cache_interface = _import("vllm.v1.kv_cache_interface")
    FullAttentionSpec = kv_cache_interface.FullAttentionSpec
    KVCacheConfig = kv_cache_interface.KVCacheConfig
    KVCacheGroupSpec = kv_cache_interface.KVCacheGroupSpec
    MambaSpec = kv_cache_interface.MambaSpec
    request_mod = _import("vllm.v1.request")
    Request, RequestStatus = request_mod.Request, request_mod.RequestStatus

    version: str
    try:
        version = _import("vllm._version").__version__
    except Exception:  # pragma: no cover
        version = "unknown"
    hash_fn = get_hash_fn_by_name("sha256")
    kv_cache_utils.init_none_hash(hash_fn)
    return types.SimpleNamespace(
        torch=torch,
        SamplingParams=SamplingParams,
        KVCacheManager=KVCacheManager,
        MambaManager=MambaManager,
        FullAttentionSpec=FullAttentionSpec,
        KVCacheConfig=KVCacheConfig,
        KVCacheGroupSpec=KVCacheGroupSpec,
        MambaSpec=MambaSpec,
        Request=Request,
        RequestStatus=RequestStatus,
        utils=kv_cache_utils,
        hash_fn=hash_fn,
        version=version,
        stubbed=sorted(_STUBBED),
    )


# --------------------------------------------------------------------------------------
# Small arithmetic (slot note section 1 notation), used by the worker emulation and
# by the case generator. Nothing here is taken from vLLM.
# --------------------------------------------------------------------------------------


def cdiv(x: int, m: int) -> int:
    return -(-x // m)


def ckpos(n: int, unit: int, drop: bool, lookahead: int) -> int:
    limit = n if drop else n - max(1, lookahead)
    p = limit // unit * unit
    if drop:
        p -= unit
    return max(p, 0)


def worker_valid(s: int, e: int, p: int, h: int, b: int, g: int | None) -> bool:
    if g is None:
        return False
    return (
        s % h == 0
        and cdiv(e, b) - 2 > (s - 1) // b
        and s + h <= p
        and s < p < e
        and (p - s) % g == 0
    )


# --------------------------------------------------------------------------------------
# The driver
# --------------------------------------------------------------------------------------

MAMBA_GID = 1
ATTN_GID = 0
NUM_BLOCKS = 4096


class Run:
    """One case: a manager, a block-tag table (the worker model) and the records."""

    def __init__(self, v: types.SimpleNamespace, cfg: dict[str, Any]):
        self.v = v
        self.cfg = cfg
        b, h, b_attn = cfg["block"], cfg["hash_block"], cfg["attn_block"]
        self.block = b
        self.hash_block = h
        eagle = cfg["drop"]
        lookahead = cfg["hash_lookahead"]
        # The scheduler clears the EAGLE drop when hash lookahead is on.
        self.use_eagle = eagle and lookahead == 0
        g = cfg["checkpoint_alignment"]
        torch = v.torch
        attn_spec = v.FullAttentionSpec(
            block_size=b_attn, num_kv_heads=1, head_size=8, dtype=torch.float16
        )
        mamba_spec = v.MambaSpec(
            block_size=b,
            shapes=((8,),),
            dtypes=(torch.float16,),
            mamba_cache_mode="align",
            num_speculative_blocks=cfg["spec_blocks"],
            num_prefill_checkpoint_blocks=1 if g is not None else 0,
            prefill_checkpoint_alignment=g,
        )
        # eagle_groups: "all" = no group flagged (the coordinator then flags every
        # group); "attn" = only the attention group is flagged (a draft group's role).
        flag_attn = eagle and cfg["eagle_groups"] == "attn"
        groups = [
            v.KVCacheGroupSpec(["attn"], attn_spec, is_eagle_group=flag_attn),
            v.KVCacheGroupSpec(["mamba"], mamba_spec),
        ]
        kv_cfg = v.KVCacheConfig(
            num_blocks=NUM_BLOCKS,
            kv_cache_tensors=[],
            kv_cache_groups=groups,
            prefix_cache_retention_interval=cfg["retention"],
        )
        self.manager = v.KVCacheManager(
            kv_cache_config=kv_cfg,
            max_model_len=1 << 16,
            scheduler_block_size=cfg["sched_block"],
            hash_block_size=h,
            enable_caching=True,
            use_eagle=self.use_eagle,
            num_hash_lookahead_tokens=lookahead,
            enable_mamba_shared_prefix_checkpoint=cfg["junction_feature"],
        )
        self.hasher = v.utils.get_request_block_hasher(h, v.hash_fn, lookahead)
        coord = self.manager.coordinator
        self.mamba = coord.single_type_managers[MAMBA_GID]
        assert isinstance(self.mamba, v.MambaManager)
        self.hit_unit = self.mamba.cache_hit_alignment_tokens
        self.null_id = self.manager.block_pool.null_block.block_id
        self.tag: dict[int, int | None] = {}  # physical block id -> state position
        self.hash_pos: dict[bytes, int] = {}  # raw block hash -> token position
        self.worker_table: dict[str, list[int]] = {}
        self.worker_state_idx: dict[str, int] = {}
        self.anomalies: list[str] = []
        self.stale_writes: list[list[Any]] = []
        self.shared_prefix_feature = self.manager.mamba_shared_prefix_checkpoint
        # No pool pressure: every block handed out must be one never used before.
        pool = self.manager.block_pool
        real_get_new_blocks = pool.get_new_blocks
        self.num_allocated = 0

        def counting_get_new_blocks(num_blocks: int) -> Any:
            self.num_allocated += num_blocks
            if self.num_allocated >= NUM_BLOCKS - 1:
                raise RuntimeError("pool too small: a cached block could be reused")
            return real_get_new_blocks(num_blocks)

        pool.get_new_blocks = counting_get_new_blocks

    # -- helpers --------------------------------------------------------------------
    def make_request(self, rid: str, prompt: list[int], outputs: Sequence[int] = ()) -> Any:
        req = self.v.Request(
            request_id=rid,
            prompt_token_ids=list(prompt),
            sampling_params=self.v.SamplingParams(max_tokens=1 << 12),
            pooling_params=None,
            block_hasher=self.hasher,
        )
        if outputs:
            req.append_output_token_ids(list(outputs))
        self._learn_hashes(req)
        return req

    def _learn_hashes(self, req: Any) -> None:
        for i, bh in enumerate(req.block_hashes):
            pos = (i + 1) * self.hash_block
            old = self.hash_pos.setdefault(bytes(bh), pos)
            assert old == pos

    def live_entries(self) -> dict[tuple[bytes, int], int]:
        """Every live Mamba prefix-cache entry: (hash, block id) -> claimed position."""
        utils = self.v.utils
        out: dict[tuple[bytes, int], int] = {}
        cache = self.manager.block_pool.cached_block_hash_to_block._cache
        for key, val in cache.items():
            if utils.get_group_id(key) != MAMBA_GID:
                continue
            raw = bytes(utils.get_block_hash(key))
            blocks = [val] if isinstance(val, utils.KVCacheBlock) else list(val.values())
            for blk in blocks:
                out[(raw, blk.block_id)] = self.hash_pos[raw]
        return out

    def resend_hit(self, prompt: list[int]) -> int:
        req = self.make_request(f"resend-{len(self.hash_pos)}", prompt)
        hit: int
        _, hit, _ = self.manager.get_computed_blocks(req)
        return hit

    # -- one request through a chunk-end sequence ------------------------------------
    def drive(
        self,
        req: Any,
        ends: list[int],
        *,
        lookup: bool,
        junction: int | None = None,
        expect_start: int | None = None,
        record: bool = True,
    ) -> dict[str, Any]:
        """Run ``req`` through ``ends``; returns the start, junction and records."""
        m = self.manager
        m.new_step_starts()
        blocks, hit, lookup_junction = None, 0, 0
        if lookup:
            blocks, hit, lookup_junction = m.get_computed_blocks(req)
            req.shared_prefix_boundary = lookup_junction
        if junction is not None:  # admission-time junction set directly
            req.shared_prefix_boundary = junction
        start = req.num_computed_tokens + hit
        if expect_start is not None and expect_start != start:
            raise RuntimeError(f"prefix hit {start} != expected start {expect_start}")
        if not ends or ends[0] <= start:
            return {"start": start, "lookup_junction": lookup_junction, "skipped": True}
        before = self.live_entries()
        baseline = set(before)
        prev_live = dict(before)
        trace, poisonings, later, checkpoints = [], [], [], []
        registered_at: dict[tuple[bytes, int], int] = {}
        s = start
        for step, e in enumerate(ends):
            if step > 0:
                m.new_step_starts()
            first = step == 0
            new_blocks = m.allocate_slots(
                req,
                e - s,
                num_new_computed_tokens=hit if first else 0,
                new_computed_blocks=blocks if first else None,
            )
            if new_blocks is None:
                raise RuntimeError(f"allocate_slots returned None at step {step}")
            checkpoint = self.mamba._checkpoints.get(req.request_id)
            if checkpoint is not None:
                checkpoints.append([step, checkpoint[0], checkpoint[1]])
            req.num_computed_tokens = e
            req.status = self.v.RequestStatus.RUNNING
            self._worker_step(req, s, e, first, new_blocks, checkpoint)
            live = self.live_entries()
            for pair, claim in live.items():
                held = self.tag.get(pair[1])
                if pair not in prev_live:
                    registered_at[pair] = step
                    if held != claim and pair not in baseline:
                        poisonings.append([claim, held, step])
                elif held != claim and self._prev_tag.get(pair[1]) != held:
                    later.append([claim, held, step])
            if record:
                trace.append(
                    {
                        "end": e,
                        "live": sorted(
                            [c, self.tag.get(p[1]), p[1], int(p in baseline)]
                            for p, c in live.items()
                        ),
                    }
                )
            prev_live = live
            s = e
        final = self.live_entries()
        mine = sorted(
            [c, self.tag.get(p[1]), p[1], registered_at.get(p, -1)]
            for p, c in final.items()
            if p not in baseline
        )
        inherited = sorted([c, self.tag.get(p[1]), p[1]] for p, c in final.items() if p in baseline)
        chain = {bytes(bh) for bh in req.block_hashes}
        inherited_on_chain = sorted(
            [c, self.tag.get(p[1])] for p, c in final.items() if p in baseline and p[0] in chain
        )
        return {
            "start": start,
            "lookup_junction": lookup_junction,
            "junction_used": req.shared_prefix_boundary,
            "live": mine,
            "inherited_live": inherited,
            "inherited_on_chain": inherited_on_chain,
            "poisonings": poisonings,
            "corrupted_later": later,
            "checkpoints": checkpoints,
            "trace": trace,
        }

    def _worker_step(
        self,
        req: Any,
        s: int,
        e: int,
        first: bool,
        new_blocks: Any,
        checkpoint: tuple[int, int] | None,
    ) -> None:
        """Emulate the worker for chunk [s, e) (see the module docstring)."""
        b = self.block
        rid = req.request_id
        self._prev_tag = dict(self.tag)
        # The worker's append-only block table.
        if first:
            table = list(self.manager.get_block_ids(rid)[MAMBA_GID])
            self.worker_table[rid] = table
            prev = (s - 1) // b
        else:
            table = self.worker_table[rid]
            ids = new_blocks.get_block_ids(allow_none=True)
            if ids is not None:
                table.extend(ids[MAMBA_GID])
            prev = self.worker_state_idx[rid]
        mgr_table = [blk.block_id for blk in self.mamba.req_to_blocks[rid]]
        # 1. queued copy-on-write copies run before the forward.
        copies, _ = self.manager.take_kv_cache_block_copies()
        for c in copies:
            self.tag[c.dst_block_id] = self.tag.get(c.src_block_id)
        # 2. pre-copy of the previous running state into the current running column.
        curr = cdiv(e, b) - 1
        if prev != -1 and prev != curr:
            src = table[prev]
            if src == self.null_id:
                self.anomalies.append(f"[{s},{e}) pre-copy source column {prev} is null")
            self.tag[table[curr]] = self.tag.get(src)
        # 3. internal prefill checkpoint, re-derived worker-side.
        drop = self.use_eagle
        g = self.cfg["checkpoint_alignment"]
        cp = ckpos(e, self.hit_unit, drop, self.cfg["hash_lookahead"])
        if worker_valid(s, e, cp, self.hash_block, b, g):
            col = cdiv(e, b) - 2
            bid = table[col]
            if checkpoint != (cp, col) and bid != self.null_id:
                # The manager reserved nothing here (its column is null), but the worker's
                # append-only table still holds a block in that column.
                k = self.cfg["spec_blocks"]
                role = (
                    "running"
                    if bid == table[curr]
                    else "speculative"
                    if bid in table[curr + 1 : curr + 1 + k]
                    else "other"
                )
                self.anomalies.append(
                    f"[{s},{e}) worker checkpoint {cp}@col{col} (block {bid}) but manager "
                    f"reserved {checkpoint}"
                )
                self.stale_writes.append([s, e, cp, col, bid, role])
            if bid != self.null_id:
                self.tag[bid] = cp
        elif checkpoint is not None:
            self.anomalies.append(f"[{s},{e}) manager reserved {checkpoint}, worker writes none")
        # 4. the forward leaves state@e in the running block.
        if table[curr] == self.null_id:
            self.anomalies.append(f"[{s},{e}) running column {curr} is null")
        self.tag[table[curr]] = e
        self.worker_state_idx[rid] = curr
        for col in (curr, cdiv(e, b) - 2):
            if (
                0 <= col < len(mgr_table)
                and col < len(table)
                and mgr_table[col] not in (table[col], self.null_id)
            ):
                self.anomalies.append(
                    f"[{s},{e}) worker column {col} = {table[col]} but manager has {mgr_table[col]}"
                )

    def free(self, req: Any) -> None:
        self.manager.free(req)
        self.worker_table.pop(req.request_id, None)
        self.worker_state_idx.pop(req.request_id, None)


# --------------------------------------------------------------------------------------
# Running one case description
# --------------------------------------------------------------------------------------


def run_case(v: types.SimpleNamespace, case: dict[str, Any]) -> dict[str, Any]:
    """Run one case description (the ``inputs`` object of a golden line)."""
    run = Run(v, case)
    n, total = case["prompt"], case["tokens"]
    prompt = list(range(1, n + 1))
    outputs = list(range(500_000, 500_000 + total - n))
    prod = case.get("producer")
    producer_out = None
    if prod is not None:
        shared = prod["shared"]
        p_prompt = prompt[:shared] + list(range(1_000_000, 1_000_000 + prod["prompt"] - shared))
        preq = run.make_request("producer", p_prompt)
        producer_out = run.drive(preq, prod["ends"], lookup=False, record=False)
        producer_out = {
            "live": producer_out["live"],
            "poisonings": producer_out["poisonings"],
        }
        run.free(preq)
    req = run.make_request("req", prompt, outputs)
    if case["scenario"] == "resumed":
        req.status = v.RequestStatus.PREEMPTED
        req.num_preemptions = 1
    direct_j = case["junction"] if case["junction_source"] == "direct" else None
    out = run.drive(
        req,
        case["ends"],
        lookup=True,
        junction=direct_j,
        expect_start=case.get("start"),
    )
    out["resend_hit"] = run.resend_hit(prompt)
    out["anomalies"] = run.anomalies
    out["stale_checkpoint_writes"] = run.stale_writes
    out["producer"] = producer_out
    out["shared_prefix_feature_effective"] = run.shared_prefix_feature
    out["hit_unit"] = run.hit_unit
    out["num_block_hashes"] = len(req.block_hashes)
    return out


# --------------------------------------------------------------------------------------
# Case generation
# --------------------------------------------------------------------------------------


def random_ends(
    rng: random.Random, start: int, stop: int, b: int, h: int, extra: list[int]
) -> list[int]:
    """An increasing chunk-end sequence from ``start`` (exclusive) to ``stop``."""
    if stop <= start:
        return []
    span = stop - start
    pool = set()
    style = rng.random()
    kmax = rng.choice([0, 1, 2, 3, 4, 6])
    for _ in range(kmax):
        r = rng.random()
        if r < 0.35:  # block grid
            x = rng.randint(start // b + 1, max(start // b + 1, stop // b)) * b
        elif r < 0.55 and h < b:  # hash grid
            x = rng.randint(start // h + 1, max(start // h + 1, stop // h)) * h
        elif r < 0.7 and extra:
            x = rng.choice(extra)
        else:
            x = rng.randint(start + 1, stop)
        pool.add(x)
    if style < 0.15 and start % b:  # cross the block end from a mid-block start
        pool.add(min(stop, cdiv(start, b) * b + rng.randint(1, b)))
    ends = sorted(x for x in pool if start < x < stop)
    return [*ends, stop] if span else ends


def gen_case(rng: random.Random, idx: int) -> dict[str, Any]:
    b = rng.choice([16, 32, 48, 64])
    divisors = [d for d in (4, 8, 16, 24, 32, 48, 64) if b % d == 0 and d <= b]
    h = rng.choice([b, b, *divisors])
    attn_choices = [b, b, b, h] + ([2 * b] if rng.random() < 0.4 else [])
    b_attn = rng.choice(attn_choices)
    if b_attn % h:
        b_attn = b
    want_feature = rng.random() < 0.3
    if want_feature and h == b and rng.random() < 0.8:
        h = rng.choice([d for d in divisors if d < b])
        b_attn = b
    sched = math.lcm(b, b_attn)
    drop = rng.random() < (0.8 if want_feature else 0.4)
    lookahead = rng.choice([0, 0, 0, 1, 3])
    g = rng.choice([None, None, 1, 8, h])
    retention = rng.choice([None, 0, sched, 2 * sched])
    spec_blocks = rng.choice([0, 0, 1, 2])
    scenario = rng.choices(["fresh", "consumer", "resumed"], [0.5, 0.38, 0.12])[0]
    n = rng.randint(1, 7 * b + b // 2)
    if rng.random() < 0.2:
        n = rng.randint(1, 7) * b  # exact block multiple
    total = n
    if scenario == "resumed":
        total = n + rng.randint(1, 2 * b)
    fine = h < b
    eff_drop = drop and lookahead == 0
    case: dict[str, Any] = {
        "id": idx,
        "scenario": scenario,
        "prompt": n,
        "tokens": total,
        "block": b,
        "hash_block": h,
        "sched_block": sched,
        "attn_block": b_attn,
        "drop": drop,
        "eagle_groups": rng.choice(["all", "attn"]) if drop else "none",
        "hash_lookahead": lookahead,
        "checkpoint_alignment": g,
        "retention": retention,
        "spec_blocks": spec_blocks,
        "junction": 0,
        "junction_feature": False,
        "junction_source": "none",
        "producer": None,
    }
    # A junction as get_computed_blocks reports it: a multiple of the hit alignment A,
    # below N and within the request's hashed tokens.
    unit = h if fine else sched
    j_max = min(n - 1, (n - lookahead) // h * h)
    if scenario == "fresh" and rng.random() < 0.25 and j_max >= unit:
        case["junction"] = rng.randint(1, j_max // unit) * unit
        case["junction_source"] = "direct"
        case["junction_feature"] = want_feature or rng.random() < 0.3
    if scenario in ("consumer", "resumed"):
        if scenario == "resumed":
            shared, p_prompt = n, n  # the same request's earlier run on its prompt
        elif fine and n > h + 1 and rng.random() < 0.5:
            # the producer's prompt is a prefix of this one: its partial tail T_p
            # (usually mid-block) becomes this request's hit
            shared = p_prompt = rng.randint(h + 1, n - 1)
        else:
            shared = rng.randint(1, n)
            p_prompt = shared + rng.choice([0, 0, rng.randint(1, 2 * b)])
        p_fine_tail = ckpos(p_prompt, h, eff_drop, lookahead) if fine else 0
        p_extra = [x for x in (p_fine_tail, ckpos(p_prompt, b, eff_drop, lookahead)) if x > 0]
        p_ends = random_ends(rng, 0, p_prompt, b, h, p_extra)
        if p_fine_tail and p_fine_tail not in p_ends and rng.random() < 0.6:
            p_ends = sorted(set(p_ends) | {p_fine_tail})
        case["producer"] = {"prompt": p_prompt, "shared": shared, "ends": p_ends}
        case["junction_source"] = "lookup"
        case["junction_feature"] = want_feature or rng.random() < 0.3
    return case


def materialise(
    v: types.SimpleNamespace, case: dict[str, Any], rng: random.Random
) -> dict[str, Any] | None:
    """Find the real start (prefix hit) and draw the consumer's chunk ends from it."""
    probe = dict(case)
    probe["ends"] = []
    probe["start"] = None
    run = Run(v, probe)
    n, total = case["prompt"], case["tokens"]
    prompt = list(range(1, n + 1))
    outputs = list(range(500_000, 500_000 + total - n))
    start, junction = 0, case["junction"]
    if case["producer"] is not None:
        prod = case["producer"]
        p_prompt = prompt[: prod["shared"]] + list(
            range(1_000_000, 1_000_000 + prod["prompt"] - prod["shared"])
        )
        preq = run.make_request("producer", p_prompt)
        run.drive(preq, prod["ends"], lookup=False, record=False)
        run.free(preq)
        req = run.make_request("req", prompt, outputs)
        if case["scenario"] == "resumed":
            req.status = v.RequestStatus.PREEMPTED
        _, start, junction = run.manager.get_computed_blocks(req)
    if start >= total:
        return None
    b, h = case["block"], case["hash_block"]
    eff_drop = case["drop"] and case["hash_lookahead"] == 0
    extra = [
        x
        for x in (
            ckpos(n, h, eff_drop, case["hash_lookahead"]),
            ckpos(n, b, eff_drop, case["hash_lookahead"]),
            junction,
        )
        if x > start
    ]
    case = dict(case)
    case["start"] = start
    if case["junction_source"] == "lookup":
        case["junction"] = junction
    case["ends"] = random_ends(rng, start, total, b, h, extra)
    return case


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("vllm_src", help="root of an unpacked vLLM source tree (holds vllm/)")
    ap.add_argument("--cases", type=int, default=3000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="golden.jsonl")
    ap.add_argument("--replay", help="re-run the inputs of a golden file and diff outputs")
    args = ap.parse_args()
    v = load_vllm(args.vllm_src)
    print(
        f"vLLM {v.version} from {args.vllm_src}; stubbed: {', '.join(v.stubbed) or '-'}",
        file=sys.stderr,
    )
    if args.replay:
        bad = 0
        with open(args.replay) as f:
            for line in f:
                rec = json.loads(line)
                out = run_case(v, rec["inputs"])
                keys = ("live", "poisonings", "resend_hit", "start")
                if any(out[k] != rec["outputs"][k] for k in keys):
                    bad += 1
                    print("DIFF", rec["inputs"]["id"], file=sys.stderr)
        print(f"replay: {bad} differing cases", file=sys.stderr)
        sys.exit(1 if bad else 0)
    rng = random.Random(args.seed)
    written = errors = 0
    with open(args.out, "w") as f:
        idx = 0
        while written < args.cases:
            idx += 1
            case = gen_case(rng, idx)
            try:
                materialised = materialise(v, case, rng)
                if materialised is None or not materialised["ends"]:
                    continue
                case = materialised
                out = run_case(v, case)
            except Exception as exc:  # record, keep going
                errors += 1
                f.write(json.dumps({"inputs": case, "error": repr(exc)}) + "\n")
                continue
            f.write(json.dumps({"vllm": v.version, "inputs": case, "outputs": out}) + "\n")
            written += 1
    print(f"wrote {written} cases ({errors} errors) to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
