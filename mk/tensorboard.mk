# tensorboard.mk - TensorBoard event files (include/chorus/tensorboard.h, src/base/tboard.c).
#
#   make check-tensorboard   the real `tensorboard` package from PyPI (in a venv under
#                            $(BUILD)/tensorboard-venv) reads the event files of a short
#                            2-rank chorus-train run with its EventAccumulator: every tag of
#                            the job's and of each rank's file, a value per step, the values
#                            our own reader (tests/scripts/tb_read.py) reads.
#
# make test's reader checks the CRCs with Debian's python3-crc32c.

DEBIAN_PKGS += python3-crc32c
TB_VENV = $(BUILD)/tensorboard-venv

.PHONY: check-tensorboard
check-tensorboard: $(BUILD)/bin/chorus-train $(BUILD)/bin/chorus-run
	@sh tools/deps.sh "make check-tensorboard" python3-venv python3-crc32c dataset-fashion-mnist
	@test -x $(TB_VENV)/bin/python || $(PYTHON) -m venv $(TB_VENV)
	@$(TB_VENV)/bin/python -c 'import tensorboard' 2>/dev/null || \
	    $(TB_VENV)/bin/pip install -q tensorboard
	PATH=$(abspath $(BUILD)/bin):$$PATH TB_PYTHON=$(TB_VENV)/bin/python sh tests/scripts/check_tensorboard.sh
