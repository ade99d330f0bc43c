#!/usr/bin/env bash
# Packs what tests/gpu/run.sh needs on a GPU machine that has CUDA's runtime but none of Tower's build
# dependencies and no network (a bare image with the driver, cuBLAS and NCCL, as the lent device
# machines are): a CUDA build made here, and the shared libraries it loads, in one archive.
#
#   scripts/gpu-kit.sh [BUILD_DIR [ARCHIVE]]   (defaults build-gpu, gpu-kit/tower-gpu-kit.tar.xz)
#
# A BUILD_DIR already configured is built as it is (it must have found CUDA); a new one is configured as a
# Release build with -DTW_CUDA=ON. XZ_OPT=-0 packs faster, larger.
#
# The archive holds bin/ (tower, tower-cuda.so, the gpu test programs) and lib/ (every library they load
# as resolved on this machine, except glibc's, the C++ runtime — the other machine's newer ones serve —
# and cuBLAS and NCCL, hundreds of MB, which that machine has). Built on Debian 12 (glibc 2.36), it runs
# on any x86-64 Linux with that glibc or newer; about 32 MB. gpu-kit/ is ignored by git: carry it
# (the device tool's `carry: ["gpu-kit"]`); tests/gpu/run.sh uses it when it is there.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
build="${1:-$root/build-gpu}"
archive="${2:-$root/gpu-kit/tower-gpu-kit.tar.xz}"
stage="$(mktemp -d)"
trap 'rm -rf "$stage"' EXIT

[ -f "$build/CMakeCache.txt" ] || cmake -S "$root" -B "$build" -DCMAKE_BUILD_TYPE=Release -DTW_CUDA=ON > /dev/null
cmake --build "$build" -j "$(nproc)" --target tower tower-cuda test_cuda_parity test_cuda_sticky \
  test_train_parity test_graph_parity test_nccl_world > /dev/null

kit="$stage/kit"
mkdir -p "$kit/bin" "$kit/lib"
cp "$build/server/tower" "$build/server/tower-cuda.so" "$build"/tests/gpu/test_* "$kit/bin/"
# The machine's own: glibc's libraries, the C++ runtime (libstdc++, libgcc_s: cuBLAS and NCCL may need its
# newer one), the driver, cuBLAS and NCCL. OpenMP's libgomp travels: the image may have none.
skip='/(ld-linux-x86-64|libc|libm|libdl|libpthread|librt|libresolv|libutil|libstdc\+\+|libgcc_s|libcuda|libcublas|libcublasLt|libnccl)\.so'
for f in "$kit"/bin/*; do ldd "$f"; done | awk '$2 == "=>" && $3 ~ /^\// {print $3}' | sort -u |
  grep -vE "$skip" | while read -r lib; do cp -L "$lib" "$kit/lib/"; done
git -C "$root" describe --always --dirty --abbrev=40 > "$kit/COMMIT"
mkdir -p "$(dirname "$archive")"
tar -c -I "xz -T0" -f "$archive.part" -C "$stage" kit
mv "$archive.part" "$archive"
echo "$archive: $(du -h "$archive" | cut -f1), $(ls "$kit/lib" | wc -l) libraries, commit $(cut -c1-12 "$kit/COMMIT")"
