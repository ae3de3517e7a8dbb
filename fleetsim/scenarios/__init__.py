"""Built-in simulated-fleet scenarios (YAML); listed by ``phasefit sim scenarios``."""
