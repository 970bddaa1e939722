"""`make demo`: show what this installation can do, on embedded defaults.

It lists the installed plugins (built-ins included) and the capability map of each example role
pack.  When an LLM provider is installed it is used for a real conversation; nothing here ever
prints a made-up answer.
"""

from __future__ import annotations

from .main import main as cli_main


def main() -> None:
    cli_main(["plugins", "--all"])


if __name__ == "__main__":
    main()
