"""Shared set-up for the Python tests. Most files run under `chorus-run -np N python3 -m
pytest`: every rank runs the same tests in the same order, so each test is a collective.
The package is imported from the source tree (python/) and the library from $BUILD."""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(REPO, "python"))
BUILD = os.path.join(REPO, os.environ.get("BUILD", "build"))
os.environ.setdefault("CHORUS_LIB", os.path.join(BUILD, "lib", "libchorus.so"))
