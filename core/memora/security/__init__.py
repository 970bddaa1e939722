"""The security boundary: atomic writes, the project lock, path guard and permissions."""
