"""phasefit: collector."""
