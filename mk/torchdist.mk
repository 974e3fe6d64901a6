# torchdist.mk - the torch.distributed backend "chorus" (python/csrc/torchdist.cpp), a PyTorch
# C++ extension over libchorus.so, built against the torch that $(PYTHON) imports (Debian:
# python3-torch and libtorch-dev) into $(BUILD)/lib/_chorus_torchdist.so, beside libchorus.so,
# where chorus.torch.distributed finds it. The C++ standard, ABI and include directories are
# the ones that torch asks for (python/csrc/torch_flags.py: C++17, or C++20 for a torch whose
# headers require it). Without torch or its headers plain `make` skips it and says why. Its
# tests are tests/list/torchdist.list; its benchmark bench/torchdist.sh.
#
#   make torchdist      the extension (also part of plain `make`)
#   make check-torch2 [TORCH2_VERSION=2.15.0] [TORCH2_VENV=dir]
#                       the package on torch 2.x from PyPI, installed the documented way: a
#                       venv (default $(BUILD)/torch2-venv, kept between runs; TORCH2_VENV
#                       puts it elsewhere, outside the build tree that `make clean` removes)
#                       gets torch, numpy, pytest, tensorboard and pytorch-lightning from PyPI
#                       (the x86_64 wheel depends on CUDA's libraries: 5.5 GB, 433 s on the
#                       CI machine; pip's cache keeps downloads where the index allows), then
#                       `pip install ./python` builds the backend against that torch;
#                       init_process_group("chorus") without an import (the entry point),
#                       then every test of TORCH2_LISTS runs with the venv's Python
#                       ($TEST_PYTHON in the list lines), twice the timeouts, and the
#                       installed library and backend, but those in TORCH2_SKIP (which run
#                       Debian's own Python and torch). docs/PYTHON.md has its costs.
#   make check-torch2-headers [TORCH2_HEADERS_VERSION=2.1.2]
#                       only compiles it (types and overrides; no link, no run) against torch
#                       2.x's headers, from the CPU-only aarch64 wheel (90-200 MB; the headers
#                       are the same on every platform), kept in $(BUILD)/torch2/<version>.

CXX ?= g++
TORCHDIST_SO    = $(BUILD)/lib/_chorus_torchdist.so
TORCHDIST_FLAGS = $(BUILD)/torchdist.flags

ifeq ($(SANITIZE),)
ALL_TARGETS += torchdist
endif

.PHONY: torchdist
torchdist: $(BUILD)/lib/libchorus.so
	@mkdir -p $(BUILD)
	@if $(PYTHON) python/csrc/torch_flags.py > $(TORCHDIST_FLAGS).new 2> $(TORCHDIST_FLAGS).why; then \
	    cmp -s $(TORCHDIST_FLAGS).new $(TORCHDIST_FLAGS) || mv $(TORCHDIST_FLAGS).new $(TORCHDIST_FLAGS); \
	    $(MAKE) --no-print-directory $(TORCHDIST_SO); \
	else \
	    echo "torchdist: skipped, the torch.distributed backend needs PyTorch's C++ headers:" \
	         "$$(tail -n 1 $(TORCHDIST_FLAGS).why) (Debian: apt-get install python3-torch libtorch-dev)"; \
	fi

# One translation unit; -O2 without debug information keeps it under a minute on 2 cores.
$(TORCHDIST_SO): python/csrc/torchdist.cpp python/csrc/torch_compat.h include/chorus.h \
                 $(TORCHDIST_FLAGS) $(BUILD)/lib/libchorus.so
	$(CXX) -O2 -fPIC -shared -Wall -Wextra -Werror -Wno-unused-parameter \
	    -Iinclude -o $@ python/csrc/torchdist.cpp $(file <$(TORCHDIST_FLAGS)) \
	    -L$(BUILD)/lib -lchorus -Wl,-rpath,'$$ORIGIN'

TORCH2_HEADERS_VERSION ?= 2.1.2
TORCH2_DIR      = $(BUILD)/torch2/$(TORCH2_HEADERS_VERSION)
TORCH2_INC      = $(TORCH2_DIR)/torch/include

.PHONY: check-torch2-headers
check-torch2-headers: $(TORCH2_INC)/torch/csrc/distributed/c10d/Backend.hpp
	$(CXX) $$($(PYTHON) python/csrc/torch_flags.py --std $(TORCH2_INC)) -fsyntax-only \
	    -Wall -Wextra -Werror -Wno-unused-parameter -Iinclude \
	    -isystem $(TORCH2_INC) -isystem $(TORCH2_INC)/torch/csrc/api/include \
	    -isystem $$($(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])') \
	    python/csrc/torchdist.cpp
	@echo "check-torch2-headers: python/csrc/torchdist.cpp compiles against torch $(TORCH2_HEADERS_VERSION)"

$(TORCH2_INC)/torch/csrc/distributed/c10d/Backend.hpp:
	@mkdir -p $(TORCH2_DIR)
	$(PYTHON) -m pip download -q --no-deps --only-binary=:all: --platform manylinux2014_aarch64 \
	    --python-version $$($(PYTHON) -c 'import sys; print("%d%d" % sys.version_info[:2])') \
	    -d $(TORCH2_DIR) torch==$(TORCH2_HEADERS_VERSION)
	$(PYTHON) -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); \
	    z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("torch/include/")])' \
	    $(TORCH2_DIR)/torch-$(TORCH2_HEADERS_VERSION)-*.whl $(TORCH2_DIR)
	@touch $@

TORCH2_VERSION ?= 2.15.0
TORCH2_VENV    ?= $(BUILD)/torch2-venv
TORCH2_PKGS     = torch==$(TORCH2_VERSION) numpy pytest tensorboard pytorch-lightning
TORCH2_PY       = $(abspath $(TORCH2_VENV))/bin/python
TORCH2_LISTS    = tests/list/python.list tests/list/torchdist.list
# Their timeouts are doubled: torch 2.15 from PyPI takes twice as long as Debian's 1.13 to
# import (7.0 s against 3.9 s on the 2-core CI machine under load), and every rank does.
# Tests that run Debian's /usr/bin/python3 themselves whatever $TEST_PYTHON is (the launchers'
# tests start their ranks with it): they test Debian's torch, which `make test` does.
TORCH2_SKIP     = py_launch py_pyrun_isolation
# The installed package's own library; the backend it built lies beside it.
TORCH2_LIB      = $$($(TORCH2_PY) -c 'import sysconfig; print(sysconfig.get_paths()["platlib"])')/chorus/libchorus.so

.PHONY: check-torch2 torch2-venv
torch2-venv:
	@if [ "$$(cat $(TORCH2_VENV)/chorus-packages 2>/dev/null)" != "$(TORCH2_PKGS)" ]; then \
	    echo "torch2-venv: $(TORCH2_VENV) with $(TORCH2_PKGS) (about 5 GB from PyPI unless pip's cache has it)"; \
	    rm -rf $(TORCH2_VENV) && $(PYTHON) -m venv $(TORCH2_VENV) && \
	    $(TORCH2_VENV)/bin/pip install -q $(TORCH2_PKGS) && \
	    echo "$(TORCH2_PKGS)" > $(TORCH2_VENV)/chorus-packages; \
	fi

check-torch2: $(BUILD)/lib/libchorus.so $(BUILD)/bin/chorus-run torch2-venv
	-@$(TORCH2_PY) -m pip uninstall -q -y chorus
	env -u PYTHONPATH BUILD=$(BUILD) $(TORCH2_PY) -m pip install -q ./python
	@test -f "$$(dirname $(TORCH2_LIB))/_chorus_torchdist.so" || \
	    { echo "check-torch2: pip installed no torch.distributed backend"; exit 1; }
	@out=$$(cd $(BUILD) && env -u PYTHONPATH -u CHORUS_LIB PATH=$(abspath $(TORCH2_VENV))/bin:$$PATH \
	    chorus-run -np 2 $(TORCH2_PY) -c 'import torch, torch.distributed as d; \
	    d.init_process_group("chorus"); t = torch.ones(1); d.all_reduce(t); \
	    print("rank", d.get_rank(), "sum", t.item(), "torch", torch.__version__); \
	    d.destroy_process_group()' 2>&1); rc=$$?; \
	    echo "$$out"; [ $$rc = 0 ] && [ "$$(echo "$$out" | grep -c "sum 2.0")" = 2 ] || \
	    { echo "check-torch2: init_process_group(\"chorus\") without an import failed"; exit 1; }
	BUILD=$(BUILD) TEST_PYTHON=$(TORCH2_PY) CHORUS_LIB=$(TORCH2_LIB) TEST_LOGDIR=$(BUILD)/torch2-test-logs \
	    TEST_LISTS="$(TORCH2_LISTS)" TEST_SKIP="$(TORCH2_SKIP)" TEST_TIMEOUT_SCALE=2 \
	    CHORUS_TEST_JOBS=$${CHORUS_TEST_JOBS:-$(TEST_JOBS)} bash tests/run.sh $(TESTS)
	@echo "check-torch2: the Python tests pass on torch $$($(TORCH2_PY) -c 'import torch; print(torch.__version__)')"
