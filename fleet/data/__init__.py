"""Built-in catalog data (YAML), read with importlib.resources."""
