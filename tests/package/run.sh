#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, then configures, builds and runs a consumer
# project that uses find_package(halfway).
set -euo pipefail
build="$1"; src="$2"; scratch="$3"
rm -rf "$scratch"
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
cmake -S "$src" -B "$scratch/consumer" -DCMAKE_PREFIX_PATH="$scratch/prefix" >/dev/null
cmake --build "$scratch/consumer" >/dev/null
"$scratch/consumer/consumer"
