"""The command line (SPEC CLI): argument parsing and printing (:mod:`.main`, whose ``main`` is
the ``chunkproof`` script), the default ranges (:mod:`.defaults`) and the range flags
(:mod:`.ranges`). The only package that imports every other.
"""
