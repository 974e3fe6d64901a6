#!/bin/sh
# Runs a TensorFlow test file with pyrun.py when $TEST_PYTHON has TensorFlow and tf_keras;
# without them says SKIP and why (make check-tensorflow runs the file in a venv that has them).
#   sh tests/python/tf_run.sh [pyrun.py options] tests/python/test_x.py
py=${TEST_PYTHON:-/usr/bin/python3}
if ! why=$("$py" -c 'import tensorflow, tf_keras' 2>&1); then
    echo "SKIP: $py has no TensorFlow/tf_keras ($(echo "$why" | tail -n 1)); make check-tensorflow runs this test in a venv with tensorflow-cpu and tf-keras from PyPI"
    exit 0
fi
exec "$py" "$(dirname "$0")/pyrun.py" "$@"
