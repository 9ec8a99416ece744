"""A vLLM tree's own KV cache lookup and retention, compiled from its source text (SPEC KV1):
where an identical resend of a prompt lands (R*) and which Mamba block states the release keeps.

Standard library only beside :mod:`chunkproof.source.extraction`, so that a generated repro
test can carry it verbatim after the loader. It compiles release code natively, so chunkproof
itself never calls it: a P6 repro test runs it on the vLLM tree its user points it at, and the
KV fidelity tests on the cached releases.

The tree's :data:`KV_CACHE_FILES` are compiled by CPython, each top-level statement by
top-level statement, annotations stripped and decorators other than ``classmethod``,
``staticmethod`` and ``property`` dropped, its imports bound to the standard library, to what
the files before it define, to the small spec classes below (:class:`KVCacheSpec` and its
subclasses, by name), ``BlockPool`` to :class:`RecordingPool` (which holds the positions each
group has cached and records what it is asked to key) and ``KVCacheSpecRegistry`` to
:class:`KvRegistry`; any other vLLM name is :class:`MissingName`, which fails loudly on any
use. A statement that cannot run that way is skipped (:attr:`KvTree.skipped`), and what the
lookup needs of it then fails by name. The coordinator is built by the tree's own
``get_kv_cache_coordinator`` as the scheduler builds it for chunkproof's model
(:func:`kv_coordinator`: a full-attention group of block G, EAGLE-flagged under the drop D, and
a Mamba "align" group of block B; hash block H, retention interval R) and queried through the
tree's ``KVCacheManager.get_computed_blocks`` (:func:`resend_hit`), so the cap on the hit, the
EAGLE drop and the reconciliation of the groups are the tree's. Retention runs through the
coordinator's ``cache_blocks`` on a request whose prompt is held in real-looking blocks
(:func:`registered`); what the pool is asked to key is recorded. :func:`tree_resend` answers
both for one configuration.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, Protocol

from chunkproof.source.extraction import SourceError, stripped, top_imports

KV_CACHE_FILES = (
    "vllm/utils/math_utils.py",
    "vllm/v1/kv_cache_interface.py",
    "vllm/v1/core/kv_cache_utils.py",
    "vllm/v1/core/single_type_kv_cache_manager.py",
    "vllm/v1/core/kv_cache_coordinator.py",
    "vllm/v1/core/kv_cache_manager.py",
)
"""The files compiled, in order: each may import what the files before it define."""
COORDINATOR_FILE = "vllm/v1/core/kv_cache_coordinator.py"
REQUEST_FILE = "vllm/v1/request.py"
REQUEST_METHODS = ("get_max_cache_hit_length", "get_prefix_cache_hit_limit")
"""The methods of the tree's ``Request`` the cache code calls (0.34 on), compiled alone from
:data:`REQUEST_FILE` and bound to the stub request (:func:`kv_request`)."""
HASH_DIGITS = 10
SALT_DIGITS = 4
"""A block hash here names the prefix it covers: the prompt's salt (0 for tokens every prompt
shares, :func:`request_hash`) as ``SALT_DIGITS`` ASCII digits, then the end position of the
tokens as ``HASH_DIGITS``. Chained hashes name their prefix, and a hash merged from several
(0.15's block-size view) ends with its last one's."""
ATTENTION_GROUP = 0
MAMBA_GROUP = 1
"""The KV cache groups, in the order the coordinator is given them."""


class KvConfig(Protocol):
    """What the cache side reads of a configuration (chunkproof's ``Config``, or a repro's
    ``CONFIG``): B, G, H, B_s, P, D, L_h, L, R (-1: None), K, alpha (0: None), S, J, c0 and
    its external part x."""

    @property
    def start(self) -> int: ...

    @property
    def external(self) -> int: ...

    @property
    def block(self) -> int: ...

    @property
    def split_block(self) -> int: ...

    @property
    def hash_block(self) -> int: ...

    @property
    def sched_block(self) -> int: ...

    @property
    def prompt(self) -> int: ...

    @property
    def drop(self) -> bool: ...

    @property
    def hash_lookahead(self) -> int: ...

    @property
    def lookahead(self) -> int: ...

    @property
    def retention(self) -> int: ...

    @property
    def checkpoints(self) -> bool: ...

    @property
    def checkpoint_alignment(self) -> int: ...

    @property
    def exact_junction(self) -> bool: ...

    @property
    def junction(self) -> int: ...


class KvMissingError(SourceError):
    """The tree's cache code used a vLLM name or attribute this driver does not provide."""


class MissingName:
    """A vLLM name not provided: any use fails naming it (logger calls do nothing)."""

    def __init__(self, name: str) -> None:
        object.__setattr__(self, "_name", name)

    def _fail(self, *args: object, **kwargs: object) -> Any:
        raise KvMissingError(f"the KV cache code uses {self._name}, which is not provided")

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
        raise KvMissingError(f"the KV cache code reads {self._label}.{attribute}, not provided")


class KvStub(Loud):
    """A vLLM object (a group, the cache config, the request) with exactly the attributes it is
    given; reading another fails naming it."""

    def __init__(self, label: str, **attributes: Any) -> None:
        self._label = label
        self.__dict__.update(attributes)


# -- the KV cache specs ---------------------------------------------------------------------


class KVCacheSpec(Loud):
    """A KV cache spec: equal when of one class with equal fields (vLLM's are frozen
    dataclasses)."""

    _label = "kv_cache_spec"

    def __init__(self, **fields: Any) -> None:
        self.__dict__.update(fields)

    def __eq__(self, other: object) -> bool:
        return type(self) is type(other) and self.__dict__ == other.__dict__

    def __hash__(self) -> int:
        return hash((type(self).__name__, tuple(sorted(self.__dict__.items()))))


class AttentionSpec(KVCacheSpec):
    pass


class FullAttentionSpec(AttentionSpec):
    pass


class MambaSpec(KVCacheSpec):
    pass


OTHER_SPECS = (
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
"""The other spec kinds the files import: distinct classes no configuration instantiates
(``MLAAttentionSpec`` a full-attention kind, the others attention kinds)."""


@cache
def spec_classes() -> dict[str, type]:
    """Every spec class name the files import, as a class (:data:`OTHER_SPECS`)."""
    known: dict[str, type] = {
        c.__name__: c for c in (KVCacheSpec, AttentionSpec, FullAttentionSpec, MambaSpec)
    }
    for name in OTHER_SPECS:
        base = FullAttentionSpec if name == "MLAAttentionSpec" else AttentionSpec
        known[name] = type(name, (base,), {})
    return known


# -- the block pool -------------------------------------------------------------------------


def block_hash(end: int, salt: int = 0) -> bytes:
    """The hash of the hash block ending at token ``end`` of a prompt whose tokens there are
    ``salt``'s own (0: shared by every prompt; :data:`SALT_DIGITS`)."""
    return f"{salt:0{SALT_DIGITS}d}{end:0{HASH_DIGITS}d}".encode()


def request_hash(request: Any, end: int) -> bytes:
    """The hash of ``request``'s hash block ending at ``end``: its prompt shares its first
    ``shared`` tokens with every other prompt and salts those past them
    (``stub_prefix = (shared, salt)``, :func:`kv_request`); a request without one shares all."""
    shared, salt = getattr(request, "stub_prefix", (end, 0))
    return block_hash(end, salt if end > shared else 0)


def hash_identity(key: Any) -> bytes:
    """The prefix a (possibly merged, possibly group-tagged) block hash names, as
    :func:`block_hash` gives it."""
    raw = key if isinstance(key, bytes) else bytes(key)
    return raw[-(SALT_DIGITS + HASH_DIGITS) :]


def hash_end(key: Any) -> int:
    """The end position a (possibly merged) block hash names."""
    return int(hash_identity(key)[-HASH_DIGITS:])


class CachedBlock:
    """A cached block (the lookup only collects them)."""

    is_null = False

    def __init__(self, group: int, end: int) -> None:
        self.group = group
        self.end = end
        self.block_hash: bytes | None = None
        self.block_hash_num_tokens: int | None = None


class RecordingPool:
    """``BlockPool``: group ``g`` has a cached entry keyed at the positions ``cached[g]``
    (claims; which state the block holds does not matter to the lookup); ``masked[g]`` and
    ``tails[g]`` record the claims the cache code asked it to key."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.hash_block_size = kwargs.get("hash_block_size", args[2] if len(args) > 2 else 0)
        self.num_hash_lookahead_tokens = kwargs.get("num_hash_lookahead_tokens", 0)
        self.cached: dict[int, set[int]] = {}
        self.masked: dict[int, set[int]] = {}
        self.tails: dict[int, set[int]] = {}
        self.null_block = CachedBlock(-1, -1)
        self.null_block.is_null = True

    def cache_full_blocks(self, **call: Any) -> None:
        """Record which of the blocks ``num_cached_blocks`` to ``num_full_blocks`` of a group
        the retention mask keys (``block_mask``; ``None``: every one), by the block-grid claim
        each would get, and give each such block its hash and hashed length (as vLLM's pool
        does; the Mamba managers read them back)."""
        first, last = call["num_cached_blocks"], call["num_full_blocks"]
        mask = call.get("block_mask") or [True] * (last - first)
        size = call["block_size"]
        for index, keep in zip(range(first, last), mask, strict=True):
            if keep:
                claim = (index + 1) * size
                self.masked.setdefault(call["kv_cache_group_id"], set()).add(claim)
                block = call["blocks"][index]
                block.block_hash = request_hash(call.get("request"), claim)
                block.block_hash_num_tokens = claim

    def cache_partial_block(self, **call: Any) -> bytes:
        """Record a partial (tail) key: the group's claim at ``num_tokens``."""
        self.tails.setdefault(call["kv_cache_group_id"], set()).add(call["num_tokens"])
        call["block"].block_hash_num_tokens = call["num_tokens"]
        return request_hash(call.get("request"), call["num_tokens"])

    def get_cached_block(self, key: Any, group_ids: Sequence[int]) -> list[CachedBlock] | None:
        end = hash_end(key)
        if all(end in self.cached.get(g, ()) for g in group_ids):
            return [CachedBlock(g, end) for g in group_ids]
        return None


# -- compiling the files ------------------------------------------------------------------------


@dataclass
class KvTree:
    """One tree's compiled cache code: the namespaces of its files by file name, and the
    top-level statements of each that could not run (``line: exception``)."""

    root: Path
    files: dict[str, dict[str, Any]]
    skipped: dict[str, list[str]]

    def __getitem__(self, name: str) -> Any:
        for namespace in self.files.values():
            if name in namespace and not isinstance(namespace[name], MissingName):
                return namespace[name]
        raise KvMissingError(f"{self.root}: the KV cache files define no {name}")


class KvRegistry:
    """``KVCacheSpecRegistry``: full attention to ``FullAttentionManager``, Mamba to
    ``MambaManager`` (the built-in registration), from the tree being compiled."""

    def __init__(self, tree: KvTree) -> None:
        self.tree = tree

    def get_manager_class(self, spec: Any, role: Any = None) -> Any:
        if isinstance(spec, MambaSpec):
            return self.tree["MambaManager"]
        if isinstance(spec, FullAttentionSpec):
            return self.tree["FullAttentionManager"]
        return None


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
    """Bind the module's imported names: the standard library's, those ``provided``, and
    :class:`MissingName` for any other."""
    for local, (module, name, _) in top_imports(tree).items():
        if module.partition(".")[0] in sys.stdlib_module_names and module != "vllm":
            imported = importlib.import_module(module)
            namespace[local] = imported if name is None else getattr(imported, name)
        elif name is not None and name in provided:
            namespace[local] = provided[name]
        else:
            namespace[local] = MissingName(f"{module}.{name or local}")


def _parsed(path: Path) -> ast.Module:
    try:
        return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    except (OSError, UnicodeDecodeError, SyntaxError) as exc:
        raise SourceError(f"{path}: cannot read: {exc}") from None


@cache
def compiled_kv_tree(root: Path, pool: type = RecordingPool) -> KvTree:
    """The :data:`KV_CACHE_FILES` of the tree at ``root`` compiled (module docstring), with
    ``BlockPool`` bound to ``pool``; each file's definitions are provided to the files after
    it, and a spec class a file defines but could not run is the stub of that name."""
    tree = KvTree(root, {}, {})
    provided: dict[str, Any] = {
        **spec_classes(),
        "BlockPool": pool,
        "KVCacheSpecRegistry": KvRegistry(tree),
        "init_logger": lambda *args: MissingName("logger"),
    }
    for rel in KV_CACHE_FILES:
        path = root / rel
        module = _parsed(path)
        namespace: dict[str, Any] = {"__name__": rel.replace("/", ".")[:-3]}
        _bind_imports(module, provided, namespace)
        for name, value in spec_classes().items():
            if name in namespace:
                namespace[name] = value
        for node in _statements(module):
            one = ast.fix_missing_locations(ast.Module([node], []))
            try:
                exec(compile(one, str(path), "exec"), namespace)
            except Exception as exc:  # a statement that cannot run here (module docstring)
                tree.skipped.setdefault(rel, []).append(f"{node.lineno}: {type(exc).__name__}")
        for name, value in spec_classes().items():
            namespace.setdefault(name, value)
        tree.files[rel] = namespace
        for name, value in namespace.items():
            if not name.startswith("__") and not isinstance(value, MissingName):
                provided.setdefault(name, value)
    tree.files[REQUEST_FILE] = _request_methods(root / REQUEST_FILE)
    return tree


def _request_methods(path: Path) -> dict[str, Any]:
    """The :data:`REQUEST_METHODS` the tree's ``Request`` defines, each compiled alone (they
    read only the request's own attributes); none for a tree without them."""
    if not path.exists():
        return {}
    found = [
        member
        for node in _parsed(path).body
        if isinstance(node, ast.ClassDef) and node.name == "Request"
        for member in node.body
        if isinstance(member, ast.FunctionDef) and member.name in REQUEST_METHODS
    ]
    methods: dict[str, Any] = {}
    for member in found:
        one = ast.fix_missing_locations(ast.Module([stripped(member, member=True)], []))
        exec(compile(one, str(path), "exec"), methods)
    return {name: methods[name] for name in REQUEST_METHODS if name in methods}


def call_with(function: Any, **offered: Any) -> Any:
    """``function`` called with those of ``offered`` its signature names."""
    names = inspect.signature(function).parameters
    return function(**{k: v for k, v in offered.items() if k in names})


# -- the tree's cache, set up for one request ----------------------------------------------


def kv_cache_config(
    tree: KvTree,
    cfg: KvConfig,
    num_blocks: int = 1 << 20,
    speculative_blocks: int = 0,
    checkpoint_blocks: int = 0,
) -> KvStub:
    """The cache config the scheduler's manager is built over for ``cfg``: attention block G
    (the split block), flagged as holding the drafter's layers (``is_eagle_group``) when a
    drafter exists: the drop D is configured or hash lookahead L_h > 0 (0.33 clears the drop
    under L_h, yet the drafter's group stays flagged), Mamba block B ("align"
    mode, ``speculative_blocks`` blocks for speculative tokens, ``checkpoint_blocks`` prefill
    checkpoint blocks aligned on alpha), ``num_blocks`` blocks, retention interval R (read
    from the environment variable by 0.24-0.28, which is set here, and from the cache config
    by 0.29+)."""
    retention = None if cfg.retention < 0 else cfg.retention
    tree.files[COORDINATOR_FILE]["envs"] = KvStub(
        "envs", VLLM_PREFIX_CACHE_RETENTION_INTERVAL=retention
    )
    attention = FullAttentionSpec(
        block_size=cfg.split_block, prefix_cacheable=True, dcp_sharded=True
    )
    mamba = MambaSpec(
        block_size=cfg.block,
        mamba_cache_mode="align",
        num_speculative_blocks=speculative_blocks,
        prefix_cacheable=True,
        dcp_sharded=False,
        num_prefill_checkpoint_blocks=checkpoint_blocks,
        prefill_checkpoint_alignment=cfg.checkpoint_alignment or None,
    )
    groups = [
        KvStub(
            "group",
            kv_cache_spec=attention,
            is_eagle_group=cfg.drop or cfg.hash_lookahead > 0,
            role=None,
        ),
        KvStub("group", kv_cache_spec=mamba, is_eagle_group=False, role=None),
    ]
    return KvStub(
        "kv_cache_config",
        kv_cache_groups=groups,
        num_blocks=num_blocks,
        prefix_cache_retention_interval=retention,
        needs_kv_cache_zeroing=False,
        has_mamba_layers=True,
    )


def kv_coordinator(tree: KvTree, cfg: KvConfig, use_eagle: bool) -> Any:
    """The tree's coordinator for ``cfg`` as the scheduler builds it (:func:`kv_cache_config`),
    hash block H, scheduler block B_s, the scheduler's ``use_eagle`` (the effective drop: 0.33
    clears it under hash lookahead). Like the scheduler's ``KVCacheManager`` it passes no
    ``allow_partial_hash_hits`` (0.30+), so the tree decides its fine-grained hits alone. The
    tree's retention validator raises ``ValueError`` on an interval it refuses."""
    return call_with(
        tree["get_kv_cache_coordinator"],
        kv_cache_config=kv_cache_config(tree, cfg),
        max_model_len=1 << 20,
        max_in_flight_tokens=1 << 16,
        max_num_batched_tokens=1 << 16,
        use_eagle=use_eagle,
        enable_caching=True,
        enable_kv_cache_events=False,
        dcp_world_size=1,
        pcp_world_size=1,
        scheduler_block_size=cfg.sched_block,
        hash_block_size=cfg.hash_block,
        metrics_collector=None,
        num_hash_lookahead_tokens=cfg.hash_lookahead,
        num_prefill_lookahead=cfg.lookahead,
    )


def fine_hits(coordinator: Any) -> bool:
    """Whether the tree's coordinator turned fine-grained (partial) hash hits on (none before
    0.26)."""
    return bool(getattr(coordinator, "enable_partial_hash_hits", False))


def kv_request(
    cfg: KvConfig,
    request_id: str,
    tree: KvTree | None = None,
    prefix: tuple[int, int] | None = None,
) -> KvStub:
    """A request of ``cfg``'s prompt: its block hashes are those of every hash block whose
    L_h following tokens exist. Its prompt is every other's (``prefix`` None), or shares only
    its first ``shared`` tokens with them, ``prefix = (shared, salt)`` naming its own tokens
    past them (:func:`request_hash`). It reads the prefix cache (no skip, no prompt logprobs);
    the tree's own :data:`REQUEST_METHODS` are bound to it, and its hit limit is what the
    tree's ``get_prefix_cache_hit_limit`` gives such a request."""
    hashed = range(cfg.hash_block, cfg.prompt - cfg.hash_lookahead + 1, cfg.hash_block)
    shared, salt = prefix if prefix is not None else (cfg.prompt, 0)
    request = KvStub(
        "request",
        num_tokens=cfg.prompt,
        num_prompt_tokens=cfg.prompt,
        block_hashes=[block_hash(end, salt if end > shared else 0) for end in hashed],
        stub_prefix=(shared, salt),
        skip_reading_prefix_cache=False,
        request_id=request_id,
        num_preemptions=0,
    )
    methods = tree.files.get(REQUEST_FILE, {}) if tree is not None else {}
    for name, function in methods.items():
        request.__dict__[name] = function.__get__(request)
    if "get_prefix_cache_hit_limit" in methods:
        request.__dict__.update(
            pooling_params=None,
            sampling_params=KvStub(
                "sampling_params",
                skip_reading_prefix_cache=False,
                prompt_logprobs=None,
                prompt_logprob_token_ids=None,
            ),
        )
        request.__dict__["prefix_cache_hit_limit"] = request.get_prefix_cache_hit_limit()
    return request


def every_hash_end(cfg: KvConfig) -> set[int]:
    """Every hash boundary of the prompt: what a group that cached every block of it holds."""
    return set(range(cfg.hash_block, cfg.prompt + 1, cfg.hash_block))


def resend_hit(
    tree: KvTree, coordinator: Any, cfg: KvConfig, attention: set[int], mamba: set[int]
) -> int:
    """The hit the tree's ``get_computed_blocks`` gives an identical resend of ``cfg``'s
    prompt through ``coordinator`` when the attention group holds entries at ``attention``
    and the Mamba group at ``mamba``."""
    coordinator.block_pool.cached = {ATTENTION_GROUP: attention, MAMBA_GROUP: mamba}
    manager_class = tree["KVCacheManager"]
    manager = object.__new__(manager_class)
    manager.__dict__.update(
        enable_caching=True,
        coordinator=coordinator,
        log_stats=False,
        enable_kv_cache_events=False,
        create_kv_cache_blocks=lambda blocks: blocks,
        empty_kv_cache_blocks=None,
    )
    hit: int = manager_class.get_computed_blocks(manager, kv_request(cfg, "resend", tree))[1]
    return hit


def fresh_allocated(coordinator: Any, cfg: KvConfig) -> Any:
    """A fresh request of ``cfg``'s prompt with every block of each group's table allocated in
    ``coordinator``, nothing cached yet, its junction J (the waiting loop's
    ``shared_prefix_boundary``)."""
    request = kv_request(cfg, "fresh")
    request.__dict__.update(
        shared_prefix_boundary=cfg.junction, num_computed_tokens=0, num_output_tokens=0
    )
    for group, manager in enumerate(coordinator.single_type_managers):
        size = manager.block_size
        blocks = -(-cfg.prompt // size)
        manager.req_to_blocks["fresh"] = [CachedBlock(group, (i + 1) * size) for i in range(blocks)]
    return request


def registered(coordinator: Any, cfg: KvConfig, computed: int) -> dict[int, set[int]]:
    """The block-grid claims the tree's retention mask lets each group key when a fresh
    request of ``cfg``'s prompt caches its first ``computed`` tokens in one ``cache_blocks``
    call of ``coordinator`` (its tables' blocks all allocated, no internal checkpoint)."""
    coordinator.cache_blocks(fresh_allocated(coordinator, cfg), computed)
    masked: dict[int, set[int]] = coordinator.block_pool.masked
    return masked


def mamba_keyable(tree: KvTree, cfg: KvConfig, use_eagle: bool) -> set[int]:
    """Every position a chunk end can leave a Mamba entry at (SPEC KV1, P6): each block end,
    whatever the retention mask, and the partial tails the tree keys when the prompt is cached
    one token at a time (every chunk end)."""
    coordinator = kv_coordinator(tree, cfg, use_eagle)
    request = fresh_allocated(coordinator, cfg)
    for computed in range(1, cfg.prompt + 1):
        request.num_computed_tokens = computed
        coordinator.cache_blocks(request, computed)
    tails: set[int] = coordinator.block_pool.tails.get(MAMBA_GROUP, set())
    return set(range(cfg.block, cfg.prompt + 1, cfg.block)) | tails


@dataclass(frozen=True)
class TreeResend:
    """What the tree's cache code says of an identical resend of a prompt (SPEC KV1):
    ``position`` R*, the hit it gets when the Mamba group holds a state wherever a chunk end
    can leave one and the attention group what the tree keys (:func:`tree_resend`); ``kept``
    whether the retention mask keeps R*'s Mamba block (the block ending at R*, keyed when the
    prompt is cached); ``fine_hits`` whether the coordinator turned fine hits on;
    ``junction`` R*_J, where a sibling sharing the prompt's first J tokens lands (SPEC
    S-COVER: the largest position at most J on the hit grid where the Mamba group holds a
    state, 0 without a junction), and ``junction_kept`` whether the mask keeps its block."""

    position: int
    kept: bool
    fine_hits: bool
    junction: int = 0
    junction_kept: bool = False


def attention_entries(tree: KvTree, cfg: KvConfig, use_eagle: bool) -> set[int]:
    """The entries the full-attention group holds for an identical resend's lookup (SPEC KV1):
    every hash-block end, except under the EAGLE drop, where the lookup needs an attention entry
    one unit past the Mamba state and a real prefill leaves only what the tree keys when the
    prompt is cached (its full blocks and partial tail, one ``cache_blocks`` call; whatever
    the chunk ends, checked by ``tests/test_kv_resend_fidelity.py``)."""
    if not use_eagle:
        return every_hash_end(cfg)
    cached = kv_coordinator(tree, cfg, use_eagle)
    keyed = registered(cached, cfg, cfg.prompt).get(ATTENTION_GROUP, set())
    tails: set[int] = cached.block_pool.tails.get(ATTENTION_GROUP, set())
    return keyed | tails


def tree_resend(root: Path, cfg: KvConfig, use_eagle: bool) -> TreeResend:
    """R*, its retention and the fine-hit flag of ``cfg`` under the cache code of the tree at
    ``root`` (:class:`TreeResend`), ``use_eagle`` the scheduler's flag: the lookup of a Mamba
    group holding an entry wherever a chunk end can leave one (:func:`mamba_keyable`) and an
    attention group holding :func:`attention_entries`."""
    tree = compiled_kv_tree(root)
    lookup = kv_coordinator(tree, cfg, use_eagle)
    attention = attention_entries(tree, cfg, use_eagle)
    keyable = mamba_keyable(tree, cfg, use_eagle)
    position = resend_hit(tree, lookup, cfg, attention, keyable)
    keyed = registered(kv_coordinator(tree, cfg, use_eagle), cfg, cfg.prompt).get(MAMBA_GROUP, ())
    unit = cfg.hash_block if fine_hits(lookup) else cfg.sched_block
    below = [p for p in keyable if p <= cfg.junction and p % unit == 0]
    junction = max(below, default=0) if cfg.junction > 0 else 0
    return TreeResend(position, position in keyed, fine_hits(lookup), junction, junction in keyed)
