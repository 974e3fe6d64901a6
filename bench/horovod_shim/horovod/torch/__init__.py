"""horovod.torch is chorus.torch: the module object itself, so `import horovod.torch as hvd`
and `import chorus.torch as hvd` give the same functions and the same state."""

import sys

import chorus.torch

sys.modules[__name__] = chorus.torch
