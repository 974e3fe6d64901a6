"""`horovod` as seen by a script written for Horovod, with chorus.torch as horovod.torch.

bench/horovod_suite.sh puts this folder first on PYTHONPATH so that Horovod's own test files
run unchanged against Chorus. Only what those files import is here: horovod.torch (the module
chorus.torch itself) and horovod.runner.util.threads.in_thread."""
