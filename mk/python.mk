# python.mk - the Python package (python/chorus: NumPy API and chorus.torch, a drop-in for
# horovod.torch) over libchorus.so, its tests (tests/python, registered in
# tests/list/python.list) and the DDP comparison (bench/ddp_vs_chorus.sh). Uses Debian's
# Python 3 with its PyTorch, NumPy and pytest; nothing comes from PyPI.
#
#   make python-install [PREFIX=dir]   pip install (offline) of python/ with the library bundled
#   make python-check                  byte-compiles the package (syntax check)

PYTHON ?= /usr/bin/python3
DEBIAN_PKGS += python3 python3-torch python3-numpy python3-pytest python3-setuptools \
               python3-pip python3-venv

.PHONY: python-install python-check
python-install: $(BUILD)/lib/libchorus.so
	CHORUS_LIB=$(abspath $(BUILD)/lib/libchorus.so) $(PYTHON) -m pip install --no-build-isolation \
	    --no-index --no-deps --prefix $(PREFIX) ./python

python-check:
	$(PYTHON) -m compileall -q python/chorus examples bench tests/python
