# tensorflow.mk - chorus.tensorflow and chorus.tensorflow.keras (python/chorus/tensorflow,
# docs/TENSORFLOW.md) on TensorFlow from PyPI. Debian has no TensorFlow, so `make test` runs
# tests/list/tensorflow.list with Debian's Python, where every test says SKIP and why.
#
#   make check-tensorflow [TF_VERSION=2.21.*] [TF_VENV=dir]
#                       a venv (default $(BUILD)/tensorflow-venv, kept between runs; TF_VENV
#                       puts it elsewhere, outside the build tree that `make clean` removes)
#                       gets tensorflow-cpu, tf-keras (Keras 2, the API Horovod's Keras layer
#                       has), numpy, pytest, parameterized and packaging from PyPI (about
#                       2.2 GB), then every test of tests/list/tensorflow.list runs with the
#                       venv's Python ($TEST_PYTHON in the list lines).

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

check-tensorflow: $(BUILD)/lib/libchorus.so $(BUILD)/bin/chorus-run tensorflow-venv
	BUILD=$(BUILD) TEST_PYTHON=$(TF_PY) TEST_LOGDIR=$(BUILD)/tensorflow-test-logs \
	    TEST_LISTS=tests/list/tensorflow.list \
	    CHORUS_TEST_JOBS=$${CHORUS_TEST_JOBS:-$(TEST_JOBS)} bash tests/run.sh $(TESTS)
	@echo "check-tensorflow: the TensorFlow tests pass on tensorflow $$($(TF_PY) -c 'import tensorflow as t; print(t.__version__)' 2>/dev/null)"
