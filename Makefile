# The two commands the README promises:
#   make demo   installs what is missing, builds, runs the demo
#   make test   installs what is missing, builds, runs every test
# Debian packages the build needs (installed with apt-get when missing):
DEB_PACKAGES := cmake ninja-build g++ pkg-config libdnnl-dev libsentencepiece-dev \
  libcli11-dev libxxhash-dev liburing-dev nlohmann-json3-dev googletest libgtest-dev libgmock-dev \
  libbenchmark-dev gnuplot-nox

PRESET ?= release
BUILD := build/$(PRESET)
SHARED ?= ../shared
DEMO_MODEL ?= $(SHARED)/models/stories260K/stories260K.bin
DEMO_TOKENIZER ?= $(SHARED)/models/stories260K/tok512.model
DEMO_PROMPT ?= Once upon a time, there was a little girl named Lily

.PHONY: demo test build deps clean

deps:
	@missing=$$(for p in $(DEB_PACKAGES); do \
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

demo: build
	@if [ ! -f "$(DEMO_MODEL)" ]; then \
	  echo "demo: no model at $(DEMO_MODEL)."; \
	  echo "  The project's own default model is not bundled yet (issue #3);"; \
	  echo "  until then pass one: make demo DEMO_MODEL=path/to/model.gguf [DEMO_TOKENIZER=...]"; \
	  exit 1; \
	fi
	$(BUILD)/apps/tierkv run --model "$(DEMO_MODEL)" --tokenizer "$(DEMO_TOKENIZER)" \
	  --prompt "$(DEMO_PROMPT)" --max-tokens 80 --temperature 0 --stats
	$(BUILD)/apps/tierkv bench-engine --tokens 256 512 --repeats 2

test: build
	ctest --preset $(PRESET) -j2

clean:
	rm -rf build
