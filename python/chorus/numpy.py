"""chorus.numpy: the NumPy API (the same functions as the top-level chorus package)."""

from ._np import *  # noqa: F401,F403
from ._np import __all__  # noqa: F401
