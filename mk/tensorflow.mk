# tensorflow.mk - chorus.tensorflow and chorus.tensorflow.keras (python/chorus/tensorflow,
# docs/TENSORFLOW.md) on TensorFlow from PyPI. Debian has no TensorFlow, so `make test` runs
# tests/list/tensorflow.list with Debian's Python, where every test says SKIP and why.
#
#   make check-tensorflow [TF_VERSION=2.21.*] [TF_VENV=dir]
#                       a venv (default $(BUILD)/tensorflow-venv, kept between runs; TF_VENV
#                       puts it elsewhere, outside the build tree that `make clean` removes)
#                       gets tensorflow-cpu, tf-keras (Keras 2, the API Horovod's Keras layer
#                       has), numpy, pytest, parameterized and packaging from PyPI (about
#                       2.2 GB), builds the op library python/csrc/tf_ops.cpp against that
#                       TensorFlow into $(BUILD)/lib/_chorus_tf_ops.so (tf.sysconfig's flags),
#                       then every test of tests/list/tensorflow.list runs with the venv's
#                       Python ($TEST_PYTHON in the list lines).

TF_VERSION ?= 2.21.*
TF_VENV    ?= $(BUILD)/tensorflow-venv
TF_PKGS     = tensorflow-cpu==$(TF_VERSION) tf-keras numpy pytest parameterized packaging
TF_PY       = $(abspath $(TF_VENV))/bin/python

.PHONY: check-tensorflow tensorflow-venv
tensorflow-venv:
	@if [ "$$(cat $(TF_VENV)/chorus-packages 2>/dev/null)" != "$(TF_PKGS)" ]; then \
	    echo "tensorflow-venv: $(TF_VENV) with $(TF_PKGS) (about 2.2 GB from PyPI unless pip's cache has it)"; \
	    rm -rf $(TF_VENV) && $(PYTHON) -m venv $(TF_VENV) && \
	    $(TF_VENV)/bin/pip install -q "tensorflow-cpu==$(TF_VERSION)" $(filter-out tensorflow-cpu==%,$(TF_PKGS)) && \
	    echo "$(TF_PKGS)" > $(TF_VENV)/chorus-packages; \
	fi

# The op library (python/csrc/tf_ops.cpp), against the venv's TensorFlow: its headers as system
# headers (they do not build warning-free), its flags and framework library (tf.sysconfig).
TF_OPS_SO = $(BUILD)/lib/_chorus_tf_ops.so
TF_FLAGS  = $$($(TF_PY) -c 'import tensorflow as t; s = t.sysconfig; print(" ".join(f.replace("-I", "-isystem ", 1) if f.startswith("-I") else f for f in s.get_compile_flags() + s.get_link_flags()))' 2>/dev/null)

.PHONY: tensorflow-ops
tensorflow-ops: tensorflow-venv
	@mkdir -p $(BUILD)/lib
	$(CXX) -O2 -fPIC -shared -Wall -Wextra -Werror -Wno-unused-parameter -o $(TF_OPS_SO) \
	    python/csrc/tf_ops.cpp $(TF_FLAGS) -Wl,-rpath,$$($(TF_PY) -c 'import tensorflow as t, os; print(os.path.dirname(t.__file__))' 2>/dev/null)

check-tensorflow: $(BUILD)/lib/libchorus.so $(BUILD)/bin/chorus-run tensorflow-venv tensorflow-ops
	BUILD=$(BUILD) TEST_PYTHON=$(TF_PY) TEST_LOGDIR=$(BUILD)/tensorflow-test-logs \
	    TEST_LISTS=tests/list/tensorflow.list \
	    CHORUS_TEST_JOBS=$${CHORUS_TEST_JOBS:-$(TEST_JOBS)} bash tests/run.sh $(TESTS)
	@echo "check-tensorflow: the TensorFlow tests pass on tensorflow $$($(TF_PY) -c 'import tensorflow as t; print(t.__version__)' 2>/dev/null)"
