#!/usr/bin/env bash
# Installs what the training tool needs, from Debian: PyTorch 1.13,
# SentencePiece's Python module, the fortunes text, and OpenBLAS (Debian's
# torch calls the system libblas.so.3: without OpenBLAS that is the reference
# BLAS, measured 3 against 108 GFLOP/s on 2 cores, a training step 83 s against 6.4).
set -euo pipefail
pkgs="python3-torch python3-sentencepiece python3-numpy fortunes libopenblas0-pthread"
missing=$(for p in $pkgs; do dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"; done)
if [ -n "$missing" ]; then
  SUDO=$([ "$(id -u)" = 0 ] || echo sudo)
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq $missing
fi
/usr/bin/python3 -c "import torch, sentencepiece; print('torch', torch.__version__)"
