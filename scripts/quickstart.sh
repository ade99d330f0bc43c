#!/usr/bin/env bash
# Quick start: installs what Tower needs, builds it, converts the Fashion-MNIST dataset shipped by Debian
# (package dataset-fashion-mnist) into train and test TFRecords, inspects the result, then runs the service
# on http://127.0.0.1:8080/ with its demo run training (Ctrl-C stops it; --no-serve stops before it).
# Output goes to ${TOWER_DATA:-./tower-data}.
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
serve=1
for arg in "$@"; do
  case "$arg" in
    --no-serve) serve=0 ;;
    *) echo "quickstart.sh: unknown option '$arg' (known: --no-serve)" >&2; exit 2 ;;
  esac
done
"$root/scripts/install-deps.sh"
cmake -S "$root" -B "$root/build" -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build "$root/build" -j "$(nproc)"
tower="$root/build/server/tower"
src=/usr/share/datasets/fashion-mnist
data="${TOWER_DATA:-$PWD/tower-data}"
out="$data/datasets/fashion-mnist"
mkdir -p "$out"
"$tower" convert --images "$src/train-images-idx3-ubyte.gz" --labels "$src/train-labels-idx1-ubyte.gz" \
  --test-images "$src/t10k-images-idx3-ubyte.gz" --test-labels "$src/t10k-labels-idx1-ubyte.gz" \
  --class-names "$root/examples/fashion_mnist_classes.txt" \
  -o "$out/train.tfrecord" --test-output "$out/test.tfrecord" --meta "$out/meta.json"
"$tower" inspect "$out/train.tfrecord" --limit 1
"$tower" inspect "$out/test.tfrecord" --limit 0
cat "$out/meta.json"
[ "$serve" = 1 ] || exit 0
echo "quickstart: serving http://127.0.0.1:8080/ (Ctrl-C stops; tensorboard --logdir $data/runs shows the runs)"
exec "$tower" serve --data "$data"
