# hvd_venv.sh - sourced by bench scripts that run Horovod itself beside Chorus: hvd_venv VENV
# makes VENV a venv (--system-site-packages over $PYTHON, default Debian's python3 with its
# torch) holding Horovod $HOROVOD_VERSION (default 0.28.1) built from PyPI with PyTorch, Gloo
# and MPI (pip install --no-build-isolation; needs g++, cmake and Open MPI's headers; about 5
# minutes on 2 cores, once: a venv whose `import horovod.torch` works is reused). Horovod is
# not part of Chorus and is never committed; the build log is VENV.log. Returns 1, with the
# log's tail on stderr, when the build fails or Horovod was built without PyTorch.
hvd_venv() {
    _v=$1
    _py=${PYTHON:-/usr/bin/python3}
    if ! "$_v/bin/python" -c "import horovod.torch" 2>/dev/null; then
        echo "# building Horovod ${HOROVOD_VERSION:-0.28.1} into $_v (once; about 5 minutes)" >&2
        "$_py" -m venv --system-site-packages "$_v" || return 1
        HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_TENSORFLOW=1 \
            HOROVOD_WITHOUT_MXNET=1 "$_v/bin/pip" install -q --no-build-isolation \
            "horovod==${HOROVOD_VERSION:-0.28.1}" > "$_v.log" 2>&1 || {
            tail -20 "$_v.log" >&2
            echo "hvd_venv: building Horovod failed (log: $_v.log)" >&2
            return 1
        }
    fi
    "$_v/bin/horovodrun" --check-build | grep "\[X\] PyTorch" > /dev/null ||
        { echo "hvd_venv: Horovod in $_v was built without PyTorch" >&2; return 1; }
}
