"""Orchestration, reports and the command line, above the engines: :mod:`.engines` (the
explorer and what computes with it), :mod:`.runs` (a command's engine runs turned into
verdicts and files), :mod:`.reports` (verdicts, pictures, the output folder), :mod:`.repro`
(pytest repros), :mod:`.kinds` (each model's counterexamples behind one interface) and
:mod:`.cli`. Each subpackage's docstring says what it may import.
"""
