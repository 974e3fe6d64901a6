"""Horovod's test helpers import cloudpickle for spawn(), which test_torch.py never calls;
when the package is not installed, the standard pickle stands in so the import succeeds."""

import pickle
import sys

sys.modules[__name__] = pickle
