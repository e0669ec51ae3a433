"""The package version, in one place."""

__version__ = "1.1.0"
