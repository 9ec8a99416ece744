"""What a run shows: verdicts and their table and JSON (:mod:`.report`, :mod:`.compare_report`),
the ``--out`` folder (:mod:`.output`), progress on a terminal (:mod:`.progress`), pictures
(:mod:`.pictures`, :mod:`.graph_picture`, :mod:`.system_picture`) and the scheduler step's
counterexample files (:mod:`.system_counterexamples`).

Imports :mod:`chunkproof.checker.engines` (the results it renders) and below, never
:mod:`chunkproof.checker.runs`, :mod:`chunkproof.checker.repro` or the CLI.
"""
