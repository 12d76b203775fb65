# The two commands of the README, over CMake:
#   make test   install what is missing, configure, build, run every test
#               (GPU tests skip with a reason on a machine without a GPU)
#   make tune   install what is missing, configure, build, tune FLCE for the
#               local GPU into detfuse.db (fails clearly without a GPU). Each
#               call is bounded by TUNE_BUDGET and resumes the unfinished run,
#               so a preset longer than the budget completes over several calls.
#   make python build libdetfuse_c.so and pip-install the Python package (python/)
BUILD ?= build
BUILD_TYPE ?= Release
JOBS ?= $(shell nproc)
CUDA_HOME ?= /usr/local/cuda
export PATH := $(PATH):$(CUDA_HOME)/bin
CMAKE_ARGS ?=
TUNE_BUDGET ?= 7m
TUNE_PRESET ?= llm-heads
# Engines tuned by `make tune`: on Hopper (H100/H200) the wgmma engine, its hybrid
# with cuBLASLt (wgmmalt: wgmma logits, cuBLASLt dX and dW) and the
# cuBLASLt reference (the mma.sync engine is slower there on every measured
# shape, and tuning it too would take a third call for the preset); on other
# GPUs use TUNE_ENGINES="mma cublaslt".
TUNE_ENGINES ?= wgmma wgmmalt cublaslt
# `make python`: builds libdetfuse_c.so, copies it into the package and
# installs python/ for PYTHON through python/install.py, offline: with pip
# --no-build-isolation where setuptools can build wheels, else by a plain copy
# into site-packages with a .dist-info (DETFUSE_INSTALL=pip|copy forces one).
# PIP_ARGS are passed on (--user and --target in both modes).
PYTHON ?= python3
PIP_ARGS ?=

.PHONY: all deps configure build test tune python clean

all: build

deps:
	@bash cmake/install-deps.sh

configure: deps
	@cmake -S . -B $(BUILD) -DCMAKE_BUILD_TYPE=$(BUILD_TYPE) $(CMAKE_ARGS) >/dev/null

build: configure
	@cmake --build $(BUILD) -j $(JOBS)

test: build
	@cd $(BUILD) && ctest --output-on-failure -j $(JOBS)

tune: build
	@$(BUILD)/detfuse tune --kernel flce --preset $(TUNE_PRESET) --db detfuse.db --budget $(TUNE_BUDGET) --resume \
	  $(foreach e,$(TUNE_ENGINES),--engine $(e))

python: configure
	@cmake --build $(BUILD) -j $(JOBS) --target detfuse_c
	@cp $(BUILD)/capi/libdetfuse_c.so python/detfuse/libdetfuse_c.so
	@$(PYTHON) python/install.py $(PIP_ARGS)
	@cd /tmp && $(PYTHON) -c "import detfuse; print('detfuse', detfuse.__version__, 'C ABI', detfuse.abi_version(), 'from', detfuse.library_path())"

clean:
	rm -rf $(BUILD)
