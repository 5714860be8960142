"""Partitioning: which nodes run on the device and which on the host (plan.py), and the segment
models written for each (segments.py)."""
