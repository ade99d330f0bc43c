#!/usr/bin/env bash
# Accuracy benchmark (not a test): trains examples/fashion_mlp.json and examples/fashion_cnn.json on
# Fashion-MNIST (Debian's dataset-fashion-mnist, converted into tower-data/ as scripts/quickstart.sh
# does) and prints each run's final evaluation line. Goals: MLP >= 0.885 and CNN >= 0.916 test accuracy
# with EMA weights. Results go to BENCHMARKS.md by hand.
#
#   tests/bench/bench_accuracy.sh [mlp|cnn|all]    (default all; logs in tower-data/runs/)
set -euo pipefail
root="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
tower="$root/build/server/tower"
data="$root/tower-data/datasets/fashion-mnist"
src=/usr/share/datasets/fashion-mnist
if [ ! -f "$data/test.tfrecord" ]; then
  mkdir -p "$data"
  "$tower" convert --images "$src/train-images-idx3-ubyte.gz" --labels "$src/train-labels-idx1-ubyte.gz" \
    --test-images "$src/t10k-images-idx3-ubyte.gz" --test-labels "$src/t10k-labels-idx1-ubyte.gz" \
    -o "$data/train.tfrecord" --test-output "$data/test.tfrecord" --meta "$data/meta.json"
fi
case "${1:-all}" in
  all) models="mlp cnn" ;;
  mlp|cnn) models="$1" ;;
  *) echo "usage: $0 [mlp|cnn|all]" >&2; exit 2 ;;
esac
mkdir -p "$root/tower-data/runs"
for model in $models; do
  logdir="$root/tower-data/runs/bench-$model-$(date +%s)"
  start=$(date +%s)
  "$tower" train "$root/examples/fashion_$model.json" --logdir "$logdir" > "$logdir.jsonl"
  echo "fashion_$model: $(( $(date +%s) - start )) s, logdir $logdir"
  grep '"eval_accuracy"' "$logdir.jsonl" | tail -n 1
done
