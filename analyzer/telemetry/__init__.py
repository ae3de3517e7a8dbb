"""Telemetry frames and bottleneck classification."""
