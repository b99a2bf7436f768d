"""The public routes (``/search``, ``/{catalog}/@search``): one response contract for frontends."""
