"""`horovod` as seen by a script written for Horovod, with chorus.torch as horovod.torch and
chorus.tensorflow as horovod.tensorflow.

bench/horovod_suite.sh puts this folder first on PYTHONPATH so that Horovod's own test files
run unchanged against Chorus. Only what those files import is here: horovod.torch (the module
chorus.torch itself), horovod.tensorflow (chorus.tensorflow, with its util and keras),
horovod.keras (chorus.keras), horovod.common.util.is_version_greater_equal_than and
horovod.runner.util.threads.in_thread."""
