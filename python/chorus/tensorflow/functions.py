"""Variables and Python objects across ranks (horovod.tensorflow.functions)."""

import tensorflow as tf

from .. import _np
from .._core import global_process_set
from .mpi_ops import broadcast
from .util import no_autograph


def broadcast_variables(variables, root_rank, process_set=global_process_set, inplace=False):
    """Overwrites every variable with root_rank's value. Eagerly it is done on return; in a
    graph it returns the op that does it."""
    variables = list(variables)
    ops = [v.assign(broadcast(tf.convert_to_tensor(v), root_rank, process_set=process_set,
                              name="bcast_var.%d" % i))
           for i, v in enumerate(variables)]
    if tf.executing_eagerly():
        return None
    return tf.group(*ops)


def broadcast_global_variables(root_rank):
    """tf.compat.v1 graphs: the op broadcasting every global variable from root_rank."""
    if tf.executing_eagerly():
        raise RuntimeError("chorus broadcast_global_variables: there are no global variables "
                           "when TensorFlow runs eagerly; use broadcast_variables(model."
                           "variables, root_rank) or the Keras BroadcastGlobalVariablesCallback")
    return broadcast_variables(tf.compat.v1.global_variables(), root_rank)


def broadcast_object(obj, root_rank=0, session=None, name=None,
                     process_set=global_process_set):
    """Returns root_rank's obj (pickled) on every rank."""
    return _np.broadcast_object(obj, root_rank, name, process_set)


def broadcast_object_fn(root_rank=0, session=None, name=None, process_set=global_process_set):
    """A function broadcasting an object from root_rank each time it is called."""
    def fn(obj):
        return _np.broadcast_object(obj, root_rank, name, process_set)
    return fn


def allgather_object(obj, session=None, name=None, process_set=global_process_set):
    """Returns the list of every rank's obj (pickled), in rank order."""
    return _np.allgather_object(obj, name, process_set)


no_autograph(globals())
