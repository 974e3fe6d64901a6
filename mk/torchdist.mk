# torchdist.mk - the torch.distributed backend "chorus" (python/csrc/torchdist.cpp), a PyTorch
# C++ extension over libchorus.so, built against the torch that $(PYTHON) imports (Debian:
# python3-torch and libtorch-dev) into $(BUILD)/lib/_chorus_torchdist.so, beside libchorus.so,
# where chorus.torch.distributed finds it. Without torch or its headers plain `make` skips it
# and says why. Its tests are tests/list/torchdist.list; its benchmark bench/torchdist.sh.
#
#   make torchdist      the extension (also part of plain `make`)

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
