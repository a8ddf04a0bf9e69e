# Thin wrapper over CMake. `make` builds the release tool at build/fai.
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all build test test-aarch64 demo install sanitize tsan coverage fuzz format format-check clean

all: build

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

# the tests' Python with numpy: the system's, or a virtual environment made under $(BUILD) once
test: build
	bash tests/python_env.sh $(BUILD)
	cd $(BUILD) && ctest --output-on-failure -j 1

# AArch64 cross build (gcc-aarch64-linux-gnu, libc6-dev-arm64-cross) whose tests run under qemu
# user emulation (qemu-user); the random sweep is scaled down, as emulation is slow
BUILD_AARCH64 ?= build-aarch64
AARCH64_SWEEP_CASES ?= 150

test-aarch64:
	cmake -S . -B $(BUILD_AARCH64) -DCMAKE_BUILD_TYPE=Release \
		-DCMAKE_TOOLCHAIN_FILE=$(CURDIR)/cmake/toolchain-aarch64.cmake $(CMAKE_FLAGS) >/dev/null
	cmake --build $(BUILD_AARCH64) -j $(JOBS)
	cd $(BUILD_AARCH64) && FAI_SWEEP_CASES=$${FAI_SWEEP_CASES:-$(AARCH64_SWEEP_CASES)} \
		ctest --output-on-failure -j $(JOBS)

demo: build
	./$(BUILD)/fai demo

# the libraries, fai.h, the tool, fai.pc and the CMake package under PREFIX (DESTDIR stages)
PREFIX ?= /usr/local

install: build
	cmake --install $(BUILD) --prefix $(PREFIX)

sanitize:
	$(MAKE) test BUILD=build-sanitize CMAKE_FLAGS="-DCMAKE_BUILD_TYPE=Debug -DFAI_SANITIZE=ON"

# ThreadSanitizer: the unit tests once (threads and pools are the same code whichever micro-kernel
# table runs, so the per-table reruns are left out), the tool tests and the MPI unit tests (the
# fai-mpi tool test runs the same library calls from processes, too slowly under TSan). setarch
# -R turns off address randomisation, which breaks TSan's memory layout on kernels with more ASLR
# bits.
TSAN_SETARCH = $(shell setarch $$(uname -m) -R true 2>/dev/null && echo setarch $$(uname -m) -R)

tsan:
	cmake -S . -B build-tsan -DCMAKE_BUILD_TYPE=Debug -DFAI_TSAN=ON $(CMAKE_FLAGS) >/dev/null
	cmake --build build-tsan -j $(JOBS)
	cd build-tsan && $(TSAN_SETARCH) ctest --output-on-failure -j 1 -E '^unit_|^mpi_run$$'

# Line coverage of src/ by the test suite (gcc --coverage -O0; the random sweep scaled down):
# ends with the line "coverage: NN.N% of lines in src/" and fails below COVERAGE_MIN. Failing
# tests are reported but do not stop the report (make test is the gate for them).
COVERAGE_MIN ?= 90

coverage:
	cmake -S . -B build-coverage -DCMAKE_BUILD_TYPE=Debug -DFAI_COVERAGE=ON $(CMAKE_FLAGS) >/dev/null
	cmake --build build-coverage -j $(JOBS)
	find build-coverage -name '*.gcda' -delete
	cd build-coverage && FAI_SWEEP_CASES=$${FAI_SWEEP_CASES:-150} ctest -j 1 \
		|| echo "note: some tests failed; the figure below counts the lines they ran"
	python3 tests/coverage_report.py --min $(COVERAGE_MIN) build-coverage .

# libFuzzer harnesses (fuzz/) built with clang, ASan and UBSan; each runs FUZZ_SECONDS from the
# seed corpus after replaying fuzz/regressions/. Fails on any finding (inputs in
# build-fuzz/fuzz-work/artifacts/).
FUZZ_CC ?= clang-14
FUZZ_SECONDS ?= 60

fuzz:
	cmake -S . -B build-fuzz -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_C_COMPILER=$(FUZZ_CC) \
		-DFAI_FUZZ=ON $(CMAKE_FLAGS) >/dev/null
	cmake --build build-fuzz -j $(JOBS) --target fuzz_plan fuzz_run fuzz_npy fuzz_cache fuzz_merge
	sh fuzz/run.sh build-fuzz $(FUZZ_SECONDS)

format:
	clang-format -i include/*.h src/*.c src/*.h src/*/*.c src/*/*.h src/*/*/*.c tools/*/*.c tools/*/*.h tests/*.c tests/*.h tests/mpi/*.c tests/mpi/*.h ref/*.c ref/*.h examples/*.c bench/*.c tests/consumer/*.c fuzz/*.c fuzz/*.h

format-check:
	clang-format --dry-run --Werror include/*.h src/*.c src/*.h src/*/*.c src/*/*.h src/*/*/*.c tools/*/*.c tools/*/*.h tests/*.c tests/*.h tests/mpi/*.c tests/mpi/*.h ref/*.c ref/*.h examples/*.c bench/*.c tests/consumer/*.c fuzz/*.c fuzz/*.h

clean:
	rm -rf build build-sanitize build-tsan build-coverage build-aarch64 build-fuzz
