"""Sequence and optional operators: registry rows that SequenceLoweringPass rewrites away."""
