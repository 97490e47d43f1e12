# The two commands of the README. Each one creates/updates .venv first (idempotent, fast when done).
.PHONY: setup demo test
setup:
	@bash scripts/setup_venv.sh
demo: setup
	@.venv/bin/python scripts/demo.py
test: setup
	@bash scripts/run_tests.sh
