"""The policy subset: the derived (interpreted) form equals the native one; outside is an error."""

from __future__ import annotations

import importlib
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import z3
from hypothesis import given, settings
from hypothesis import strategies as st

from chunkproof.model import splits, stages
from chunkproof.model.config import Config
from chunkproof.model.errors import SubsetError
from chunkproof.model.subset import parse
from chunkproof.model.symbolic import symbolic
from chunkproof.model.vectorised import evaluate

STAGES = [
    splits.split_v1,
    splits.split_v2,
    splits.split_v3,
    splits.split_v4,
    splits.split_v5,
    splits.split_v6,
    splits.split_v7,
    splits.split_v8,
    splits.split_v9,
    splits.split_keep_subblock,
    splits.split_lookahead_in_split,
    stages.cap_static_threshold,
    stages.cap_lone_request,
    stages.reserve_r1,
    stages.reserve_unaligned,
]


@st.composite
def configs(draw: st.DrawFn) -> Config:
    block = draw(st.sampled_from([1, 2, 4, 8, 16, 48]))
    hash_block = draw(st.sampled_from([d for d in (1, 2, 4, 8, 16, 48) if block % d == 0]))
    prompt = draw(st.integers(1, 200))
    return Config(
        block=block,
        prompt=prompt,
        tokens=prompt + draw(st.integers(0, 5)),
        max_sched=draw(st.integers(1, 64)),
        lookahead=draw(st.integers(0, min(prompt, 6))),
        threshold=draw(st.sampled_from([0, 0, 3, 16])),
        hash_block=hash_block,
        drop=draw(st.booleans()),
        hash_lookahead=draw(st.sampled_from([0, 1, 3])),
        junction=draw(st.integers(0, prompt)),
        exact_junction=draw(st.booleans()),
        checkpoints=draw(st.booleans()),
        checkpoint_alignment=draw(st.sampled_from([0, 1, 8])),
        uncached_prefix=draw(st.sampled_from([0, 20, 64])),
    )


@settings(max_examples=300, deadline=None)
@given(cfg=configs(), c=st.integers(0, 210), n=st.integers(0, 80))
def test_interpreted_scalar_form_equals_native(cfg: Config, c: int, n: int) -> None:
    for fn in STAGES:
        assert evaluate(parse(fn), [cfg, c, n]).value == fn(cfg, c, n), fn.__name__


@settings(max_examples=40, deadline=None)
@given(cfg=configs())
def test_vectorised_form_equals_native_lane_by_lane(cfg: Config) -> None:
    cs = np.arange(0, cfg.T + 2)[:, None]
    ns = np.arange(0, 40)[None, :]
    for fn in STAGES:
        table = np.broadcast_to(evaluate(parse(fn), [cfg, cs, ns]).value, (len(cs), 40))
        for i, c in enumerate(cs[:, 0].tolist()):
            for n in range(0, 40, 7):
                assert table[i, n] == fn(cfg, c, n), (fn.__name__, c, n)


def _load(tmp_path: Path, body: str, monkeypatch: pytest.MonkeyPatch) -> Callable[..., int]:
    """Import ``split`` from a fresh module file, as a user policy would be."""
    (tmp_path / "user_policy.py").write_text(textwrap.dedent(body))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("user_policy", None)
    split: Callable[..., int] = importlib.import_module("user_policy").split
    return split


@pytest.mark.parametrize(
    ("body", "what"),
    [
        ("def split(cfg, c, n):\n    for i in (1, 2):\n        n = n - i\n    return n\n", "For"),
        ("def split(cfg, c, n):\n    return n / 2\n", "Div"),
        ("def split(cfg, c, n):\n    x = [n]\n    return n\n", "List"),
        ("def split(cfg, c, n):\n    return abs(n)\n", "abs"),
    ],
)
def test_outside_the_subset_names_file_and_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, body: str, what: str
) -> None:
    fn = _load(tmp_path, body, monkeypatch)
    with pytest.raises(SubsetError) as info:
        parse(fn)
        evaluate(parse(fn), [Config(block=4, prompt=8, max_sched=4), 0, 4])
    message = str(info.value)
    assert "user_policy.py:" in message and what in message
    assert "\n" not in message


def truthy_split(cfg: Config, c: int, n: int) -> int:
    """Integers as conditions, as vLLM's code writes them (``if end % block_size:``)."""
    if (c + n) % cfg.block and not c % cfg.block:
        return n - (c + n) % cfg.block
    return n if c or n else 0


def test_integer_conditions_mean_nonzero_in_the_symbolic_form() -> None:
    cfg = Config(block=4, prompt=20, max_sched=8)
    c, n = z3.Ints("c n")
    term, _ = symbolic(parse(truthy_split), [cfg, c, n])
    for cv in range(0, 9):
        for nv in range(0, 9):
            value = z3.simplify(z3.substitute(term, (c, z3.IntVal(cv)), (n, z3.IntVal(nv))))
            assert value.as_long() == truthy_split(cfg, cv, nv), (cv, nv)
