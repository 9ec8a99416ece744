"""Standalone pytest repros of counterexample files: one request (:mod:`.requests`), several
requests through ``schedule()`` steps (:mod:`.system`). A repro runs the real vLLM methods of a
tree the user names, so it carries the loader code it needs.

Imports :mod:`chunkproof.model`, :mod:`chunkproof.source` and :mod:`chunkproof.spec` only.
"""
