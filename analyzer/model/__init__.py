"""The performance model: what a GPU can deliver for a model, pure."""
