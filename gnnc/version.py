"""gnnc's version: what compiled objects and cache keys record."""

__version__ = "0.1.0"
