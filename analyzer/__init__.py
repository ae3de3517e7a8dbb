"""phasefit: analyzer."""
