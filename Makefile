# seedleague: every set-up step the project needs lives here.
PYTHON ?= python3
VENV   ?= .venv
TEST_PROCS ?= 2
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed
PROTOS := $(wildcard proto/seedleague/v1/*.proto proto/seedleague/v2/*.proto)
GEN    := $(patsubst proto/%.proto,%_pb2.py,$(PROTOS))

# Shell tests for the system packages that only root installs (`make deps`): present, or installable here.
CPP_TOOLS_OK  := { command -v g++ && command -v protoc && command -v grpc_cpp_plugin && command -v pkg-config \
	&& pkg-config --exists grpc++ protobuf; } >/dev/null 2>&1
RUBY_TOOLS_OK := { command -v ruby && ruby -e 'require "grpc"' && command -v grpc_tools_ruby_protoc; } >/dev/null 2>&1
CAN_APT       := { [ "$$(id -u)" = 0 ] && command -v apt-get; } >/dev/null 2>&1
BROWSER_OK    := command -v chromium >/dev/null 2>&1
# The Debian packages behind each of those tests.
CPP_PACKAGES  := libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc pkg-config g++ make
RUBY_PACKAGES := ruby ruby-grpc ruby-grpc-tools

.PHONY: install install-gpu gpu-check proto run test test-slow bench chaos clean deps chromium cpp-deps cpp-worker native-stream node-worker ruby-deps ruby-worker

## install: virtualenv with seedleague and its dev tools, protos generated. uv installs the packages, several times
##          faster than pip on a fresh machine (benchmarks/README.md, "Test suite time"), compiling their bytecode as pip
##          does (where PYTHONDONTWRITEBYTECODE is set, nothing else would, and every process would compile jax's
##          source again); where uv cannot reach its index, pip does.
install: $(STAMP) proto

$(STAMP): pyproject.toml
	rm -rf seedleague.egg-info  # a stale one in the tree would shadow the installed metadata (its entry points)
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip uv
	$(PY) -m uv pip install -q --compile-bytecode --python $(PY) -e '.[dev]' || { echo "install: uv could not install (it reads \
	PyPI, or UV_INDEX_URL where set, not pip's config); pip installs instead"; $(PY) -m pip install -q -e '.[dev]'; }
	touch $(STAMP)

## install-gpu: `install`, plus JAX's CUDA 12 plugin (NVIDIA GPU, driver >= 525); then
##              `$(VENV)/bin/python -m benchmarks.gpu_pong` and `benchmarks/host_ceiling.py` run on the GPU.
install-gpu: install
	$(PY) -m pip install -q -e '.[dev,cuda]'
	$(PY) -c "import jax; print('jax sees', jax.devices())"

## gpu-check: on a CUDA machine, the GPU tests, benchmarks/gpu_pong.py and the host ceiling, with their
##            outputs in gpu_check/ (benchmarks/gpu_check.sh says what each step shows).
gpu-check: install-gpu
	PYTHON=$(PY) bash benchmarks/gpu_check.sh gpu_check

## proto: generate Python protobuf and gRPC modules from proto/.
proto: $(GEN)

seedleague/%_pb2.py: proto/seedleague/%.proto $(STAMP)
	$(PY) -m grpc_tools.protoc -Iproto --python_out=. --pyi_out=. --grpc_python_out=. $<

## run: the default experiment: a 10-minute league run on Kuhn poker that ends by printing its exploitability.
run: install
	$(VENV)/bin/seedleague train

## test: the test suite (no GPU needed; GPU tests are skipped without one). Builds the C++ worker and the native
##       stream, installs the Node worker's packages and the Ruby worker's stubs; what needs system packages that are
##       absent (and, not being root, it cannot install: `make deps`) it skips with one line saying so, and so do
##       those tests. TEST_PROCS test processes (pytest-xdist; each file's tests stay in one process, so a module's
##       shared fixtures start once); TEST_PROCS=0 runs them in this process.
test: install
	@if $(CPP_TOOLS_OK) || $(CAN_APT); then $(MAKE) --no-print-directory cpp-worker native-stream; \
	else echo "test: no C++ gRPC toolchain and not root, so tests/test_cpp_worker.py, tests/test_native_stream.py and the native cases of tests/test_worker.py will skip (make deps as root installs it)"; fi
	@if command -v npm >/dev/null; then $(MAKE) --no-print-directory node-worker; \
	else echo "test: npm not found, so tests/test_node_worker.py will skip (install Node.js >= 18 and npm)"; fi
	@if $(RUBY_TOOLS_OK) || $(CAN_APT); then $(MAKE) --no-print-directory ruby-worker; \
	else echo "test: no ruby with its grpc gems and not root, so tests/test_ruby_worker.py will skip (make deps as root installs them)"; fi
	@if command -v chromium >/dev/null || $(CAN_APT); then $(MAKE) --no-print-directory chromium; \
	else echo "test: no chromium and not root, so the browser test of tests/test_league_page.py will skip (make chromium as root installs it)"; fi
	$(PY) -m pytest -n $(TEST_PROCS) --dist loadfile

## test-slow: the long multi-process tests left out of `make test` (two-process jax.distributed training, 4-device train).
test-slow: install
	$(PY) -m pytest -m slow

## bench: the benchmark suite (benchmarks/suite.py, about 30 minutes); tables to stdout.
##        make bench BENCH_ARGS="--quick --out /tmp/bench.md"   shorter, and a markdown report
bench: install
	$(PY) -m benchmarks.suite $(BENCH_ARGS)

## chaos: SIGKILL workers, host and league at random moments of a 10-minute Kuhn poker league run, fill its disk
## (a tmpfs, as root) and damage its newest checkpoint, then a table of results acknowledged vs stored, duplicates,
## lost, resumes (CHAOS_ARGS="--minutes 3 --kills 4"; "--disk-faults 0" where you are not root).
chaos: install
	$(PY) -m benchmarks.chaos $(CHAOS_ARGS)

clean:
	rm -rf $(VENV) runs seedleague/v1/*_pb2*.py seedleague/v1/*_pb2*.pyi seedleague/v2/*_pb2*.py seedleague/v2/*_pb2*.pyi envs/node/node_modules

## deps: as root, the Debian packages that the C++ and Ruby workers and the league page's browser test need; .ci/run calls it.
##       Without them `make test` skips those tests and says so; as root with apt-get it installs them itself.
##       What is missing installs with one `apt-get update` and one `apt-get install`.
deps:
	@missing=""; \
	$(CPP_TOOLS_OK) || missing="$$missing $(CPP_PACKAGES)"; \
	$(RUBY_TOOLS_OK) || missing="$$missing $(RUBY_PACKAGES)"; \
	$(BROWSER_OK) || missing="$$missing chromium"; \
	if [ -z "$$missing" ]; then \
		echo "deps: the C++ gRPC toolchain, ruby with its grpc gems and chromium are already installed"; \
	elif $(CAN_APT); then \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $$missing; \
	else \
		echo "deps: needs root and apt-get (Debian:$$missing)"; exit 1; \
	fi

## chromium: Debian's Chromium, the headless browser of the league page's test (tests/test_league_page.py);
##           needs root and apt-get (about 35 s here). No browser is downloaded at run time.
chromium:
	@if $(BROWSER_OK); then \
		echo "chromium: already installed"; \
	elif $(CAN_APT); then \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y chromium; \
	else \
		echo "chromium: needs root and apt-get (Debian: apt-get install chromium)"; exit 1; \
	fi

## cpp-deps: Debian packages for the C++ worker and the native stream (gRPC, protobuf, protoc plugin); needs root.
cpp-deps:
	@if $(CPP_TOOLS_OK); then \
		echo "cpp-deps: grpc++ and protobuf already installed"; \
	elif $(CAN_APT); then \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $(CPP_PACKAGES); \
	else \
		echo "cpp-deps: needs root and apt-get (Debian: libgrpc++-dev libprotobuf-dev protobuf-compiler protobuf-compiler-grpc pkg-config g++)"; \
		exit 1; \
	fi

CPP_BUILD := build/cpp
CPP_GEN   := $(CPP_BUILD)/gen
CPP_PROTO := proto/seedleague/v1/env.proto proto/seedleague/v2/env.proto
CPP_SRCS  := $(foreach v,v1 v2,$(CPP_GEN)/seedleague/$(v)/env.pb.cc $(CPP_GEN)/seedleague/$(v)/env.grpc.pb.cc)

## cpp-worker: the Connect Four C++ env worker, build/cpp/connect_four_worker (protocol v2, and v1 with --protocol 1).
cpp-worker: $(CPP_BUILD)/connect_four_worker

$(CPP_SRCS) &: $(CPP_PROTO) | cpp-deps
	mkdir -p $(CPP_GEN)
	protoc -Iproto --cpp_out=$(CPP_GEN) --grpc_out=$(CPP_GEN) \
		--plugin=protoc-gen-grpc=$$(command -v grpc_cpp_plugin) $(CPP_PROTO)

$(CPP_BUILD)/connect_four_worker: envs/cpp/connect_four_worker.cc envs/cpp/connect_four.h $(CPP_SRCS)
	g++ -std=c++17 -O2 -Wall -I$(CPP_GEN) -Ienvs/cpp -o $@ envs/cpp/connect_four_worker.cc $(CPP_SRCS) \
		$$(pkg-config --cflags --libs grpc++ protobuf) -lpthread

NATIVE_STREAM := build/native/libseedleague_stream.so

## native-stream: the Python workers' lockstep exchange in C++ ($(NATIVE_STREAM)); workers use it where it is
##                built (--native-stream auto|on|off). Less CPU and fewer thread hand-overs per step than grpcio's
##                stream (benchmarks/README.md, "The native stream"). Needs `make cpp-deps`.
native-stream: $(NATIVE_STREAM)

$(NATIVE_STREAM): seedleague/protocol/native_stream.cc | cpp-deps
	mkdir -p $(dir $@)
	g++ -std=c++17 -O2 -Wall -shared -fPIC -o $@ $< $$(pkg-config --cflags --libs grpc++)

NODE_DIR   := envs/node
NODE_STAMP := $(NODE_DIR)/node_modules/.installed

## node-worker: the Node.js Nim worker's packages (npm ci in envs/node, versions from package-lock.json);
##              run it with `node envs/node/src/worker.js --address HOST:PORT`.
node-worker: $(NODE_STAMP)

$(NODE_STAMP): $(NODE_DIR)/package.json $(NODE_DIR)/package-lock.json
	cd $(NODE_DIR) && npm ci --no-audit --no-fund
	touch $@

RUBY_GEN   := build/ruby
RUBY_STUBS := $(RUBY_GEN)/seedleague/v1/env_services_pb.rb

## ruby-deps: Ruby and its gRPC gems (Debian's ruby, ruby-grpc, ruby-grpc-tools) when missing; needs root and apt-get.
ruby-deps:
	@if $(RUBY_TOOLS_OK); then \
		echo "ruby-deps: ruby, its grpc gem and grpc_tools_ruby_protoc already installed"; \
	elif $(CAN_APT); then \
		apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y $(RUBY_PACKAGES); \
	else \
		echo "ruby-deps: needs root and apt-get (Debian: ruby ruby-grpc ruby-grpc-tools), or Ruby >= 3.0 and 'gem install grpc grpc-tools'"; \
		exit 1; \
	fi

## ruby-worker: the Ruby tic-tac-toe worker's stubs, generated from env.proto into build/ruby (not the tree);
##              run it with `ruby envs/ruby/worker.rb --address HOST:PORT`.
ruby-worker: $(RUBY_STUBS)

$(RUBY_STUBS): $(CPP_PROTO) | ruby-deps
	mkdir -p $(RUBY_GEN)
	grpc_tools_ruby_protoc -Iproto --ruby_out=$(RUBY_GEN) --grpc_out=$(RUBY_GEN) $(CPP_PROTO)
