# Thin wrapper over CMake. `make` builds the release tool at build/fai.
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all build test test-aarch64 demo install sanitize tsan coverage format format-check clean

all: build

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

test: build
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

tsan:
	$(MAKE) test BUILD=build-tsan CMAKE_FLAGS="-DCMAKE_BUILD_TYPE=Debug -DFAI_TSAN=ON"

format:
	clang-format -i include/*.h src/*.c src/*.h src/*/*.c src/*/*.h src/*/*/*.c tools/*.c tools/*.h tests/*.c tests/*.h tests/oracle/*.c tests/oracle/*.h examples/*.c tests/consumer/*.c

format-check:
	clang-format --dry-run --Werror include/*.h src/*.c src/*.h src/*/*.c src/*/*.h src/*/*/*.c tools/*.c tools/*.h tests/*.c tests/*.h tests/oracle/*.c tests/oracle/*.h examples/*.c tests/consumer/*.c

clean:
	rm -rf build build-sanitize build-tsan build-coverage build-aarch64
