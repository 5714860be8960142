"""Read-only analyses of a model: inspect (what is in it) and check (what a target refuses)."""
