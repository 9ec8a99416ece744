"""Fidelity of the cache side (SPEC KV1): where an identical resend lands (R*), which Mamba
states the retention mask keeps and where the prompt's tail is copied, against each release's
own code.

For every cached release from 0.15.0, the release's ``kv_cache_utils.py``,
``single_type_kv_cache_manager.py``, ``kv_cache_coordinator.py`` and ``kv_cache_manager.py``
(with ``math_utils.py`` and ``kv_cache_interface.py``) are compiled by CPython (release code is
trusted in tests, as in tests/test_encoder_fidelity.py): each file top-level statement by
top-level statement, annotations stripped and decorators other than ``classmethod``,
``staticmethod`` and ``property`` dropped, its imports bound to the standard library, to what
the files before it define, to the small spec classes below (:class:`Spec` and its subclasses,
by name), ``BlockPool`` to :class:`Pool` (which holds the positions each group has cached) and
``KVCacheSpecRegistry`` to :class:`Registry`; any other vLLM name is :class:`Missing`, which
fails loudly on any use. A statement that cannot run that way is skipped, and what the lookup
needs of it then fails by name. The coordinator is built by the release's own
``get_kv_cache_coordinator`` (a full-attention group of block G, EAGLE-flagged with an EAGLE
method, and a Mamba "align" group of block B) and queried through the release's
``KVCacheManager.get_computed_blocks``, so the cap on the hit, the EAGLE drop and the
reconciliation of the groups are the release's. Retention and the tail copy run through the
coordinator's ``cache_blocks`` on a request whose prompt is held in real-looking blocks; what
the pool is asked to key is recorded.

On seeded random geometries each release's hit, mask and tail keys are compared with the
model's rules for it (:func:`chunkproof.spec.slots.kv_rules`).
"""

from __future__ import annotations

import ast
import importlib
import inspect
import math
import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Any

import pytest

from chunkproof.model.arith import cdiv
from chunkproof.model.builtin import policy_for_release
from chunkproof.model.config import Config
from chunkproof.model.errors import ConfigError
from chunkproof.source.extraction import stripped, top_imports
from chunkproof.source.releases import release_root
from chunkproof.spec.slots import cacheable, eagle_drop, kv_rules, oracle

pytestmark = pytest.mark.fidelity

FILES = (
    "vllm/utils/math_utils.py",
    "vllm/v1/kv_cache_interface.py",
    "vllm/v1/core/kv_cache_utils.py",
    "vllm/v1/core/single_type_kv_cache_manager.py",
    "vllm/v1/core/kv_cache_coordinator.py",
    "vllm/v1/core/kv_cache_manager.py",
)
HASH_DIGITS = 10
"""A block hash here is the end position of the tokens it covers, as ``HASH_DIGITS`` ASCII
digits: chained hashes name their prefix, and a hash merged from several (0.15's block-size
view) ends with its last one's."""


class MissingError(AssertionError):
    """The release code used a vLLM name or attribute this harness does not provide."""


class Missing:
    """A vLLM name not provided: any use fails naming it."""

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_name", name)

    def _fail(self, *args: object, **kwargs: object) -> Any:
        raise MissingError(f"the release code uses {self._name}, which the harness lacks")

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        if attribute in {"debug", "info", "warning", "warning_once", "info_once", "debug_once"}:
            return lambda *args, **kwargs: None  # logger calls
        return self._fail()

    __call__ = _fail
    __getitem__ = _fail
    __iter__ = _fail
    __bool__ = _fail


class Loud:
    """A mutable object that fails naming any attribute read before it is set."""

    _label = "object"

    def __getattr__(self, attribute: str) -> Any:
        if attribute.startswith("__"):
            raise AttributeError(attribute)
        raise MissingError(f"the release code reads {self._label}.{attribute}, not provided")


# -- the KV cache specs ---------------------------------------------------------------------


class Spec(Loud):
    """A KV cache spec: equal when of one class with equal fields (vLLM's are frozen
    dataclasses)."""

    _label = "kv_cache_spec"

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple(sorted(self.__dict__.items()))))


class KVCacheSpec(Spec):
    pass


class AttentionSpec(KVCacheSpec):
    pass


class FullAttentionSpec(AttentionSpec):
    pass


class MambaSpec(KVCacheSpec):
    pass


def spec_classes() -> dict[str, type]:
    """Every spec class name the files import, as a class: the four above, and the other
    attention kinds as distinct subclasses no test instantiates."""
    known: dict[str, type] = {
        c.__name__: c for c in (KVCacheSpec, AttentionSpec, FullAttentionSpec, MambaSpec)
    }
    others = (
        "SlidingWindowSpec",
        "ChunkedLocalAttentionSpec",
        "CrossAttentionSpec",
        "MLAAttentionSpec",
        "SinkFullAttentionSpec",
        "SlidingWindowMLASpec",
        "RSWASpec",
        "CircularBufferSpec",
        "HiddenStateCacheSpec",
        "HiSparseHotSpec",
        "HiSparseResidentSpec",
        "UniformTypeKVCacheSpecs",
        "EncoderOnlyAttentionSpec",
    )
    for name in others:
        base = FullAttentionSpec if name in {"MLAAttentionSpec"} else AttentionSpec
        known[name] = type(name, (base,), {})
    return known


# -- the block pool -------------------------------------------------------------------------


def block_hash(end: int) -> bytes:
    """The hash of the hash block ending at token ``end`` (:data:`HASH_DIGITS`)."""
    return str(end).zfill(HASH_DIGITS).encode()


def hash_end(key: Any) -> int:
    """The end position a (possibly merged) block hash names."""
    raw = key if isinstance(key, bytes) else bytes(key)
    return int(raw[-HASH_DIGITS:])


class Block:
    """A cached block (the lookup only collects them)."""

    is_null = False

    def __init__(self, group: int, end: int) -> None:
        self.group = group
        self.end = end
        self.block_hash: bytes | None = None
        self.block_hash_num_tokens: int | None = None


class Pool:
    """``BlockPool``: group ``g`` has a cached entry keyed at the positions ``cached[g]``
    (claims; which state the block holds does not matter to the lookup)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.hash_block_size = kwargs.get("hash_block_size", args[2] if len(args) > 2 else 0)
        self.num_hash_lookahead_tokens = kwargs.get("num_hash_lookahead_tokens", 0)
        self.cached: dict[int, set[int]] = {}
        self.masked: dict[int, set[int]] = {}
        self.tails: dict[int, set[int]] = {}
        self.null_block = Block(-1, -1)
        self.null_block.is_null = True

    def cache_full_blocks(self, **call: Any) -> None:
        """Record which of the blocks ``num_cached_blocks`` to ``num_full_blocks`` of a group
        the release's retention mask keys (``block_mask``; ``None``: every one), by the
        block-grid claim each would get."""
        first, last = call["num_cached_blocks"], call["num_full_blocks"]
        mask = call.get("block_mask") or [True] * (last - first)
        size = call["block_size"]
        for index, keep in zip(range(first, last), mask, strict=True):
            if keep:
                self.masked.setdefault(call["kv_cache_group_id"], set()).add((index + 1) * size)

    def cache_partial_block(self, **call: Any) -> bytes:
        """Record a partial (tail) key: the group's claim at ``num_tokens``."""
        self.tails.setdefault(call["kv_cache_group_id"], set()).add(call["num_tokens"])
        call["block"].block_hash_num_tokens = call["num_tokens"]
        return block_hash(call["num_tokens"])

    def get_cached_block(self, key: Any, group_ids: Sequence[int]) -> list[Block] | None:
        end = hash_end(key)
        if all(end in self.cached.get(g, ()) for g in group_ids):
            return [Block(g, end) for g in group_ids]
        return None


# -- compiling the files ------------------------------------------------------------------------


def _keep_decorators(node: ast.ClassDef | ast.FunctionDef) -> ast.stmt:
    """``node`` with annotations stripped and only the member decorators kept."""
    if isinstance(node, ast.FunctionDef):
        function: ast.stmt = stripped(node, member=False)
        return function
    body: list[ast.stmt] = []
    for member in node.body:
        if isinstance(member, ast.FunctionDef):
            body.append(stripped(member, member=True))
        elif isinstance(member, ast.ClassDef):
            body.append(_keep_decorators(member))
        elif isinstance(member, ast.AnnAssign):
            annotation = ast.Name("object", ast.Load())  # a NamedTuple's fields stay fields
            body.append(
                ast.copy_location(ast.AnnAssign(member.target, annotation, member.value, 1), member)
            )
        else:
            body.append(member)
    copied = ast.ClassDef(
        name=node.name,
        bases=node.bases,
        keywords=[k for k in node.keywords if k.arg != "metaclass"],
        body=body or [ast.Pass()],
        decorator_list=[],
    )
    return ast.copy_location(copied, node)


def _statements(tree: ast.Module) -> list[ast.stmt]:
    """The top-level statements to run: definitions and assignments, no imports."""
    kept: list[ast.stmt] = []
    for node in tree.body:
        if isinstance(node, ast.FunctionDef | ast.ClassDef):
            kept.append(_keep_decorators(node))
        elif isinstance(node, ast.Assign):
            kept.append(node)
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            kept.append(ast.copy_location(ast.Assign([node.target], node.value), node))
    return kept


def _bind_imports(tree: ast.Module, provided: dict[str, Any], namespace: dict[str, Any]) -> None:
    """Bind the module's imported names (module docstring)."""
    for local, (module, name, _) in top_imports(tree).items():
        if module.partition(".")[0] in sys.stdlib_module_names and module != "vllm":
            imported = importlib.import_module(module)
            namespace[local] = imported if name is None else getattr(imported, name)
        elif name is not None and name in provided:
            namespace[local] = provided[name]
        else:
            namespace[local] = Missing(f"{module}.{name or local}")


@dataclass
class Release:
    """One release's compiled cache code: the namespaces of its files by file name."""

    version: str
    files: dict[str, dict[str, Any]]
    skipped: dict[str, list[str]]

    def __getitem__(self, name: str) -> Any:
        for namespace in self.files.values():
            if name in namespace and not isinstance(namespace[name], Missing):
                return namespace[name]
        raise KeyError(name)


@cache
def compiled_release(version: str) -> Release:
    """The files of ``version`` compiled (module docstring); each file's definitions are
    provided to the files after it."""
    root = release_root(version)
    provided: dict[str, Any] = {
        **spec_classes(),
        "BlockPool": Pool,
        "KVCacheSpecRegistry": Registry(version),
        "init_logger": lambda *args: Missing("logger"),
    }
    files: dict[str, dict[str, Any]] = {}
    skipped: dict[str, list[str]] = {}
    for rel in FILES:
        path = root / rel
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        namespace: dict[str, Any] = {"__name__": rel.replace("/", ".")[:-3]}
        _bind_imports(tree, provided, namespace)
        for name, value in spec_classes().items():
            if name in namespace:
                namespace[name] = value
        for node in _statements(tree):
            module = ast.fix_missing_locations(ast.Module([node], []))
            try:
                exec(compile(module, str(path), "exec"), namespace)
            except Exception as exc:  # a statement the harness cannot run (module docstring)
                skipped.setdefault(rel, []).append(f"{node.lineno}: {type(exc).__name__}")
        files[rel] = namespace
        for name, value in namespace.items():
            if not name.startswith("__") and not isinstance(value, Missing):
                provided.setdefault(name, value)
    return Release(version, files, skipped)


def call(function: Any, **offered: Any) -> Any:
    """``function`` called with those of ``offered`` its signature names."""
    names = inspect.signature(function).parameters
    return function(**{k: v for k, v in offered.items() if k in names})


class Registry:
    """``KVCacheSpecRegistry``: full attention to ``FullAttentionManager``, Mamba to
    ``MambaManager`` (the built-in registration), from the release being compiled."""

    def __init__(self, version: str) -> None:
        self.version = version

    def get_manager_class(self, spec: Any, role: Any = None) -> Any:
        release = compiled_release(self.version)
        if isinstance(spec, MambaSpec):
            return release["MambaManager"]
        if isinstance(spec, FullAttentionSpec):
            return release["FullAttentionManager"]
        return None


# -- the release's cache, set up for one request ----------------------------------------------


class Stub(Loud):
    """A vLLM object (a group, the cache config, the request) with exactly the attributes it is
    given; reading another fails naming it."""

    def __init__(self, label: str, **attributes: Any) -> None:
        self._label = label
        self.__dict__.update(attributes)


RELEASES = (
    "0.15.0",
    "0.17.0",
    "0.23.0",
    "0.24.0",
    "0.25.0",
    "0.26.0",
    "0.27.0",
    "0.28.0",
    "0.29.0",
    "0.30.0",
    "0.31.0",
    "0.32.0",
    "0.33.0",
)
SEED = 20_261_205
CASES = 300


def minor_of(version: str) -> int:
    return int(version.split(".")[1])


def coordinator(version: str, cfg: Config) -> Any:
    """The release's coordinator for ``cfg`` (module docstring): attention block G (the split
    block), Mamba block B, hash block h, scheduler block S, ``use_eagle`` the effective drop
    (0.33 clears it under hash lookahead), the attention group (the draft layers')
    EAGLE-flagged when the model's drop D is configured (an EAGLE-family method; L >= 1 alone
    is any speculative method), fine-grained hits allowed exactly when the model has them."""
    release = compiled_release(version)
    retention = None if cfg.retention < 0 else cfg.retention
    release.files["vllm/v1/core/kv_cache_coordinator.py"]["envs"] = Stub(
        "envs", VLLM_PREFIX_CACHE_RETENTION_INTERVAL=retention
    )
    attention = FullAttentionSpec(
        block_size=cfg.split_block, prefix_cacheable=True, dcp_sharded=True
    )
    mamba = MambaSpec(
        block_size=cfg.block,
        mamba_cache_mode="align",
        num_speculative_blocks=0,
        prefix_cacheable=True,
        dcp_sharded=False,
        num_prefill_checkpoint_blocks=0,
    )
    groups = [
        Stub("group", kv_cache_spec=attention, is_eagle_group=cfg.drop, role=None),
        Stub("group", kv_cache_spec=mamba, is_eagle_group=False, role=None),
    ]
    config = Stub(
        "kv_cache_config",
        kv_cache_groups=groups,
        num_blocks=1 << 20,
        prefix_cache_retention_interval=retention,
        needs_kv_cache_zeroing=False,
        has_mamba_layers=True,
    )
    return call(
        release["get_kv_cache_coordinator"],
        kv_cache_config=config,
        max_model_len=1 << 20,
        max_in_flight_tokens=1 << 16,
        max_num_batched_tokens=1 << 16,
        use_eagle=eagle_drop(cfg),
        enable_caching=True,
        enable_kv_cache_events=False,
        dcp_world_size=1,
        pcp_world_size=1,
        scheduler_block_size=cfg.sched_block,
        hash_block_size=cfg.hash_block,
        metrics_collector=None,
        num_hash_lookahead_tokens=cfg.hash_lookahead,
        num_prefill_lookahead=cfg.lookahead,
        allow_partial_hash_hits=cfg.partial_hits,
    )


def resend_request(cfg: Config) -> Stub:
    """An identical resend of ``cfg``'s prompt: its block hashes are those of every hash block
    whose L_h following tokens exist."""
    hashed = range(cfg.hash_block, cfg.prompt - cfg.hash_lookahead + 1, cfg.hash_block)
    return Stub(
        "request",
        num_tokens=cfg.prompt,
        num_prompt_tokens=cfg.prompt,
        block_hashes=[block_hash(end) for end in hashed],
        skip_reading_prefix_cache=False,
        request_id="resend",
        num_preemptions=0,
    )


def real_hit(version: str, cfg: Config, attention: set[int], mamba: set[int]) -> int:
    """The hit the release's ``get_computed_blocks`` gives an identical resend of ``cfg``
    when the attention group holds entries at ``attention`` and the Mamba group at ``mamba``."""
    coord = coordinator(version, cfg)
    assert getattr(coord, "enable_partial_hash_hits", False) == cfg.partial_hits
    coord.block_pool.cached = {0: attention, 1: mamba}
    manager_class = compiled_release(version)["KVCacheManager"]
    manager = object.__new__(manager_class)
    manager.__dict__.update(
        enable_caching=True,
        coordinator=coord,
        log_stats=False,
        enable_kv_cache_events=False,
        create_kv_cache_blocks=lambda blocks: blocks,
        empty_kv_cache_blocks=None,
    )
    hit: int = manager_class.get_computed_blocks(manager, resend_request(cfg))[1]
    return hit


def draw_config(rng: random.Random, version: str) -> Config:
    """A configuration the release accepts: B in 4, 8, 16, G in B, B/2, h dividing G, fine hits
    where the release has them (0.26-0.29 turn them on whenever h < B: the model's acceptance
    rules also take F off there, which that code cannot run; 0.30+ may turn them off), an
    EAGLE method or not, hash lookahead (0.33), retention (0.29+)."""
    minor = minor_of(version)
    policy = policy_for_release(version)
    while True:
        block = rng.choice((4, 8, 16))
        split = rng.choice((block, block // 2))
        hash_block = rng.choice((split, split // 2))
        lookahead = rng.choice((0, 1, 1, 2))
        drop = lookahead >= 1 and (minor <= 29 or rng.random() < 0.7)
        hash_lookahead = lookahead if minor >= 33 and rng.random() < 0.3 else 0
        sched = math.lcm(block, split)
        retention = rng.choice((-1, 0, sched, 2 * sched, 3 * sched)) if minor >= 29 else -1
        try:
            cfg = Config(
                block=block,
                split_block=split,
                hash_block=hash_block,
                partial_hits=hash_block < block
                and minor >= 26
                and (minor <= 29 or rng.random() < 0.7),
                prompt=rng.randint(1, 7 * block),
                max_sched=64,
                lookahead=lookahead,
                drop=drop and hash_lookahead == 0,
                hash_lookahead=hash_lookahead,
                retention=retention,
            )
        except ConfigError:
            continue
        if policy.accepts(cfg) is None:
            return cfg


def draw_ends(rng: random.Random, prompt: int) -> list[int]:
    """A random chunk-end sequence 0 < e_1 < ... < e_m = N."""
    inside = sorted(rng.sample(range(1, prompt), min(prompt - 1, rng.randint(0, 4))))
    return [*inside, prompt]


def every_position(cfg: Config) -> set[int]:
    """Every hash boundary of the prompt: what a group that cached every block of it holds."""
    return set(range(cfg.hash_block, cfg.prompt + 1, cfg.hash_block))


@pytest.mark.parametrize("version", RELEASES)
def test_resend_lands_at_the_release_r_star(version: str) -> None:
    """With every block of the prompt cached in both groups, the release's lookup gives an
    identical resend R* of the release (``kv_rules(version).resend``)."""
    rng = random.Random(f"{SEED}-dense-{version}")
    rules = kv_rules(version)
    wrong = []
    for _ in range(CASES):
        cfg = draw_config(rng, version)
        dense = every_position(cfg)
        real = real_hit(version, cfg, dense, dense)
        if real != rules.resend(cfg):
            wrong.append(f"{cfg.describe()}: real {real}, model {rules.resend(cfg)}")
    assert not wrong, f"{len(wrong)} of {CASES}: " + "; ".join(wrong[:8])


@pytest.mark.parametrize("version", RELEASES)
def test_resend_hit_on_the_oracle_live_states(version: str) -> None:
    """With the Mamba group holding exactly the claims the slot oracle says a chunk-end
    sequence left live (under the release's rules) and full attention every block, the
    release's lookup gives the oracle's resend hit."""
    rng = random.Random(f"{SEED}-live-{version}")
    rules = kv_rules(version)
    wrong = []
    for _ in range(CASES):
        cfg = draw_config(rng, version)
        ends = draw_ends(rng, cfg.prompt)
        report = oracle(cfg, ends, rules=rules)
        real = real_hit(version, cfg, every_position(cfg), set(report.live))
        if real != report.resend_hit:
            wrong.append(f"{cfg.describe()} ends={ends}: real {real}, model {report.resend_hit}")
    assert not wrong, f"{len(wrong)} of {CASES}: " + "; ".join(wrong[:8])


def registered(version: str, cfg: Config, computed: int) -> dict[int, set[int]]:
    """The block-grid claims the release's retention mask lets each group key when a fresh
    request of ``cfg``'s prompt caches its first ``computed`` tokens in one ``cache_blocks``
    call of the coordinator (its tables' blocks all allocated, no internal checkpoint)."""
    coord = coordinator(version, cfg)
    request = resend_request(cfg)
    request.__dict__.update(
        request_id="fresh", shared_prefix_boundary=0, num_computed_tokens=0, num_output_tokens=0
    )
    for group, manager in enumerate(coord.single_type_managers):
        size = manager.block_size
        manager.req_to_blocks["fresh"] = [
            Block(group, (i + 1) * size) for i in range(cdiv(cfg.prompt, size))
        ]
    coord.cache_blocks(request, computed)
    masked: dict[int, set[int]] = coord.block_pool.masked
    return masked


RETENTION_RELEASES = RELEASES[RELEASES.index("0.29.0") :]
"""The releases whose retention interval is an input of the model (0.23-0.28 read it from the
environment variable VLLM_PREFIX_CACHE_RETENTION_INTERVAL, which the model's acceptance rules
refuse)."""


@pytest.mark.parametrize("version", RETENTION_RELEASES)
def test_retention_keeps_the_release_mask(version: str) -> None:
    """A prompt cached whole in one call: the release's mask (its replay boundaries, segment
    grid and ``reachable_block_mask``) lets the Mamba group key exactly the columns
    ``kv_rules(version).keeps`` keeps below the cacheable count."""
    rng = random.Random(f"{SEED}-retention-{version}")
    rules = kv_rules(version)
    wrong = []
    for _ in range(CASES):
        cfg = draw_config(rng, version)
        keyed = registered(version, cfg, cfg.prompt).get(1, set())
        columns = range(cacheable(cfg, cfg.prompt) // cfg.block)
        model = {(j + 1) * cfg.block for j in columns if rules.keeps(cfg, j)}
        if keyed != model:
            wrong.append(f"{cfg.describe()}: real {sorted(keyed)}, model {sorted(model)}")
    assert not wrong, f"{len(wrong)} of {CASES}: " + "; ".join(wrong[:8])


@pytest.mark.parametrize("version", RELEASES)
def test_the_cache_files_compile_whole(version: str) -> None:
    """Every top-level statement of the manager, coordinator and utility files runs (only
    ``kv_cache_interface.py``'s torch-backed spec tables are skipped), so the lookup above is
    the release's code, not a part of it."""
    skipped = set(compiled_release(version).skipped)
    assert skipped <= {"vllm/v1/kv_cache_interface.py"}, skipped
