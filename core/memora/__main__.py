"""``python -m memora``: the ``memora`` command."""

from memora.cli.main import main

main()
