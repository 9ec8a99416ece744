"""The solver bounds of tests that assert a verdict of a solver (the bounded search, the
single-request prover, conform): Z3's resource count, which does not depend on the machine's
speed, decides; the wall-clock timeout beside it is a guard only (ten minutes, far past any
query here)."""

RLIMIT = 300_000_000
"""Z3's resource bound per query: about ten times what the largest bounded-search run of the
tests takes in all (3e7, the adaptive floor's). For the single-request prover and conform
(``--rlimit``, :data:`SOLVER_ARGS`) the largest query of the tests takes 4.4e6 units (a
conform query of test_fidelity; 3.4e6 a certificate obligation of test_soundness_sample's
prove), and all the queries of test_fidelity's conform cases and test_forks together 1.3e8
(test_soundness_sample and test_source_policy together 3.7e7): "rlimit count" of Z3's
statistics, summed over every solver call."""

GUARD_MS = 600_000
"""The wall-clock timeout per query beside :data:`RLIMIT`."""

SOLVER_ARGS = ["--rlimit", str(RLIMIT), "--timeout", str(GUARD_MS // 1000)]
"""The CLI's options for :data:`RLIMIT` and :data:`GUARD_MS` (``--timeout`` is in seconds):
for ``prove``, ``check``, ``conform`` and ``compare`` runs whose verdict a test asserts."""
