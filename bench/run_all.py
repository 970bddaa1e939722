"""Run every benchmark script in bench/ (bench_*.py) in turn; each prints its own ratios."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path


def main() -> None:
    only = sys.argv[1:]
    for path in sorted(Path(__file__).parent.glob("bench_*.py")):
        if only and not any(o in path.stem for o in only):
            continue
        print(f"== {path.stem}", flush=True)
        sys.argv = [str(path)]  # the names picked here are not the script's own arguments
        try:
            runpy.run_path(str(path), run_name="__main__")
        except SystemExit as exc:  # a script that exits ends itself, not the whole run
            if exc.code not in (None, 0):
                print(f"{path.stem} exited with {exc.code}", flush=True)
        print(flush=True)


if __name__ == "__main__":
    main()
