"""horovod.tensorflow is chorus.tensorflow, and its submodules (util, elastic, keras, keras.callbacks,
keras.elastic)
are chorus's own module objects, so state is shared whichever name a script imports."""

import sys

import chorus.tensorflow
import chorus.tensorflow.keras
import chorus.tensorflow.keras.callbacks
import chorus.tensorflow.keras.elastic
import chorus.tensorflow.util

sys.modules.update({
    "horovod.tensorflow.util": chorus.tensorflow.util,
    "horovod.tensorflow.elastic": chorus.tensorflow.elastic,
    "horovod.tensorflow.keras.elastic": chorus.tensorflow.keras.elastic,
    "horovod.tensorflow.keras": chorus.tensorflow.keras,
    "horovod.tensorflow.keras.callbacks": chorus.tensorflow.keras.callbacks,
})
sys.modules[__name__] = chorus.tensorflow
