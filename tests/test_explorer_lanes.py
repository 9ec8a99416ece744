"""The explorer's lane-wise shortcuts give what the definitions give, lane by lane.

* SPEC P1 is judged on the largest budget's lanes only: every lane's flag equals the
  definition (the largest budget, code that does not raise, ``props.stuck`` of the concrete
  step) on every state of a batch.
* Only the selected step properties are judged, and P0 and P1 are the same either way.
"""

from __future__ import annotations

import numpy as np
import pytest

from chunkproof.model.builtin import get_builtin
from chunkproof.model.config import Config
from chunkproof.model.step import step
from chunkproof.spec import properties as props
from chunkproof.spec.interface import Transitions
from chunkproof.spec.request import Batch, RequestModel, make_batch
from chunkproof.spec.space import Space, grid_from


def _every_lane(
    model: RequestModel, configs: list[Config]
) -> tuple[Batch, np.ndarray, np.ndarray, np.ndarray, Transitions]:
    """Every state c in [c0, E) of every configuration with every offered budget, stepped."""
    batch = make_batch(configs, None)
    inst = np.repeat(np.arange(len(batch)), batch.end - batch.start)
    c = np.concatenate([np.arange(s, e) for s, e in zip(batch.start, batch.end, strict=True)])
    states = np.stack([inst, c], axis=1)
    counts = batch.high[inst] - batch.low[inst] + 1
    source = np.repeat(np.arange(len(states)), counts)
    first = np.cumsum(counts) - counts
    budget = batch.low[inst[source]] + np.arange(len(source)) - first[source]
    return batch, states, source, budget, model.step(batch, states, source, budget)


@pytest.mark.parametrize("name", ["vllm-0.33", "vllm-0.28", "vllm-0.17"])
def test_p1_on_every_lane_is_its_definition(name: str) -> None:
    policy = get_builtin(name)
    grid = grid_from({"block": "4", "lookahead": "0-3", "drop": "both", "prompt": "1-10"}, "t")
    configs = [cfg.replace(max_sched=m) for cfg in Space((grid,), None).configs() for m in (3, 8)]
    model = RequestModel(policy, Space((grid,), None), properties=("P1",))
    batch, states, source, budget, steps = _every_lane(model, configs)
    expected = []
    for lane in range(len(source)):
        cfg = batch.configs[int(states[source[lane], 0])]
        c, b = int(states[source[lane], 1]), int(budget[lane])
        concrete = step(policy, cfg, c, b)
        largest = b == int(batch.high[int(states[source[lane], 0])])
        expected.append(largest and concrete.crash is None and props.stuck(cfg, c, concrete.chunk))
    assert steps.bad["P1"].tolist() == expected
    assert any(expected), "the grid must livelock somewhere for the test to mean anything"


def test_only_the_selected_step_properties_are_judged() -> None:
    policy = get_builtin("vllm-0.33")
    grid = grid_from({"block": "4", "lookahead": "2", "prompt": "1-9", "max_sched": "5"}, "t")
    configs = list(Space((grid,), None).configs())
    alone = _every_lane(RequestModel(policy, Space((grid,), None), properties=("P1",)), configs)
    every = _every_lane(RequestModel(policy, Space((grid,), None)), configs)
    assert set(alone[-1].bad) == {"P0", "P1"}
    assert set(every[-1].bad) == {"P0", "P1", "P3", "P4", "P5", "P6", "P8"}
    for pid in ("P0", "P1"):
        assert alone[-1].bad[pid].tolist() == every[-1].bad[pid].tolist()
