#!/usr/bin/env bash
# Installs the build tree into a scratch prefix, then configures, builds and runs a consumer
# project that uses find_package(halfway). A fourth argument, when given, is the consumer's
# CMAKE_CXX_FLAGS (a sanitizer build passes its -fsanitize flags).
set -euo pipefail
build="$1"; src="$2"; scratch="$3"; flags="${4:-}"
rm -rf "$scratch"
cmake --install "$build" --prefix "$scratch/prefix" >/dev/null
# The thread pool is internal to the build (lib/internal/), not part of the installed API.
if [ -e "$scratch/prefix/include/halfway/thread_pool.hpp" ]; then
  echo "installed_package: halfway/thread_pool.hpp was installed" >&2
  exit 1
fi
cmake -S "$src" -B "$scratch/consumer" -DCMAKE_PREFIX_PATH="$scratch/prefix" \
  ${flags:+"-DCMAKE_CXX_FLAGS=$flags"} >/dev/null
cmake --build "$scratch/consumer" >/dev/null
"$scratch/consumer/consumer"
