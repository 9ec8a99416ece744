"""Resolve a POLICY argument (SPEC CLI): a built-in name, real vLLM code, or ``module:function``."""

from __future__ import annotations

from chunkproof.model.builtin import get_builtin, is_builtin
from chunkproof.model.errors import PolicyError, SubsetError
from chunkproof.model.holes import candidate_policy, parse_name
from chunkproof.model.policy import Policy, Stage
from chunkproof.model.trace_file import TraceFile
from chunkproof.source.functions import TreeStage, locate_module, read_function
from chunkproof.source.methods import Overrides
from chunkproof.source.policy import (
    names_class,
    names_source,
    recorded_source_options,
    source_policy,
)


def recorded_policy(cx: TraceFile) -> Policy:
    """The policy a counterexample was found on, rebuilt with the ``--compose``, ``--set``,
    ``--class`` and ``--base`` options it was checked with (SPEC C)."""
    return resolve_policy(cx.policy, *recorded_source_options(cx.policy_options))


def resolve_policy(
    text: str,
    compose: str | None = None,
    overrides: Overrides = (),
    class_name: str | None = None,
    base: str | None = None,
) -> Policy:
    """A built-in policy, real vLLM code (``vllm==X.Y.Z``, ``vllm``, a path; see
    :mod:`chunkproof.source.policy`), or a user policy ``module:name``.

    A synthesis candidate is named by its base and its hole values
    (:func:`~chunkproof.model.holes.parse_name`). A built-in name wins over a file of the
    same name; a path wins over ``module:name``;
    ``path.py:Name`` naming a class, or a patch function without parameters, of that file is
    real vLLM source too (:func:`~chunkproof.source.policy.names_class`).

    ``module:name`` names a split function ``(cfg, c, n) -> int`` in the policy subset, read
    from the module's file (never imported), which takes the place of the split in the
    composition of ``vllm-latest`` (budget cap, split, reservation R1).

    ``compose`` (``--compose C5``) sets the composition real vLLM code runs in (default: the
    one read from its ``schedule()``), ``overrides`` (``--set self.x=3``) give values to inputs
    of that code the model does not have, ``class_name`` (``--class``) names the class and
    ``base`` (``--base``) the tree a policy file sits on; all are an error for any other
    policy.
    """
    if (names_source(text) or names_class(text)) and not is_builtin(text):
        return source_policy(text, compose, overrides, class_name, base)
    given = source_flags_given(compose, overrides, class_name, base)
    if given:
        raise PolicyError(f"{given[0]} applies to real vLLM source, not to {text!r}")
    named = parse_name(text)
    if named is not None:
        return candidate_policy(get_builtin(named[0]), named[1])
    if ":" not in text:
        if not is_builtin(text) and ("/" in text or text.endswith(".py")):
            raise PolicyError(f"{text}: no such file or directory")
        return get_builtin(text)
    module_name, _, attr = text.rpartition(":")
    try:
        tree = read_function(locate_module(module_name), attr)
    except SubsetError as exc:
        raise PolicyError(str(exc)) from None
    latest = get_builtin("vllm-latest")
    user = Stage("split", TreeStage(tree), TreeStage(tree))
    stages = tuple(user if s.name == "split" else s for s in latest.stages)
    return Policy(
        name=text,
        summary=f"user split {text} in the composition of {latest.name}",
        stages=stages,
        split_variant=text,
        reservation_variant="R1",
        composition=latest.composition,
        acceptance=latest.acceptance,
    )


def source_flags_given(
    compose: str | None,
    overrides: Overrides,
    class_name: str | None,
    base: str | None,
) -> list[str]:
    """The flags given among those that apply to real vLLM source only (``--compose``,
    ``--set``, ``--class``, ``--base``), in that order."""
    flags = (
        ("--compose", compose),
        ("--set", overrides),
        ("--class", class_name),
        ("--base", base),
    )
    return [flag for flag, value in flags if value]
