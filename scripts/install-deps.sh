#!/usr/bin/env bash
# Installs everything Tower needs to build, run and test, on Debian 12 as root. Idempotent: a second run
# only checks. Used by the README's Quick start, by .ci/run and by docker/Dockerfile alike; the Docker
# stages run it on Ubuntu 24.04 (NVIDIA's CUDA 13 images have no Debian flavour), where a few runtime
# libraries have other names: an entry "a|b" installs the first of a, b that apt knows.
#
#   scripts/install-deps.sh            build + run dependencies (apt only)
#   scripts/install-deps.sh --test     also the test tools: clang/libFuzzer, cmocka, and a Python venv with
#                                      TensorFlow, TensorBoard, numpy, pytest, safetensors, requests,
#                                      selenium; curl, strace, wrk, GNU time (the benchmarks' peak RSS) and
#                                      headless Chromium for the server tests,
#                                      docker-compose (checks docker/compose.yaml), lcov (scripts/coverage.sh)
#   scripts/install-deps.sh --runtime  instead, only what a built `tower` needs to run: its shared
#                                      libraries, Chart.js, Fashion-MNIST and curl (the health check); the
#                                      Docker image's runtime stage. Not with --test
#   scripts/install-deps.sh --list     with the options above: print the apt packages they name, one a
#                                      line, as this system calls them; install nothing
#
# The Python venv lives at $TOWER_VENV (default /opt/tower-venv) so that it survives fresh checkouts.
set -euo pipefail

want_test=0 want_runtime=0 want_list=0
for arg in "$@"; do
  case "$arg" in
    --test) want_test=1 ;;
    --runtime) want_runtime=1 ;;
    --list) want_list=1 ;;
    *) echo "install-deps.sh: unknown option '$arg' (known: --test, --runtime, --list)" >&2; exit 2 ;;
  esac
done
if [ "$want_test" = 1 ] && [ "$want_runtime" = 1 ]; then
  echo "install-deps.sh: --runtime installs run-time libraries only; it cannot be combined with --test" >&2
  exit 2
fi

apt_build=(build-essential cmake pkg-config ca-certificates
  zlib1g-dev libisal-dev libprotobuf-c-dev protobuf-c-compiler libjansson-dev libmicrohttpd-dev
  libopenblas-dev libsqlite3-dev libcurl4-openssl-dev libjs-chart.js dataset-fashion-mnist
  libpng-dev 'libjpeg62-turbo-dev|libjpeg-turbo8-dev' libdnnl-dev libarchive-dev libswscale-dev
  libopenmpi-dev openmpi-bin) # Open MPI: optional for the build (world/world.c), wanted for mpirun
apt_test=(clang libclang-rt-dev libcmocka-dev python3 python3-venv python3-pip
  curl strace chromium chromium-driver wrk time docker-compose lcov)
# What `tower` loads at run time (the shared libraries of the -dev packages above, ldd build/server/tower),
# the files it serves or registers, and curl for the Docker HEALTHCHECK. Debian 12 | Ubuntu 24.04 names.
apt_run=(zlib1g libisal2 libprotobuf-c1 libjansson4 'libmicrohttpd12t64|libmicrohttpd12'
  libopenblas0-pthread libsqlite3-0 'libcurl4t64|libcurl4' libjs-chart.js dataset-fashion-mnist curl
  'libpng16-16t64|libpng16-16' 'libjpeg62-turbo|libjpeg-turbo8' 'libdnnl2|libdnnl3'
  'libarchive13t64|libarchive13' 'libswscale7|libswscale6'
  openmpi-bin) # mpirun and libmpi (world/world.c)

if [ "$want_runtime" = 1 ]; then
  packages=("${apt_run[@]}")
else
  packages=("${apt_build[@]}")
  [ "$want_test" = 1 ] && packages+=("${apt_test[@]}")
fi

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
# pick ENTRY: the installed alternative of "a|b", else the first one apt has a candidate for, else a.
pick() {
  local alts p
  IFS='|' read -r -a alts <<<"$1"
  for p in "${alts[@]}"; do installed "$p" && { echo "$p"; return; }; done
  for p in "${alts[@]}"; do
    apt-cache policy "$p" 2>/dev/null | grep -q 'Candidate: [^(]' && { echo "$p"; return; }
  done
  echo "${alts[0]}"
}

if [ "$want_list" = 1 ]; then
  for e in "${packages[@]}"; do pick "$e"; done
  exit 0
fi

missing=()
for e in "${packages[@]}"; do
  have=0
  IFS='|' read -r -a alts <<<"$e"
  for p in "${alts[@]}"; do installed "$p" && have=1 && break; done
  [ "$have" = 1 ] || missing+=("$e")
done
if [ "${#missing[@]}" -gt 0 ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  names=()
  for e in "${missing[@]}"; do names+=("$(pick "$e")"); done
  echo "install-deps: apt installing ${names[*]}"
  apt-get install -y -qq --no-install-recommends "${names[@]}" >/dev/null
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
