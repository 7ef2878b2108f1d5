#!/usr/bin/env bash
# Installs everything the test suite needs on a fresh Debian machine (run as root):
# libibverbs headers for the profiler's verbs path, iproute2 for network-namespace tests,
# chromium for the dashboard's headless-browser test,
# Slurm's daemons, munge, slurmdbd with MariaDB and the job_submit/lua plugin for the Slurm
# executor's tests (tests/slurm, tools/slurm_local.py),
# this project with its test extras (TensorFlow 2.18.1 CPU), legacy Keras (no deps, so it does
# not pull the GPU TensorFlow wheel), and Horovod 0.28.1 built from source with Gloo.
set -euo pipefail
cd "$(dirname "$0")/.."
need_apt=()
[ -f /usr/include/infiniband/verbs.h ] || need_apt+=(libibverbs-dev)
command -v ip >/dev/null || need_apt+=(iproute2)
command -v chromium >/dev/null || need_apt+=(chromium)
command -v slurmd >/dev/null || need_apt+=(slurmctld slurmd slurm-client munge)
command -v slurmdbd >/dev/null || need_apt+=(slurmdbd)
command -v mariadbd >/dev/null || need_apt+=(mariadb-server)
compgen -G '/usr/lib/*/slurm-wlm/job_submit_lua.so' >/dev/null || need_apt+=(slurm-wlm-basic-plugins)
if [ ${#need_apt[@]} -gt 0 ]; then
  if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need_apt[@]}" >/dev/null
  else  # the tests that need them skip, naming what is missing
    echo "install-test-deps: not root or no apt-get; skipping ${need_apt[*]}" >&2
  fi
fi
python -m pip install -q -e '.[test]'
python -m pip install -q --no-deps 'tf_keras==2.18.0'
if ! python -c 'import horovod.tensorflow' 2>/dev/null; then
  # Horovod builds from source against the installed TensorFlow: about 8 minutes on 2 quiet
  # cores, 21 measured beside other work (its build already runs make -j8). The wheel is
  # kept in a cache of its own, per TensorFlow version, so every later install (a fresh
  # venv, CI's, an emptied pip cache) takes seconds.
  tf=$(python -c 'import importlib.metadata as m; print(m.version("tensorflow-cpu"))')
  wheels=${TIRESIAS_WHEELS:-$HOME/.cache/tiresias/wheels}/tensorflow-$tf
  if ! ls "$wheels"/horovod-0.28.1-*.whl >/dev/null 2>&1; then
    mkdir -p "$wheels"
    HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
    HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 \
      python -m pip wheel -q --no-deps --no-build-isolation -w "$wheels" 'horovod==0.28.1'
  fi
  python -m pip install -q --find-links "$wheels" 'horovod==0.28.1'
fi
