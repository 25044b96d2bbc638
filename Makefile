# seedleague: every set-up step the project needs lives here.
PYTHON ?= python3
VENV   ?= .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PROTOS := $(wildcard proto/seedleague/v1/*.proto)
GEN    := $(patsubst proto/%.proto,%_pb2.py,$(PROTOS))

.PHONY: install proto run test bench clean

## install: virtualenv with seedleague and its dev tools, protos generated.
install: $(STAMP) proto

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q -e '.[dev]'
	touch $(STAMP)

## proto: generate Python protobuf and gRPC modules from proto/.
proto: $(GEN)

seedleague/%_pb2.py: proto/seedleague/%.proto $(STAMP)
	$(PY) -m grpc_tools.protoc -Iproto --python_out=. --pyi_out=. --grpc_python_out=. $<

## run: the default experiment (CartPole-v1 until it is solved).
run: install
	$(VENV)/bin/seedleague train

## test: the test suite (no GPU needed; GPU tests are skipped without one).
test: install
	$(PY) -m pytest

## bench: throughput benchmark; writes a table to stdout.
bench: install
	$(PY) -m benchmarks.throughput

clean:
	rm -rf $(VENV) runs seedleague/v1/*_pb2*.py seedleague/v1/*_pb2*.pyi
