# One entry point for people and CI: `make demo`, `make check`, `make test`. Each sets up what is
# missing (virtualenv, the package and its test tools with the suite's S3 server from PyPI; for
# `make test`, the suite's Azure Blob server from npm) and reuses it on the next run; the
# monitoring tests' Debian packages are checked for (`make tools`), .ci/run installs them.
PYTHON ?= python3.11
VENV := .venv
STAMP := $(VENV)/.installed
NODE_STAMP := node_modules/.installed
DEMO_DIR ?=

.PHONY: demo lint check test bench clean tools

$(STAMP): pyproject.toml
	@command -v java >/dev/null || { echo "Java 17 is needed (apt-get install openjdk-17-jre-headless)"; exit 1; }
	test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -e '.[test]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/python jobs/demo.py $(if $(DEMO_DIR),--dir $(DEMO_DIR))

$(NODE_STAMP): package.json package-lock.json
	@command -v npm >/dev/null || { echo "Node.js and npm are needed for the tests' Azure Blob server (apt-get install nodejs npm)"; exit 1; }
	npm ci --no-audit --no-fund --loglevel=error
	touch $(NODE_STAMP)

# Debian's prometheus (prometheus, promtool), chromium and chromium-driver: the monitoring tests' real parts;
# go and mvn: the GCS tests' server (built from tests/gcs) and Google's GCS connector (from Maven Central)
tools:
	@for tool in prometheus promtool chromium chromedriver; do command -v $$tool >/dev/null || { \
	  echo "$$tool is needed by the monitoring tests (apt-get install prometheus chromium chromium-driver; .ci/run does)"; exit 1; }; done
	@for tool in go mvn; do command -v $$tool >/dev/null || { \
	  echo "$$tool is needed by the GCS tests (Go 1.26 and Maven; .ci/run installs them)"; exit 1; }; done

# The GCS tests' server (tests/gcs, a Go module) and Google's GCS connector (shaded: fetched with
# mvn, as spark.jars.packages takes no classifier), ready before the suite starts.
GCS_SERVER := tests/gcs/gcs-server
GCS_CONNECTOR_VERSION := $(shell sed -n 's/^GCS_CONNECTOR_VERSION = "\(.*\)"/\1/p' tests/support/servers.py)
GCS_CONNECTOR := $(HOME)/.m2/repository/com/google/cloud/bigdataoss/gcs-connector/$(GCS_CONNECTOR_VERSION)/gcs-connector-$(GCS_CONNECTOR_VERSION)-shaded.jar

$(GCS_SERVER): tests/gcs/main.go tests/gcs/go.mod tests/gcs/go.sum
	cd tests/gcs && go build -o gcs-server .

$(GCS_CONNECTOR):
	mvn -q dependency:get -Dartifact=com.google.cloud.bigdataoss:gcs-connector:$(GCS_CONNECTOR_VERSION):jar:shaded -Dtransitive=false

# Static checks: style, types (strict on spark_flow/), then the layers' contracts (pyproject.toml).
lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy
	$(VENV)/bin/lint-imports --no-cache

# The inner loop: the static checks and every test that needs no other process: no Spark (a
# session is a JVM and its Python workers), no server, no job; see docs/testing.md.
check: lint
	$(VENV)/bin/pytest -m "not spark and not processes"

# Everything, as CI runs it: the static checks and the whole suite, on two workers: one runs
# the tests that start processes (Spark applications, servers, jobs) one at a time, the other
# the tests in its own Spark session (the conftest's xdist groups).
test: lint tools $(NODE_STAMP) $(GCS_SERVER) $(GCS_CONNECTOR)
	$(VENV)/bin/pytest -n 2 --dist loadgroup

bench: $(STAMP)
	$(VENV)/bin/python bench/overhead.py
	$(VENV)/bin/python bench/flow_control.py
	$(VENV)/bin/python bench/scaling.py
	$(VENV)/bin/python bench/publish_rate.py
	$(VENV)/bin/python bench/controller.py
	$(VENV)/bin/python bench/scrape.py
	$(VENV)/bin/python bench/console.py
	$(VENV)/bin/python bench/engine.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache spark_flow.egg-info node_modules $(GCS_SERVER)
