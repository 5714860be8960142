"""The command line: thin click commands over deploycc's Python API."""
