"""Properties P1-P7, the slot oracle, the state-graph explorer, reports and the CLI."""
