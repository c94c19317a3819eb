# Two commands on a fresh machine: `make demo` (the main job) and `make test` (lint: ruff and
# mypy, then the suite without the long fault runs). `make chaos` runs those fault runs
# (tests/faults and the long Spark kills, marked chaos: about twenty-five minutes; one table of fault kind x client at the end).
# Both install what they need first; every step is idempotent.
SHELL := /bin/bash
.SECONDEXPANSION:
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
APT_PKGS := zookeeper kcat maven openjdk-17-jdk-headless tmux
# Apache Kafka, Kafka's Java clients and Spark's Kafka connector (tests/reference): the jars of
# each peers/NAME/pom.xml from Maven Central, and our Java programs of tests/java/NAME/.
PEERS := $(patsubst peers/%/pom.xml,.cache/maven-peers/%/.stamp,$(wildcard peers/*/pom.xml))

.PHONY: setup system venv peers test chaos demo lint typecheck bench clean docs

setup: system venv peers

peers: $(PEERS)

.cache/maven-peers/%/.stamp: peers/%/pom.xml peers/fetch.sh $$(wildcard tests/java/$$*/*.java) | system
	peers/fetch.sh $*
	touch $@

system:
	@missing=""; for p in $(APT_PKGS); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=""; [ "$$(id -u)" = 0 ] || SUDO=sudo; \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

$(PY):
	python3 -m venv $(VENV)

$(STAMP): pyproject.toml | $(PY)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[spark,test,dev,docs]'
	touch $(STAMP)

venv: $(STAMP)

# The suite runs as two pytest processes at once: the JVM half (Spark and Apache Kafka:
# JVM_TESTS) and the rest. Most tests wait on brokers, session timeouts and JVM start-ups rather
# than compute (the load stays near 1 on 2 cores when one process runs the whole suite, which then
# takes about 40 minutes), so the halves overlap well. The JVM half's output follows the rest's.
JVM_TESTS := tests/spark tests/reference
test: setup lint
	@rc=0; export PYSPARK_PYTHON=$(abspath $(PY)); \
	$(PY) -m pytest -q -m "not chaos" -p no:cacheprovider $(JVM_TESTS) $(PYTEST_ARGS) > .test-jvm.log 2>&1 & jvm=$$!; \
	trap 'kill $$jvm 2>/dev/null' INT TERM; \
	$(PY) -m pytest -q -m "not chaos" $(addprefix --ignore=,$(JVM_TESTS)) $(PYTEST_ARGS) || rc=1; \
	wait $$jvm || rc=1; echo "--- $(JVM_TESTS):"; cat .test-jvm.log; exit $$rc

chaos: setup
	PYSPARK_PYTHON=$(abspath $(PY)) $(PY) -m pytest -q -p no:cacheprovider -m chaos tests/faults tests/spark $(PYTEST_ARGS)

demo: setup
	PYSPARK_PYTHON=$(abspath $(PY)) $(VENV)/bin/hmb demo $(DEMO_ARGS)

lint: venv
	$(VENV)/bin/ruff check hmbclient partitioners encoders rebalance spark_integration tests bench examples
	$(VENV)/bin/mypy hmbclient partitioners encoders rebalance spark_integration

# The docs site (mkdocs.yml, docs/) into site/, warnings as errors; tests/test_docs_site.py
# builds it in make test too.
docs: venv
	NO_MKDOCS_2_WARNING=1 $(PY) -m mkdocs build --strict

bench: setup
	$(PY) bench/codec.py

clean:
	rm -rf $(VENV) build dist site *.egg-info .cache/maven-peers
