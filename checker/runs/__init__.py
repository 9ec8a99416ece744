"""A command's run of the engines, turned into verdicts and files: one request over a space
(:mod:`.requests`: the explorer over the grid, the prover over its cells), the scheduler step
over several requests (:mod:`.system` explicit, :mod:`.system_prove` by the solver).

Imports :mod:`chunkproof.checker.kinds` (to save a counterexample of any model),
:mod:`chunkproof.checker.engines` and :mod:`chunkproof.checker.reports` (and what they import);
the CLI calls it.
"""
