# Sourced by every test runner (tests/run-all.sh, tests/run-unit.sh, tests/http/run.sh,
# tests/browser/run.sh): the environment the tests start from, whatever the caller's, so that
# `make test` passes on any machine that can run it. A test about one of these variables sets it
# itself for the process it starts (test_blas.py sets OPENBLAS_CORETYPE, tests/app/test_config.c
# EMBEDSCOPE_DATA_DIR); tests/http/httpkit.py applies the same rules to the daemons the
# Python tests start (daemon_env), for modules run on their own.
#
# OpenBLAS: the daemon chooses its kernels (it reports coretype_source "user" and restarts
# nothing when OPENBLAS_CORETYPE is set) and tests run one BLAS thread (Check forks each test).
unset OPENBLAS_CORETYPE OPENBLAS_VERBOSE OPENBLAS_MAIN_FREE OPENBLAS_DEFAULT_NUM_THREADS \
      OPENBLAS_L2_SIZE OPENBLAS_THREAD_TIMEOUT GOTO_NUM_THREADS GOTOBLAS_MAIN_FREE OMP_NUM_THREADS \
      GOMP_CPU_AFFINITY
export OPENBLAS_NUM_THREADS=1
# The daemon's own variables and its test hooks (the restart marker among them).
unset EMBEDSCOPE_DATA_DIR EMBEDSCOPE_UPLOAD_TOKEN ES_BLAS_REEXEC ES_TEST_FAKE_CORENAME \
      ES_TEST_BLAS_SELF_TEST_FAIL
# Requests to the test daemons go straight to 127.0.0.1: a proxy the caller needs for the npm
# registry stays, but never sees them (curl, requests and urllib read no_proxy).
for v in no_proxy NO_PROXY; do
    export "$v=127.0.0.1,localhost,::1${!v:+,${!v}}"
done
unset v
# One locale and text encoding: sort, grep and sed in the scripts, Python's open() in the tests.
export LC_ALL=C.UTF-8 PYTHONUTF8=1
unset LANGUAGE PYTHONPATH PYTHONHOME PYTHONSTARTUP PYTHONWARNINGS
# pip (the Python client installed from the checkout in test_client.py) reads no user configuration.
export PIP_CONFIG_FILE=/dev/null PIP_DISABLE_PIP_VERSION_CHECK=1
# Temporary files: a TMPDIR that is not a writable directory is the caller's mistake, not a test
# failure; the daemons the tests start keep their upload bodies in their own directories.
if [ -n "${TMPDIR:-}" ] && ! { [ -d "$TMPDIR" ] && [ -w "$TMPDIR" ]; }; then
    unset TMPDIR
fi
