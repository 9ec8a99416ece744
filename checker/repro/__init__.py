"""Standalone pytest repros of counterexample files: the pieces every model's repro is made of
(:mod:`.frame`), one request's test (:mod:`.requests`), several requests through
``schedule()`` steps (:mod:`.system`). A repro runs the real vLLM methods of a
tree the user names, so it carries the loader code it needs.

Imports :mod:`chunkproof.model`, :mod:`chunkproof.source` and :mod:`chunkproof.spec` only.
"""
