"""Adapters: the store and Prometheus in, analysis results out."""
