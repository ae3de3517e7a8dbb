"""Alembic migrations of the phasefit store: run them with ``phasefit db upgrade`` (fleet.store.migrate)."""
