# python.mk - the Python package (python/chorus: NumPy API and chorus.torch, a drop-in for
# horovod.torch) over libchorus.so, its tests (tests/python, registered in
# tests/list/python.list) and the DDP comparison (bench/ddp_vs_chorus.sh). Uses Debian's
# Python 3 with its PyTorch, NumPy and pytest; nothing comes from PyPI.
#
#   make python-install [PREFIX=dir]   pip install (offline) of python/ with the library and
#                                      the chorus-run launcher bundled
#   make wheel [DIST=dir]              the same as a wheel, tagged for this platform
#                                      (chorus-<version>-py3-none-linux_<arch>.whl; cpXY-cpXY with the torch backend), in DIST
#                                      (default $(BUILD)/dist)
#   make python-check                  byte-compiles the package (syntax check)

PYTHON ?= /usr/bin/python3
DIST   ?= $(BUILD)/dist
# Building and installing the package; its tests add PyTorch and pytest.
PYTHON_PKGS  = python3 python3-numpy python3-setuptools python3-wheel python3-pip python3-venv
DEBIAN_PKGS += $(PYTHON_PKGS) python3-torch python3-pytest

PY_NATIVE = CHORUS_LIB=$(abspath $(BUILD)/lib/libchorus.so) CHORUS_RUN=$(abspath $(BUILD)/bin/chorus-run)

.PHONY: python-install python-check wheel deps-python
deps-python:
	@sh tools/deps.sh "the Python package (make python-install, make wheel)" $(PYTHON_PKGS)

python-install: deps-python $(BUILD)/lib/libchorus.so $(BUILD)/bin/chorus-run
	$(PY_NATIVE) $(PYTHON) -m pip install --no-build-isolation \
	    --no-index --no-deps --prefix $(PREFIX) ./python

wheel: deps-python $(BUILD)/lib/libchorus.so $(BUILD)/bin/chorus-run
	@mkdir -p $(DIST)
	$(PY_NATIVE) $(PYTHON) -m pip wheel -q --no-build-isolation --no-index --no-deps -w $(DIST) ./python
	@ls $(DIST)/chorus-$(VERSION)-*.whl

python-check:
	$(PYTHON) -m compileall -q python/chorus examples bench tests/python
