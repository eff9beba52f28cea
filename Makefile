.PHONY: install run test lint bench
install:  ## install what the app and the runner need; start nothing (docs/host.md)
	./scripts/install.sh
run:    ## install what the app needs and start it on the embedded default
	./scripts/run_app.sh
test:   ## install what the tests need and run the whole suite
	./scripts/test.sh
lint:   ## ruff + mypy
	./scripts/lint.sh
bench:  ## run the benchmark suite and print its figures
	.venv/bin/python -m bench
