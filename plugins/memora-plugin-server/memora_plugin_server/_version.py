"""The version of memora-plugin-server: a leaf, so its modules read it without importing the
package face."""

__version__ = "0.1.0"
