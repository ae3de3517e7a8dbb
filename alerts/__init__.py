"""phasefit: alerts."""
