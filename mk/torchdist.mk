# torchdist.mk - the torch.distributed backend "chorus" (python/csrc/torchdist.cpp), a PyTorch
# C++ extension over libchorus.so, built against the torch that $(PYTHON) imports (Debian:
# python3-torch and libtorch-dev) into $(BUILD)/lib/_chorus_torchdist.so, beside libchorus.so,
# where chorus.torch.distributed finds it. Without torch or its headers plain `make` skips it
# and says why. Its tests are tests/list/torchdist.list; its benchmark bench/torchdist.sh.
#
#   make torchdist      the extension (also part of plain `make`)
#   make check-torch2 [TORCH2_VERSION=2.1.2]
#                       the backend against torch 2.x (whose backend base class is
#                       c10d::Backend, python/csrc/torch_compat.h): a venv in
#                       $(BUILD)/torch2-venv gets torch from PyPI (the x86_64 wheel depends on
#                       CUDA's libraries: about 5 GB, downloaded once), the extension is built
#                       against it into $(BUILD)/torch2/lib beside a copy of libchorus.so, and
#                       the collectives (2 and 3 ranks), DDP/ZeroRedundancyOptimizer and
#                       killed-peer tests run with that Python.
#   make check-torch2-headers [TORCH2_VERSION=2.1.2]
#                       only compiles it (types and overrides; no link, no run) against torch
#                       2.x's headers, from the CPU-only aarch64 wheel (90 MB; the headers are
#                       the same on every platform), kept in $(BUILD)/torch2/<version>.

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
	$(CXX) -std=c++17 -O2 -fPIC -shared -Wall -Wextra -Werror -Wno-unused-parameter \
	    -Iinclude -o $@ python/csrc/torchdist.cpp $(file <$(TORCHDIST_FLAGS)) \
	    -L$(BUILD)/lib -lchorus -Wl,-rpath,'$$ORIGIN'

TORCH2_VERSION ?= 2.1.2
TORCH2_DIR      = $(BUILD)/torch2/$(TORCH2_VERSION)
TORCH2_INC      = $(TORCH2_DIR)/torch/include

.PHONY: check-torch2-headers
check-torch2-headers: $(TORCH2_INC)/torch/csrc/distributed/c10d/Backend.hpp
	$(CXX) -std=c++17 -fsyntax-only -Wall -Wextra -Werror -Wno-unused-parameter -Iinclude \
	    -isystem $(TORCH2_INC) -isystem $(TORCH2_INC)/torch/csrc/api/include \
	    -isystem $$($(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])') \
	    python/csrc/torchdist.cpp
	@echo "check-torch2-headers: python/csrc/torchdist.cpp compiles against torch $(TORCH2_VERSION)"

$(TORCH2_INC)/torch/csrc/distributed/c10d/Backend.hpp:
	@mkdir -p $(TORCH2_DIR)
	$(PYTHON) -m pip download -q --no-deps --only-binary=:all: --platform manylinux2014_aarch64 \
	    --python-version $$($(PYTHON) -c 'import sys; print("%d%d" % sys.version_info[:2])') \
	    -d $(TORCH2_DIR) torch==$(TORCH2_VERSION)
	$(PYTHON) -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); \
	    z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("torch/include/")])' \
	    $(TORCH2_DIR)/torch-$(TORCH2_VERSION)-*.whl $(TORCH2_DIR)
	@touch $@

TORCH2_VENV = $(BUILD)/torch2-venv
TORCH2_LIB  = $(BUILD)/torch2/lib
TORCH2_RUN  = PATH=$(abspath $(BUILD)/bin):$$PATH PYTHONPATH=python \
              CHORUS_LIB=$(abspath $(TORCH2_LIB))/libchorus.so

.PHONY: check-torch2
check-torch2: $(BUILD)/lib/libchorus.so $(BUILD)/bin/chorus-run
	@test -x $(TORCH2_VENV)/bin/python || $(PYTHON) -m venv $(TORCH2_VENV)
	@$(TORCH2_VENV)/bin/python -c 'import torch, sys; sys.exit(torch.__version__.split("+")[0] != "$(TORCH2_VERSION)")' 2>/dev/null || \
	    $(TORCH2_VENV)/bin/pip install -q "torch==$(TORCH2_VERSION)" "numpy<2"
	@mkdir -p $(TORCH2_LIB)
	cp $(BUILD)/lib/libchorus.so $(TORCH2_LIB)/libchorus.so
	$(TORCH2_VENV)/bin/python python/csrc/torch_flags.py > $(TORCH2_LIB)/flags 2>/dev/null
	$(CXX) -std=c++17 -O2 -fPIC -shared -Wall -Wextra -Werror -Wno-unused-parameter -Iinclude \
	    -o $(TORCH2_LIB)/_chorus_torchdist.so python/csrc/torchdist.cpp \
	    $$(cat $(TORCH2_LIB)/flags | sed 's/\\"/"/g') -L$(BUILD)/lib -lchorus -Wl,-rpath,'$$ORIGIN'
	$(TORCH2_RUN) chorus-run -np 2 $(TORCH2_VENV)/bin/python tests/python/torchdist_colls.py | grep "checks passed on rank 1 of 2"
	$(TORCH2_RUN) chorus-run -np 3 $(TORCH2_VENV)/bin/python tests/python/torchdist_colls.py | grep "checks passed on rank 2 of 3"
	$(TORCH2_RUN) chorus-run -np 2 $(TORCH2_VENV)/bin/python tests/python/torchdist_ddp.py | grep -c "identical to gloo" | grep -qx 4
	$(TORCH2_RUN) $(TORCH2_VENV)/bin/python tests/python/torchdist_kill.py 3 shm kill | grep -c "CHORUS_ERR_PEER_LOST: rank 2" | grep -qx 2
	@echo "check-torch2: the torch.distributed backend passes its tests on torch $$($(TORCH2_VENV)/bin/python -c 'import torch; print(torch.__version__)')"
