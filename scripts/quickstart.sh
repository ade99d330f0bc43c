#!/usr/bin/env bash
# Quick start: installs what Tower needs, builds it, converts the Fashion-MNIST dataset shipped by Debian
# (package dataset-fashion-mnist) into train and test TFRecords, and inspects the result.
# Output goes to ${TOWER_DATA:-./tower-data}.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$root/build" -j "$(nproc)"
tower="$root/build/server/tower"
src=/usr/share/datasets/fashion-mnist
out="${TOWER_DATA:-$PWD/tower-data}/datasets/fashion-mnist"
mkdir -p "$out"
"$tower" convert --images "$src/train-images-idx3-ubyte.gz" --labels "$src/train-labels-idx1-ubyte.gz" \
  --test-images "$src/t10k-images-idx3-ubyte.gz" --test-labels "$src/t10k-labels-idx1-ubyte.gz" \
  -o "$out/train.tfrecord" --test-output "$out/test.tfrecord" --meta "$out/meta.json"
"$tower" inspect "$out/train.tfrecord" --limit 1
"$tower" inspect "$out/test.tfrecord" --limit 0
cat "$out/meta.json"
