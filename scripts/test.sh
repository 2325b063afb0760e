#!/bin/bash
# The whole test suite (what .ci/run runs):
#   1. build, ctest and pytest (CLI, MPI jobs under Open MPI and MPICH, bindings);
#   2. the same under AddressSanitizer + UndefinedBehaviorSanitizer, and the
#      threaded unit tests (library with its progress thread, image writer,
#      store, index, redundancy) under ThreadSanitizer;
#   3. a Release (-O3) build, whose warnings are errors as everywhere;
#   4. the libFuzzer target over the image reader and manifest parser, 60 s.
# STASIS_TEST_QUICK=1 skips 2 to 4.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
scripts/deps.sh

run_suite() {  # build dir, then more test directories
	local dir=$1
	shift
	echo "== ctest ($dir)"
	ctest --test-dir "$dir" --output-on-failure
	echo "== pytest ($dir)"
	STASIS_BIN="$root/$dir/src/cli/stasis" STASIS_BUILD="$root/$dir" \
		/usr/bin/python3 -m pytest -q -p no:cacheprovider tests/cli tests/mpi \
		tests/proc tests/split "$@" \
		$( [ -d tests/bindings ] && echo tests/bindings )
}

echo "== model check of the MPI checkpoint protocol (spin)"; model/check.sh
echo "== build"
scripts/build.sh build -DCMAKE_BUILD_TYPE=RelWithDebInfo
# the simulated cluster's tests once, on the normal build: the processes
# they add (launchers, lower halves) are never instrumented anyway
run_suite build tests/cluster

if [ "${STASIS_TEST_QUICK:-0}" = 1 ]; then
	exit 0
fi

echo "== build with ASan+UBSan"
scripts/build.sh build-asan -DCMAKE_BUILD_TYPE=Debug -DSTASIS_SANITIZE=ON
export ASAN_OPTIONS=abort_on_error=0:detect_leaks=1:halt_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
run_suite build-asan

echo "== build with -O3 (Release): its warnings are errors too"
scripts/build.sh build-release -DCMAKE_BUILD_TYPE=Release

echo "== build with ThreadSanitizer; threaded unit tests"
scripts/build.sh build-tsan -DCMAKE_BUILD_TYPE=Debug -DCMAKE_C_FLAGS=-fsanitize=thread \
	-DCMAKE_EXE_LINKER_FLAGS=-fsanitize=thread
TSAN_OPTIONS=halt_on_error=1 ctest --test-dir build-tsan --output-on-failure \
	-R 'unit\.(api|image|store|index|redundancy)'

echo "== fuzz image reader and manifest parser, 60 s"
CC=clang-14 scripts/build.sh build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DSTASIS_FUZZ=ON
rm -rf build-fuzz/corpus && mkdir -p build-fuzz/corpus
build-fuzz/tests/fuzz/fuzz_image -max_total_time=60 -print_final_stats=1 \
	build-fuzz/corpus tests/fuzz/corpus 2>&1 | tail -n 15
echo "== all tests passed"
