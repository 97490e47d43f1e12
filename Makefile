# The two commands of the README. Each one creates/updates .venv first (idempotent, fast when done).
.PHONY: setup demo demo-smol test test-demo test-chaos test-extended
setup:
	@bash scripts/setup_venv.sh
demo: setup
	@.venv/bin/python scripts/demo.py
demo-smol: setup
	@.venv/bin/python scripts/demo_smol.py
test: setup
	@bash scripts/run_tests.sh
test-demo: setup
	@ALIGNFLOW_TEST_MARKERS=demo bash scripts/run_tests.sh
test-chaos: setup
	@ALIGNFLOW_TEST_MARKERS=chaos bash scripts/run_tests.sh
test-extended: setup
	@ALIGNFLOW_TEST_MARKERS=extended bash scripts/run_tests.sh
