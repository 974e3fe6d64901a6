"""`mock` is the PyPI copy of the standard library's unittest.mock; Horovod's test helpers
import it by that name. Used only when the package is not installed."""

import sys
import unittest.mock

sys.modules[__name__] = unittest.mock
