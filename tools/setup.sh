#!/usr/bin/env bash
# Installs the Debian packages weft needs to build and test (Debian 12), and ONNX Runtime's CPU
# build from npm into tools/ort/node_modules (the reference of the ONNX import's tests and bench:
# tools/ort/run.js). Idempotent: when everything is installed it only checks, in well under a
# second.
#
#   tools/setup.sh && bazel test //...
#   tools/setup.sh --bench        # also PyTorch and OpenBLAS, the peers in bench/
#   tools/setup.sh --fuzz         # also clang and libFuzzer, for --config=fuzz (fuzz/)
#   tools/setup.sh --lint         # also clang-format, for tools/check_format.sh
set -euo pipefail

packages=(
  bazel-bootstrap      # Bazel 4.2.3, builds offline with the stand-ins in tools/bazel/
  bazel-platforms
  bazel-rules-java
  g++
  libdnnl-dev          # oneDNN: CPU operators
  libtbb-dev           # oneTBB: parallel loops; the peer in bench/engine_bench
  libgtest-dev         # GoogleTest
  nlohmann-json3-dev   # JSON: graphs, safetensors headers, traces in tests
  zlib1g-dev           # zlib: gzip-compressed data files (MNIST and Fashion-MNIST as shipped)
  openmpi-bin          # mpirun: launches data-parallel ranks (distributed/, tests/dist_*)
  libopenmpi-dev       # MPI headers and libraries: CPU collectives, NCCL's bootstrap
  libprotobuf-dev      # protobuf: reading ONNX files (weft/onnx.h)
  libonnx-dev          # ONNX's schema compiled for protobuf (onnx-ml.pb.h, libonnx_proto)
  python3-torchvision  # PyTorch 1.13 and torchvision: the ONNX import tests' exports
  python3-onnx         # onnx 1.12: tests/onnx/export_models.py's hand-made models
)

for option in "$@"; do
  case "$option" in
    --bench) packages+=(python3-torch libopenblas0-openmp) ;;
    --fuzz) packages+=(clang-14 libfuzzer-14-dev) ;;  # Debian 12's clang (tools/bazel/clang.bzl)
    --lint) packages+=(clang-format) ;;                # Debian 12's clang-format 14
    *) echo "setup: unknown option '$option' (expected --bench, --fuzz or --lint)" >&2; exit 2 ;;
  esac
done

# The node runtime and npm come with the image's Node.js (or Debian's npm package).
command -v npm >/dev/null 2>&1 || packages+=(npm)

install_packages() {
  missing=()
  for p in "${packages[@]}"; do
    if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
      missing+=("$p")
    fi
  done
  if [ ${#missing[@]} -eq 0 ]; then
    echo "setup: all ${#packages[@]} packages are installed"
    return 0
  fi

  echo "setup: installing ${missing[*]}"
  sudo_cmd=()
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then
      sudo_cmd=(sudo)
    else
      echo "setup: cannot install ${missing[*]}: not root and no sudo; install them as root" >&2
      return 1
    fi
  fi
  export DEBIAN_FRONTEND=noninteractive
  if ! "${sudo_cmd[@]}" apt-get install -y "${missing[@]}"; then
    echo "setup: apt-get install failed; refreshing the package lists and retrying" >&2
    if ! { "${sudo_cmd[@]}" apt-get update && "${sudo_cmd[@]}" apt-get install -y "${missing[@]}"; }; then
      echo "setup: cannot install ${missing[*]}: is Debian's package archive reachable?" >&2
      return 1
    fi
  fi
  echo "setup: packages installed"
}

# ONNX Runtime 1.30's CPU build (tools/ort/package.json), without its install script, which
# fetches GPU extras and fails offline; the CPU library ships in the package.
install_ort() {
  local ort=tools/ort/node_modules/onnxruntime-node/package.json
  if [ -f "$ort" ] && grep -q '"version": "1.30.0"' "$ort"; then
    echo "setup: ONNX Runtime 1.30.0 (onnxruntime-node) is installed in tools/ort"
    return 0
  fi
  echo "setup: installing ONNX Runtime 1.30.0 (npm's onnxruntime-node) into tools/ort"
  if ! npm install --prefix tools/ort --ignore-scripts --no-audit --no-fund >/dev/null; then
    echo "setup: cannot install onnxruntime-node: is npm's registry reachable?" >&2
    return 1
  fi
}

cd "$(dirname "$0")/.."
install_packages
install_ort
