"""The engines and what computes with them: the explorer (:mod:`.explorer`, :mod:`.search`),
minimal counterexamples (:mod:`.minimise`, :mod:`.least_counterexample`), the process pool
(:mod:`.executor`), conformance and comparison of two policies (:mod:`.conform`,
:mod:`.compare`), the single-request abstraction's check (:mod:`.abstraction`), and the replay
judgement of a trace (:mod:`.traces`). The prover's side is :mod:`chunkproof.proofs`.

Imports :mod:`chunkproof.model`, :mod:`chunkproof.source`, :mod:`chunkproof.spec`,
:mod:`chunkproof.proofs` and its own modules only; nothing here writes files or prints.
"""
