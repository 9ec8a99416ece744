"""Reading real code: vLLM's scheduler (a release, a checkout, a fork, a patch module) as policy
stages, from its source text only (never imported or executed).

A map, from where a POLICY argument enters to what runs:

* :mod:`~chunkproof.source.loading` resolves POLICY (a built-in name, ``vllm==X.Y.Z``, a path,
  ``module:function``); :mod:`~chunkproof.source.releases` fetches a release's few files once
  into the user cache.
* :mod:`~chunkproof.source.policy` builds the :class:`~chunkproof.model.policy.Policy` of a
  tree: :mod:`~chunkproof.source.classes` finds the class the engine instantiates and its
  members as Python binds them (subclasses, patch modules, module-level patches, SPEC Q2),
  :mod:`~chunkproof.source.extraction` collects the members and helpers they reach,
  :mod:`~chunkproof.source.functions` turns them into validated subset functions,
  :mod:`~chunkproof.source.methods` makes the split and the reservation stages on stand-ins
  for ``self`` and ``request``, :mod:`~chunkproof.source.schedule` reads the composition from
  ``schedule()`` and :mod:`~chunkproof.source.branches` lists every branch of it as modelled,
  held fixed or not, :mod:`~chunkproof.source.encoder` the encoder call (run by
  :mod:`~chunkproof.source.imperative`, the subset extended with loops and data), and
  :mod:`~chunkproof.source.inputs` names every input the code reads that the model lacks.
* :mod:`~chunkproof.source.encoder_run` drives a tree's real encoder code for the generated
  repros (it and :mod:`~chunkproof.source.extraction` are standard-library only: the repros
  carry them).

It may import :mod:`chunkproof.model` (the semantics it produces stages for) and nothing above.
"""
