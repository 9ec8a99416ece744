"""The solver bounds of tests that assert a verdict of the bounded search: Z3's resource
count, which does not depend on the machine's speed, decides; the wall-clock timeout beside it
is a guard only (ten minutes, far past any query here)."""

RLIMIT = 300_000_000
"""Z3's resource bound per query: about ten times what the largest bounded-search run of the
tests takes in all (3e7, the adaptive floor's)."""

GUARD_MS = 600_000
"""The wall-clock timeout per query beside :data:`RLIMIT`."""
