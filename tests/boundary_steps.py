"""Known single steps at the edges of a rule (mutation testing)."""

from chunkproof.model.config import Items

_CACHED_ITEMS = {"items": Items(((0, 4), (4, 4))), "encoder_cache": 4, "encoder_budget": 4}
"""Two images [0, 4) and [4, 8) that only fit the encoder cache one at a time."""

BOUNDARY_STEPS = [
    # V1: a chunk ending exactly at lambda = fl(P, B) = 8 is kept whole (only an end below
    # lambda is floored), here from an admission at c0 = 2 off the block grid.
    ("vllm-0.15", {"block": 4, "prompt": 10, "start": 2, "max_sched": 16}, 2, 6, 6),
    # V1: from c = lambda = 8 the final chunk [8, 10) is kept (the stop at lambda is strictly
    # inside the chunk only).
    ("vllm-0.15", {"block": 4, "prompt": 10, "max_sched": 16}, 8, 2, 2),
    # V7+: a junction J = 40 inside the chunk [16, 48) from c = 16 > 0 stops it at
    # c + fl(J - c, B) = 32, the last block boundary before J.
    ("vllm-0.30", {"block": 16, "prompt": 64, "junction": 40, "max_sched": 64}, 16, 32, 16),
    # The encoder call skips an item that ends exactly at c (``start + length <= c``): an
    # admission at c0 = 8 past both cached images tests neither, so nothing caps the chunk
    # (were the image ending at 8 tested, the two would not fit the cache together: 0).
    (
        "vllm-0.33",
        {"block": 4, "prompt": 16, "max_sched": 16, "start": 8, **_CACHED_ITEMS},
        8,
        16,
        4,
    ),
    (
        "vllm-0.28",
        {"block": 4, "prompt": 16, "max_sched": 16, "start": 8, **_CACHED_ITEMS},
        8,
        16,
        8,
    ),  # V8: a chunk that reaches E and writes an internal checkpoint is not stopped at the
    # partial tail tau = 4 (F on, H = 1 < B = 4): [0, 5) whole, not [0, 4).
    (
        "vllm-0.32",
        {
            "block": 4,
            "split_block": 2,
            "hash_block": 1,
            "prompt": 5,
            "max_sched": 16,
            "lookahead": 2,
            "checkpoints": True,
            "checkpoint_alignment": 1,
        },
        0,
        5,
        5,
    ),
]
"""Single steps at the edges of a rule, which the random fidelity inputs seldom reach: (policy,
configuration, c, budget, chunk). Each chunk is that of the release's own code
(``tests/test_fidelity.py::test_boundary_steps_are_the_releases``), and
``tests/test_known_answers.py`` checks the built-in policies give it."""
