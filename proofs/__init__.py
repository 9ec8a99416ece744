"""The Z3 side: transition constraints, bounded search and proofs (issue 3)."""
