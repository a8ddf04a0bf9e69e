# Thin wrapper over CMake. `make` builds the release tool at build/fai.
BUILD ?= build
JOBS ?= $(shell nproc 2>/dev/null || echo 2)
CMAKE_FLAGS ?=

.PHONY: all build test demo sanitize tsan coverage format format-check clean

all: build

build:
	cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=Release $(CMAKE_FLAGS) >/dev/null
	cmake --build $(BUILD) -j $(JOBS)

test: build
	cd $(BUILD) && ctest --output-on-failure -j 1

demo: build
	./$(BUILD)/fai demo

sanitize:
	$(MAKE) test BUILD=build-sanitize CMAKE_FLAGS="-DCMAKE_BUILD_TYPE=Debug -DFAI_SANITIZE=ON"

tsan:
	$(MAKE) test BUILD=build-tsan CMAKE_FLAGS="-DCMAKE_BUILD_TYPE=Debug -DFAI_TSAN=ON"

format:
	clang-format -i include/*.h src/*.c src/*.h src/*/*.c src/*/*.h src/*/*/*.c tools/*.c tools/*.h tests/*.c tests/*.h tests/oracle/*.c tests/oracle/*.h

format-check:
	clang-format --dry-run --Werror include/*.h src/*.c src/*.h src/*/*.c src/*/*.h src/*/*/*.c tools/*.c tools/*.h tests/*.c tests/*.h tests/oracle/*.c tests/oracle/*.h

clean:
	rm -rf build build-sanitize build-tsan build-coverage
