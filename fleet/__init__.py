"""phasefit's shared kernel: the data contract, the GPU and model catalogs, settings and the store.

Nothing here imports a phasefit component; heavy dependencies (SQLAlchemy) are imported only by
``fleet.store`` so a GPU node that installs the ``collector`` extra never needs them.
"""
