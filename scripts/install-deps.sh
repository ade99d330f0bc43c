#!/usr/bin/env bash
# Installs everything Tower needs to build, run and test, on Debian 12 as root. Idempotent: a second run
# only checks. Used by the README's Quick start, by .ci/run and by docker/Dockerfile alike.
#
#   scripts/install-deps.sh            build + run dependencies (apt only)
#   scripts/install-deps.sh --test     also the test tools: clang/libFuzzer, cmocka, and a Python venv with
#                                      TensorFlow, TensorBoard, numpy, pytest, safetensors, requests,
#                                      selenium; curl, strace, wrk and headless Chromium for the server tests
#
# The Python venv lives at $TOWER_VENV (default /opt/tower-venv) so that it survives fresh checkouts.
set -euo pipefail

want_test=0
for arg in "$@"; do
  case "$arg" in
    --test) want_test=1 ;;
    *) echo "install-deps.sh: unknown option '$arg' (known: --test)" >&2; exit 2 ;;
  esac
done

apt_runtime=(build-essential cmake pkg-config ca-certificates
  zlib1g-dev libisal-dev libprotobuf-c-dev protobuf-c-compiler libjansson-dev libmicrohttpd-dev
  libopenblas-dev libsqlite3-dev libjs-chart.js dataset-fashion-mnist)
apt_test=(clang libclang-rt-dev libcmocka-dev python3 python3-venv python3-pip
  curl strace chromium chromium-driver wrk)

packages=("${apt_runtime[@]}")
[ "$want_test" = 1 ] && packages+=("${apt_test[@]}")

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || missing+=("$p")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "install-deps: apt installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi

if [ "$want_test" = 1 ]; then
  venv="${TOWER_VENV:-/opt/tower-venv}"
  if [ ! -x "$venv/bin/python" ]; then
    echo "install-deps: creating Python venv at $venv"
    python3 -m venv "$venv"
  fi
  here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check -r "$here/requirements-test.txt"
fi
echo "install-deps: ok"
