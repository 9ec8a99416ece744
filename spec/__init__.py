"""The specification: what is checked, below both engines (properties, the slot oracle,
the checkable models and their input spaces)."""
