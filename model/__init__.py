"""The executable semantics: configs, policies, one scheduling step, trajectories, replay."""
