"""The ``memora`` command: a host of the kernel, not part of it."""
