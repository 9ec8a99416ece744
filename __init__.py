"""chunkproof: a formal model and exhaustive checker of vLLM's prefill chunk-split policy.

Subpackages (installed under this namespace):

* ``chunkproof.model``: the executable semantics (configs, policies, one step, trajectories).
* ``chunkproof.proofs``: the Z3 side (transition constraints, bounded search, proofs).
* ``chunkproof.checker``: properties P1-P7, the state-graph explorer, reports and the CLI.
"""

__version__ = "0.1.0"
