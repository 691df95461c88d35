# Set-up and test entry points; README.md quotes `make run` and `make test`.
# Both are idempotent: running them twice reuses the virtual environment.
# The interpreter the virtual environment is made from: the distribution's /usr/bin/python3
# where it is 3.11 or newer and can make one (Debian builds it with profile-guided and
# link-time optimisation, and the broker ran 1.15 to 1.4 times as fast on it as on a
# python3 built from source without them: docs/loadtest.md, "Which Python runs it"), else
# the first python3 on the PATH. `make PYTHON=/path/to/python3 ...` chooses another; an
# existing .venv is kept, whatever made it.
PYTHON ?= $(shell /usr/bin/python3 -c 'import sys, ensurepip, venv; sys.exit(sys.version_info < (3, 11))' 2>/dev/null && echo /usr/bin/python3 || echo python3)
VENV := .venv
BIN := $(VENV)/bin

.PHONY: run test lint system-deps venv

# Debian packages the tests use: mosquitto (mosquitto_passwd and a reference broker),
# mosquitto-clients (interoperability tests), a Java runtime for PySpark, chromium (the
# dashboard test drives it with Playwright; no browser download), postgresql and
# redis-server (the auth_postgres and auth_redis tests start private servers; Debian keeps
# PostgreSQL's programs in /usr/lib/postgresql/<version>/bin, off the PATH), nats-server
# (the cluster tests start one, or three in a NATS cluster) and haproxy (the cluster's fault
# tests put it in front of the nodes; Debian keeps both in /usr/sbin), and openssl (a bridge
# test names a CA directory's files by their hashes).
system-deps:
	@missing=""; \
	command -v mosquitto_pub >/dev/null || missing="$$missing mosquitto-clients"; \
	command -v mosquitto_passwd >/dev/null || missing="$$missing mosquitto"; \
	command -v java >/dev/null || missing="$$missing default-jre-headless"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1 || missing="$$missing postgresql"; \
	command -v redis-server >/dev/null || missing="$$missing redis-server"; \
	[ -x /usr/sbin/nats-server ] || command -v nats-server >/dev/null || missing="$$missing nats-server"; \
	[ -x /usr/sbin/haproxy ] || command -v haproxy >/dev/null || missing="$$missing haproxy"; \
	command -v openssl >/dev/null || missing="$$missing openssl"; \
	if [ -n "$$missing" ]; then \
	  echo "installing Debian packages:$$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

venv: $(BIN)/python
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev,load,spark]'

run: $(BIN)/python
	$(BIN)/pip install -q -e .
	$(BIN)/python -m actors.main $(ARGS)

# mypy checks the packages listed in pyproject.toml ([tool.mypy] files).
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy

test: system-deps venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/python -m pytest
