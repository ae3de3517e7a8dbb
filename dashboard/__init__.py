"""phasefit: dashboard."""
