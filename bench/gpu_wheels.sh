#!/bin/sh
# Fetch, on a machine with network, the cp312 wheels that the GPU machine's image lacks (it has
# Python 3.12, CuPy, NCCL, numpy and mpi4py, but no MPI runtime and no cffi; it cannot reach any
# index): the embedded MPI pinned in pyproject.toml, cffi and the build tools. ~11 MB. Then:
#   device run: bash bench/gpu_check.sh     with carry: ["bench/gpu_wheels"]
set -eu
dest=${1:-bench/gpu_wheels}
pyver=${2:-3.12}  # the GPU machine's Python (another version: wheels for a dry run elsewhere)
pins=$(python3 -c 'import tomllib; print(" ".join(tomllib.load(open("pyproject.toml", "rb"))["project"]["optional-dependencies"]["embedded"]))')
mkdir -p "$dest"
# shellcheck disable=SC2086
python3 -m pip download -q -d "$dest" --only-binary=:all: --python-version "$pyver" --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 \
  $pins "cffi>=1.15" "meson-python>=0.15" "meson>=1.1" ninja "pytest>=8" "pytest-timeout>=2.2"
ls "$dest"
