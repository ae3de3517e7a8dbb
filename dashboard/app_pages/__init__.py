"""The dashboard's page scripts, run by Streamlit through ``st.navigation`` in ``dashboard/app.py``.

The folder is not named ``pages/``: Streamlit treats a ``pages/`` folder next to the entry script as a
legacy multipage app, and a URL such as ``/roofline`` opened first in a new session would then run the
page script on its own (no navigation, no page config) instead of through ``app.py``.
"""
