"""Findings: what the analyzer concludes about a worker or a pool."""
