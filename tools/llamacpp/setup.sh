#!/usr/bin/env bash
# llama.cpp beside tierkv, from PyPI (pins.sh): downloads llama-cpp-python's
# source distribution (sha256 checked), builds the llama.cpp it vendors, and
# installs the binding bound to that build, with the official openai client
# and gguf, into a virtual environment the project owns. Everything lives in
# one folder per version (pins.sh: ~/.cache/tierkv/llamacpp-VERSION, or
# $TIERKV_LLAMACPP_HOME), so a machine builds it once; a second run finds it
# ready. Scripts and tests reach it through tools/llamacpp/llamacpp.
#
#   setup.sh            the oracle: libllama built portable (AVX2, FMA, F16C;
#                       no native flags), so that it computes the same on
#                       every CPU the tests run on; ~5 minutes on 2 cores
#   setup.sh --native   also llama.cpp at its best for benchmarks
#                       (GGML_NATIVE=ON) with llama-bench, llama-server and
#                       llama-perplexity; ~15 more minutes
#
# The binding compiles nothing itself (LLAMA_BUILD=OFF): it loads the
# library named by LLAMA_CPP_LIB_PATH, which the wrapper sets. Python: the
# first python3 on PATH that can make a venv (Debian's python3-venv is
# installed when none can).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
. "$here/pins.sh"
native=0
case "${1:-}" in
  "") ;;
  --native) native=1 ;;
  *) echo "usage: setup.sh [--native]" >&2; exit 2 ;;
esac
home=$LLAMACPP_HOME
mkdir -p "$home"
exec 9>"$home/setup.lock"
flock 9   # two setups at once (make test -j, a second shell) take turns
if [ -f "$home/oracle.ready" ] && { [ $native = 0 ] || [ -f "$home/native.ready" ]; }; then
  echo "llama.cpp $(cat "$home/oracle.ready") ready in $home"
  exit 0
fi
SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
log() { echo "setup.sh: $*"; }
fail() { echo "setup.sh: $1 failed; the end of $2:" >&2; tail -30 "$2" >&2; exit 1; }
for p in cmake ninja-build g++ libgomp1; do
  dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' || missing="${missing:-} $p"
done
if [ -n "${missing:-}" ]; then
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi

# The virtual environment: usable only with its pip (a venv made without
# ensurepip, or cut short, is made again).
if ! "$home/venv/bin/python" -m pip --version >/dev/null 2>&1; then
  log "virtual environment in $home/venv"
  rm -rf "$home/venv"
  if ! python3 -m venv "$home/venv" >"$home/venv.log" 2>&1; then
    rm -rf "$home/venv"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq python3-venv
    if ! /usr/bin/python3 -m venv "$home/venv" >"$home/venv.log" 2>&1; then
      rm -rf "$home/venv"
      fail "python3 -m venv" "$home/venv.log"
    fi
  fi
fi
pip=("$home/venv/bin/python" -m pip --disable-pip-version-check -q)

# The source distribution, checked, unpacked once.
src="$home/src"
if [ ! -f "$src/.unpacked" ]; then
  log "downloading llama-cpp-python $LLAMA_CPP_PYTHON_VERSION's source distribution from PyPI"
  rm -rf "$home/dl" "$src"
  mkdir -p "$home/dl"
  "${pip[@]}" download --no-deps --no-binary :all: "llama-cpp-python==$LLAMA_CPP_PYTHON_VERSION" -d "$home/dl" \
    >"$home/download.log" 2>&1 || fail "pip download (is PyPI reachable?)" "$home/download.log"
  sdist=$(ls "$home"/dl/llama_cpp_python-"$LLAMA_CPP_PYTHON_VERSION".tar.gz)
  got=$(sha256sum "$sdist" | cut -d' ' -f1)
  if [ "$got" != "$LLAMA_CPP_PYTHON_SHA256" ]; then
    echo "setup.sh: $sdist has sha256 $got, pins.sh expects $LLAMA_CPP_PYTHON_SHA256: refused" >&2
    rm -f "$sdist"
    exit 1
  fi
  mkdir -p "$src.tmp"
  tar xzf "$sdist" -C "$src.tmp" --strip-components=1
  mv "$src.tmp" "$src"
  touch "$src/.unpacked"
fi

# build DIR TARGETS... -- CMAKE_ARGS...: llama.cpp's shared libraries (and
# tools) into DIR (libraries and tools in DIR/bin).
build() {
  local dir=$1; shift
  local targets=()
  while [ "$1" != -- ]; do targets+=("$1"); shift; done
  shift
  cmake -S "$src/vendor/llama.cpp" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DBUILD_SHARED_LIBS=ON \
    -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF "$@" \
    >"$dir.cmake.log" 2>&1 || fail cmake "$dir.cmake.log"
  cmake --build "$dir" --target "${targets[@]}" -j"$(nproc)" >"$dir.build.log" 2>&1 || fail "the build" "$dir.build.log"
}

if [ ! -f "$home/oracle.ready" ]; then
  log "building llama.cpp (portable AVX2, the oracle's) in $home/oracle"
  build "$home/oracle" llama -- -DGGML_NATIVE=OFF -DGGML_AVX=ON -DGGML_AVX2=ON -DGGML_FMA=ON -DGGML_F16C=ON \
    -DGGML_BMI2=ON -DLLAMA_BUILD_TOOLS=OFF -DLLAMA_BUILD_SERVER=OFF
  log "installing llama-cpp-python (bound to that build), openai and gguf into $home/venv"
  "${pip[@]}" install -r "$here/requirements.txt" >"$home/pip.log" 2>&1 || fail "pip install" "$home/pip.log"
  CMAKE_ARGS="-DLLAMA_BUILD=OFF -DLLAVA_BUILD=OFF" "${pip[@]}" install --no-deps "$src" >>"$home/pip.log" 2>&1 ||
    fail "pip install llama-cpp-python" "$home/pip.log"
  LLAMA_CPP_LIB_PATH="$home/oracle/bin" "$home/venv/bin/python" -c \
    "import llama_cpp, openai, gguf; print(llama_cpp.__version__)" >"$home/oracle.ready.tmp" 2>"$home/check.log" ||
    fail "importing llama_cpp" "$home/check.log"
  mv "$home/oracle.ready.tmp" "$home/oracle.ready"
fi
if [ $native = 1 ] && [ ! -f "$home/native.ready" ]; then
  log "building llama.cpp natively (GGML_NATIVE=ON) with llama-bench, llama-server, llama-perplexity in $home/native"
  build "$home/native" llama llama-bench llama-server llama-perplexity -- -DGGML_NATIVE=ON \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON
  cp "$home/oracle.ready" "$home/native.ready"
fi
echo "llama.cpp $(cat "$home/oracle.ready") ready in $home"
