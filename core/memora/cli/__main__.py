"""``python -m memora.cli``."""

from memora.cli.main import main

main()
