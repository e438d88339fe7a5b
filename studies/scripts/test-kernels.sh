#!/usr/bin/env bash
# Build, without a GPU, every kernel the GPU test files compile directly (layouts, tail, copy,
# reduction, faults, contract) into one cache, and pack it as .tkernels.txz for a device call to
# carry: `gpu-session.sh tests` unpacks it into $CUTSEARCH_TEST_KERNELS, so those files compile
# nothing there. xz, not gzip: the libraries share most of their code, and xz's window finds it
# (110 MB of kernels packed to 4 MB, against 31 MB). The keys hash the source and the toolchain, so
# a pack built from another tree or toolchain is only missed, never misused. Searches (loader,
# end-to-end, profile) keep their private caches.
#   studies/scripts/test-kernels.sh [TEST FILES...]
set -u
dir=${CUTSEARCH_TEST_KERNELS:-$(mktemp -d)}
mkdir -p "$dir"
[ $# -gt 0 ] || set -- tests/test_layouts_gpu.py tests/test_tail.py tests/test_copy.py tests/test_reduce.py \
  tests/test_faults_gpu.py tests/test_evaluator_contract.py
CUTSEARCH_TEST_KERNELS=$dir python3 -m pytest -q -p no:cacheprovider -m "nvcc and not gpu" "$@" || exit 1
# What the keys hash besides the source: gpu-session.sh compares it with the GPU machine's.
PYTHONPATH=$PWD${PYTHONPATH:+:$PYTHONPATH} python3 studies/scripts/toolchain_id.py > "$dir/toolchain.json" || exit 1
tar cJf .tkernels.txz -C "$dir" --exclude='.build-*' . && du -h .tkernels.txz
