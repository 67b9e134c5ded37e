# The two loops of CONTRIBUTING.md. Both run from a shell; neither needs make for more
# than naming them.
#
#   make quick                      # build, lint, the Rust core's tests, the unit tests
#   make quick PATHS="tests/integration/test_acl.py"   # and these pytest paths
#   make test                       # everything, as CI runs it (the README's command)

.PHONY: help quick test

help:
	@echo "make quick [PATHS=\"pytest paths...\"]  build in place, lint, Rust core and unit tests"
	@echo "                                      (bash scripts/quick.sh; needs .venv from make test)"
	@echo "make test                             install what the tests need and run every gate,"
	@echo "                                      as CI does (bash scripts/test.sh)"

quick:
	bash scripts/quick.sh $(PATHS)

test:
	bash scripts/test.sh
