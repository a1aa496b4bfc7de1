# What tools/llamacpp/setup.sh installs, pinned (sourced by setup.sh and
# the llamacpp wrapper). Changing a version changes the cache folder, so
# the next setup builds afresh; the sdist's sha256 is checked before it is
# unpacked.
LLAMA_CPP_PYTHON_VERSION=0.3.36
LLAMA_CPP_PYTHON_SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
LLAMACPP_HOME=${TIERKV_LLAMACPP_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/tierkv/llamacpp-$LLAMA_CPP_PYTHON_VERSION}
