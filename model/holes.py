"""The space of candidate policies that synthesis searches (SPEC Y1): V9's split and R1's
reservation (vLLM 0.33-0.34) with holes.

A hole is a small integer; each of its values names one action, stated in :data:`HOLES`. The
template stages below read the holes as extra arguments and are written in the policy subset,
so one definition gives the native, vectorised and Z3 forms of every candidate: the engines
check a candidate as they check any policy, and the refutation of a counterexample
(:mod:`chunkproof.proofs.refutation`) runs the same template with the holes left as Z3
constants. The window is (T - L, T) (SPEC P5); the point where every hole is 0 is the release
itself.

* ``finish`` (split, an end e of V9 in the window): 0 never; 1 finish the prefill (end at T)
  when the budget reaches T and the chunk crosses no boundary of the split grid G from a
  mid-block start (``lookahead-in-split``, SPEC V); 2 the same with the scheduler's block
  B_s = lcm(B, G), which is the Mamba grid B SPEC P3 judges whenever G divides B (the
  scheduler reads B_s, not B); 3 whenever the budget reaches T.
* ``back`` (split, a window end not finished): 0 keep V9's end; 1 end at fl(T - L, G) when
  that is past c (``lookahead-in-split``); 2 end at fl(T - L, B_s) when that is past c.
* ``spare`` (reservation, ends it leaves alone): 0 none (R1); 1 ends on the split grid G
  (``lookahead-in-split``); 2 those and the partial-tail boundary tau V9 stops at.
* ``keep`` (reservation): 0 a trim may leave 0 (R1); 1 a trim that would leave nothing keeps
  the chunk as it came.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from chunkproof.model.arith import fl
from chunkproof.model.config import Config
from chunkproof.model.errors import PolicyError
from chunkproof.model.own_source import own_source
from chunkproof.model.policy import Policy, Stage
from chunkproof.model.splits import next_boundary, split_v9, tau_ck33
from chunkproof.model.subset import SubsetFunction, Value, parse


@dataclass(frozen=True)
class Hole:
    """One hole: its name, the stage it sits in and what each of its values does (value i is
    ``actions[i]``)."""

    name: str
    stage: str
    actions: tuple[str, ...]

    @property
    def size(self) -> int:
        return len(self.actions)


HOLES: tuple[Hole, ...] = (
    Hole(
        "finish",
        "split",
        (
            "never finish a window end",
            "finish at T when the budget reaches it and no G boundary is crossed from mid-block",
            "finish at T when the budget reaches it and no B boundary is crossed from mid-block",
            "finish at T whenever the budget reaches it",
        ),
    ),
    Hole(
        "back",
        "split",
        (
            "keep the split's window end",
            "else end at fl(T - L, G) if past c",
            "else end at fl(T - L, B_s) if past c",
        ),
    ),
    Hole(
        "spare",
        "reservation",
        (
            "the reservation trims every window end (R1)",
            "the reservation leaves ends on G alone",
            "the reservation leaves ends on G and the partial tail tau alone",
        ),
    ),
    Hole(
        "keep",
        "reservation",
        (
            "a trim may leave 0 (R1)",
            "a trim that would leave nothing keeps the chunk",
        ),
    ),
)
"""Every hole, in the order of a candidate's values (module docstring)."""

BASES = ("vllm-0.33", "vllm-0.34")
"""The releases whose split and reservation the template generalises (V9 with R1, C9)."""


# -- the template, in the policy subset ---------------------------------------------------------


def crosses_from_mid_block(cfg: Config, c: int, finish: int) -> bool:
    """``finish``'s guard (module docstring): a chunk from c to T crosses a boundary of the
    grid ``finish`` names (1: G, 2: B_s) from a mid-block start; never for 3."""
    grid = cfg.split_block if finish == 1 else cfg.sched_block
    if finish == 3 or c % grid == 0:
        return False
    return next_boundary(c, grid) < cfg.tokens


def split_template(cfg: Config, c: int, n: int, finish: int, back: int) -> int:
    """SPEC Y1: V9, then an end e in the window (T - L, T) is resolved by the holes: finish
    the prefill (``finish``), else end at the last grid point before the window (``back``),
    else keep e."""
    k = split_v9(cfg, c, n)
    e = c + k
    t = cfg.tokens
    if t - cfg.lookahead < e < t:
        if finish > 0 and c + n >= t and not crosses_from_mid_block(cfg, c, finish):
            return t - c
        if back > 0:
            grid = cfg.split_block if back == 1 else cfg.sched_block
            a = fl(t - cfg.lookahead, grid)
            if a > c:
                return a - c
    return k


def spared(cfg: Config, e: int, spare: int) -> bool:
    """``spare`` (module docstring): the reservation leaves end e alone."""
    if spare == 0:
        return False
    if e % cfg.split_block == 0:
        return True
    return spare == 2 and cfg.partial_hits and e == tau_ck33(cfg)


def reserve_template(cfg: Config, c: int, n: int, spare: int, keep: int) -> int:
    """SPEC Y1: R1 (end at T - L when 0 < T - c - n < L), except on ends ``spare`` leaves
    alone, and, with ``keep``, where the trim would leave nothing."""
    remaining = cfg.tokens - c - n
    if 0 < remaining < cfg.lookahead and not spared(cfg, c + n, spare):
        trimmed = n - (cfg.lookahead - remaining)
        if keep == 0 or trimmed > 0:
            n = trimmed
    return max(n, 0)


TEMPLATES: dict[str, Callable[..., int]] = {
    "split": split_template,
    "reservation": reserve_template,
}
"""The template of each stage with holes."""


# -- candidates ----------------------------------------------------------------------------------


@dataclass(frozen=True)
class HoleStage:
    """A template stage with its holes filled: ``values`` are integers for a candidate the
    engines check, or Z3 constants for the refutation of a counterexample (its symbolic
    form). Calling it runs the template natively (chunkproof's own code); :meth:`subset` and
    :meth:`arguments` give the vectorised and symbolic forms the same syntax tree."""

    template: Callable[..., int]
    values: tuple[Value, ...]

    def __call__(self, cfg: Any, c: int, n: int) -> int:
        return self.template(cfg, c, n, *self.values)

    def subset(self) -> SubsetFunction:
        return parse(self.template)

    def arguments(self, cfg: Any, c: Value, n: Value) -> list[Value]:
        return [cfg, c, n, *self.values]


def holes_of(stage: str) -> tuple[Hole, ...]:
    return tuple(hole for hole in HOLES if hole.stage == stage)


def describe(values: Mapping[str, int]) -> str:
    """A candidate in one line: ``finish=1 back=1 spare=1 keep=0``."""
    return " ".join(f"{hole.name}={values[hole.name]}" for hole in HOLES)


def actions(values: Mapping[str, int]) -> list[str]:
    """What each hole of a candidate does, in words."""
    return [f"{hole.name}={values[hole.name]}: {hole.actions[values[hole.name]]}" for hole in HOLES]


def parse_name(text: str) -> tuple[str, dict[str, int]] | None:
    """The base and the hole values a candidate's name gives (``vllm-0.33+finish=1,back=1,
    spare=1,keep=0``, as :func:`candidate_policy` names it), or None when ``text`` is no such
    name; a name of that form with a hole missing, unknown or out of range is an error."""
    base, plus, rest = text.partition("+")
    if not plus or base not in BASES:
        return None
    values: dict[str, int] = {}
    for part in rest.split(","):
        name, equals, value = part.partition("=")
        hole = next((h for h in HOLES if h.name == name), None)
        if hole is None or not equals or not value.isdigit() or int(value) >= hole.size:
            known = ", ".join(f"{h.name}=0..{h.size - 1}" for h in HOLES)
            raise PolicyError(f"{text!r}: {part!r} is not a hole value (holes: {known})")
        values[name] = int(value)
    return base, values


def check_base(base: Policy) -> None:
    """The template generalises V9 with R1 only (:data:`BASES`)."""
    if base.name not in BASES:
        raise PolicyError(
            f"synthesis fills holes in V9's split and R1's reservation: the base is one of "
            f"{', '.join(BASES)}, not {base.name!r}"
        )


def candidate_policy(base: Policy, values: Mapping[str, Value]) -> Policy:
    """The candidate of ``base`` with its holes at ``values`` (integers, or Z3 constants for
    the symbolic form): ``base``'s composition with the template split and reservation."""
    check_base(base)
    missing = [hole.name for hole in HOLES if hole.name not in values]
    if missing:
        raise PolicyError(f"no value for the hole(s) {', '.join(missing)}")
    filled = {
        name: Stage(name, stage, stage)
        for name, template in TEMPLATES.items()
        for stage in [HoleStage(template, tuple(values[h.name] for h in holes_of(name)))]
    }
    concrete = all(isinstance(values[hole.name], int) for hole in HOLES)
    label = describe(values) if concrete else "holes"
    return Policy(
        name=f"{base.name}+{label.replace(' ', ',')}",
        summary=f"{base.name} with the synthesis template's holes at {label} (SPEC Y1)",
        stages=tuple(filled.get(stage.name, stage) for stage in base.stages),
        split_variant="V9+holes",
        reservation_variant="R1+holes",
        composition=base.composition,
        acceptance=base.acceptance,
        cache_release=base.kv_release,
        fixed=base.fixed,
    )


def candidate_source(base: Policy, values: Mapping[str, int]) -> str:
    """The candidate as a Python module in the policy subset (SPEC Y5): the template's
    functions, chunkproof's own, and ``split`` and ``reservation`` with the holes filled. Its
    name reads it back into every command (:func:`parse_name`)."""
    name = candidate_policy(base, values).name
    header = [
        f'"""{name}: a policy chunkproof synthesised (SPEC Y).',
        "",
        f"{base.name}'s composition with the split and the reservation below, both of",
        "them needed: chunkproof reads the whole candidate back by its name, e.g.",
        f"`chunkproof check {name}`",
        f"(`FILE:split` alone would run this split with {base.name}'s reservation).",
        "",
        *actions(values),
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from chunkproof.model.arith import fl",
        "from chunkproof.model.config import Config",
        "from chunkproof.model.splits import next_boundary, split_v9, tau_ck33",
    ]
    functions: list[Callable[..., Any]] = [
        crosses_from_mid_block,
        split_template,
        spared,
        reserve_template,
    ]
    body = ["\n\n\n" + own_source(f).text.rstrip() for f in functions]
    arguments = {stage: [values[h.name] for h in holes_of(stage)] for stage in TEMPLATES}
    named = {
        stage: ", ".join(f"{h.name}={values[h.name]}" for h in holes_of(stage))
        for stage in TEMPLATES
    }
    wrappers = [
        "",
        "",
        "",
        "def split(cfg, c, n):",
        f'    """The split: the template with {named["split"]}."""',
        f"    return split_template(cfg, c, n, {', '.join(map(str, arguments['split']))})",
        "",
        "",
        "def reservation(cfg, c, n):",
        f'    """The reservation: the template with {named["reservation"]}."""',
        f"    return reserve_template(cfg, c, n, {', '.join(map(str, arguments['reservation']))})",
        "",
    ]
    return "\n".join(header) + "".join(body) + "\n".join(wrappers)
