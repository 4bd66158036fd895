"""polytf's version: the one number in every cache key and exported header."""

__version__ = "0.1.0"

__all__ = ["__version__"]
