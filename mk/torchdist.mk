# torchdist.mk - the torch.distributed backend "chorus" (python/csrc/torchdist.cpp), a PyTorch
# C++ extension over libchorus.so, built against the torch that $(PYTHON) imports (Debian:
# python3-torch and libtorch-dev) into $(BUILD)/lib/_chorus_torchdist.so, beside libchorus.so,
# where chorus.torch.distributed finds it. Without torch or its headers plain `make` skips it
# and says why. Its tests are tests/list/torchdist.list; its benchmark bench/torchdist.sh.
#
#   make torchdist      the extension (also part of plain `make`)
#   make check-torch2 [TORCH2_VERSION=2.1.2]
#                       compiles the extension (types and overrides; no link, no run) against
#                       the C++ headers of torch 2.x from PyPI, whose backend base class is
#                       c10d::Backend (python/csrc/torch_compat.h). The headers come from the
#                       CPU-only aarch64 wheel (90 MB; the x86_64 one carries CUDA, 700 MB+);
#                       they are the same on every platform. Kept in $(BUILD)/torch2.

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

.PHONY: check-torch2
check-torch2: $(TORCH2_INC)/torch/csrc/distributed/c10d/Backend.hpp
	$(CXX) -std=c++17 -fsyntax-only -Wall -Wextra -Werror -Wno-unused-parameter -Iinclude \
	    -isystem $(TORCH2_INC) -isystem $(TORCH2_INC)/torch/csrc/api/include \
	    -isystem $$($(PYTHON) -c 'import sysconfig; print(sysconfig.get_paths()["include"])') \
	    python/csrc/torchdist.cpp
	@echo "check-torch2: python/csrc/torchdist.cpp compiles against torch $(TORCH2_VERSION)"

$(TORCH2_INC)/torch/csrc/distributed/c10d/Backend.hpp:
	@mkdir -p $(TORCH2_DIR)
	$(PYTHON) -m pip download -q --no-deps --only-binary=:all: --platform manylinux2014_aarch64 \
	    --python-version $$($(PYTHON) -c 'import sys; print("%d%d" % sys.version_info[:2])') \
	    -d $(TORCH2_DIR) torch==$(TORCH2_VERSION)
	$(PYTHON) -c 'import sys, zipfile; z = zipfile.ZipFile(sys.argv[1]); \
	    z.extractall(sys.argv[2], [n for n in z.namelist() if n.startswith("torch/include/")])' \
	    $(TORCH2_DIR)/torch-$(TORCH2_VERSION)-*.whl $(TORCH2_DIR)
	@touch $@
