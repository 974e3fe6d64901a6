"""horovod.tensorflow is chorus.tensorflow, and its submodules (util, keras, keras.callbacks)
are chorus's own module objects, so state is shared whichever name a script imports."""

import sys

import chorus.tensorflow
import chorus.tensorflow.keras
import chorus.tensorflow.keras.callbacks
import chorus.tensorflow.util

sys.modules.update({
    "horovod.tensorflow.util": chorus.tensorflow.util,
    "horovod.tensorflow.keras": chorus.tensorflow.keras,
    "horovod.tensorflow.keras.callbacks": chorus.tensorflow.keras.callbacks,
})
sys.modules[__name__] = chorus.tensorflow
