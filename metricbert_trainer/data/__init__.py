"""Catalogs (one text column per field), sectioned catalogs, expert annotations and text lengths.

The bottom layer: it imports nothing else of the package (docs/architecture.md).
"""
