"""Sphinx configuration of simsched's API reference: ``sphinx-build -W -b html docs/api build/api``."""

project = "simsched"
author = "the simsched authors"
extensions = ["sphinx.ext.autodoc"]
autodoc_default_options = {"members": True, "show-inheritance": True}
autodoc_member_order = "bysource"
html_theme = "alabaster"
exclude_patterns = ["_build"]
