"""What a run shows: verdicts and their table and JSON (:mod:`.report`, :mod:`.compare_report`),
the ``--out`` folder (:mod:`.output`), progress on a terminal (:mod:`.progress`), pictures
(the frame :mod:`.figure`; :mod:`.request_picture`, :mod:`.graph_picture`,
:mod:`.system_picture`), and writing a counterexample of any model with its picture
(:meth:`.output.RunFolder.save_counterexample`).

Imports :mod:`chunkproof.checker.engines` (the results it renders) and below, never
:mod:`chunkproof.checker.runs`, :mod:`chunkproof.checker.repro` or the CLI.
"""
