"""The version of memora-kernel: a leaf, so any module may read it without importing the package
face (``memora/__init__``)."""

__version__ = "0.1.0"
