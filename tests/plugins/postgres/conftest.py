"""The PostgreSQL server fixture (`pg_dsn`) is in tests/plugins/conftest.py, shared with the
server plugin's multi-host tests."""
