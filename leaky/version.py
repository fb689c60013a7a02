"""The package version (one place: leaky/__init__.py and the reports read it)."""
__version__ = "0.1.0"
