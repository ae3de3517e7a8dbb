"""Typed results of an analysis."""
