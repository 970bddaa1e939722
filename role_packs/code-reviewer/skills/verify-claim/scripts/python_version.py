"""Print the Python version a snippet runs on, for the evidence section of a finding."""

import platform
import sys

sys.stdout.write(f"{platform.python_implementation()} {platform.python_version()}\n")
