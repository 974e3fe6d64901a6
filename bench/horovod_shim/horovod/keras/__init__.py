"""horovod.keras is chorus.keras (Horovod's Keras API, Keras 2)."""

import sys

import chorus.keras

sys.modules[__name__] = chorus.keras
