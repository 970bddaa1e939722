# memora — the two set-up commands are `make demo` and `make test`; both install what they need.
# Only Python 3.11+ and pip are assumed: uv is bootstrapped into .tools/ when it is not on PATH.

PYTHON ?= python3
UV_ON_PATH := $(shell command -v uv 2>/dev/null)
ifeq ($(UV_ON_PATH),)
UV := $(CURDIR)/.tools/bin/uv
else
UV := $(UV_ON_PATH)
endif

export UV_PYTHON_DOWNLOADS := never
export UV_PYTHON ?= $(shell $(PYTHON) -c "import sys; print(sys.executable)")
export UV_LINK_MODE := copy
RUN := $(UV) run --no-sync

.PHONY: help install browser demo test pytest lint typecheck bench mutation format clean

help:
	@echo "make demo       install and run the demo on embedded defaults"
	@echo "make test       install, lint, type-check and run the whole test suite"
	@echo "make lint       ruff check + format check"
	@echo "make typecheck  mypy --strict over core/ and plugins/"
	@echo "make bench      run the benchmarks in bench/ (prints ratios)"
	@echo "make mutation   mutation score of the modules in scripts/mutation.py (slow; not in make test)"

$(CURDIR)/.tools/bin/uv:
	$(PYTHON) -m venv $(CURDIR)/.tools
	$(CURDIR)/.tools/bin/pip install --quiet --disable-pip-version-check uv

install: $(UV)
	$(UV) sync --all-packages --all-extras --quiet

demo: install
	$(RUN) python -m memora.cli.demo

# the web page of memora-plugin-server is tested in Debian's chromium (Playwright's own browser
# download cannot be reached here); installed when missing and this user may use apt-get
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || { \
	if [ "$$(id -u)" = 0 ]; then SUDO=; \
	elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then SUDO=sudo; \
	else echo "chromium is missing and apt-get needs root: the browser tests will be skipped" >&2; exit 0; fi; \
	echo "installing chromium (apt-get) for the browser tests" >&2; \
	$$SUDO apt-get update -qq && $$SUDO env DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null; }

# the checks run side by side (mypy and ruff fill the gaps pytest's workers leave), each one's
# output printed whole when it ends; any failure fails make test
test: install browser
	@$(MAKE) --no-print-directory -j3 --output-sync=target lint typecheck pytest

# pytest on every core (pytest-xdist, a worker a core), a test file's tests on one worker: what a
# module builds once (test_outside_the_repo's wheels, test_real_servers' llama.cpp server) is built
# once, as in one process (--dist loadgroup's xdist_group marks are ignored with pytest 9.2:
# pytest-xdist issue #1386).  PYTEST_WORKERS=0 runs the suite in this process.
PYTEST_WORKERS ?= auto
pytest:
	@$(RUN) pytest -n $(PYTEST_WORKERS) --dist loadfile $(PYTEST_ARGS); rc=$$?; \
	if [ $$rc -eq 5 ]; then echo "pytest collected no tests: treating that as a failure" >&2; exit 1; fi; \
	exit $$rc

lint:
	$(RUN) ruff check .
	$(RUN) ruff format --check .

format:
	$(RUN) ruff format .
	$(RUN) ruff check --fix .

typecheck:
	$(RUN) mypy

bench: install
	$(RUN) python bench/run_all.py

mutation: install
	$(RUN) python scripts/mutation.py --list-survivors $(MODULES)

clean:
	rm -rf .venv .tools .pytest_cache .mypy_cache .ruff_cache .benchmarks
