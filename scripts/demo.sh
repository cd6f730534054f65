#!/bin/sh
# demo.sh: sets the checkout up (scripts/setup.sh), then runs the default
# training job on 2 ranks:
#   mpirun -np 2 build/meshgrad train --config data/digits.conf [extra flags]
# Extra arguments are passed to `meshgrad train` (e.g. --steps 200). Root-safe
# (oversubscribed only on a 1-core machine); MG_DEMO_TIMEOUT (seconds, default 1800) bounds the run.
set -eu
cd "$(dirname "$0")/.."
scripts/setup.sh

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# 2 ranks; oversubscribe only on a machine with fewer cores (it makes Open MPI
# yield when idle, which slows every message)
over=
[ "$(nproc 2>/dev/null || echo 1)" -lt 2 ] && over=--oversubscribe
: "${OPENBLAS_NUM_THREADS:=1}"
: "${OMP_NUM_THREADS:=1}"
export OPENBLAS_NUM_THREADS OMP_NUM_THREADS

if [ ! -f data/digits.conf ]; then
    echo "demo: no training job yet (data/digits.conf is missing); the program:"
    exec build/meshgrad --version
fi
echo "demo: mpirun -np 2 build/meshgrad train --config data/digits.conf $*"
exec timeout -k 10 "${MG_DEMO_TIMEOUT:-1800}" \
    mpirun $over -np 2 build/meshgrad train --config data/digits.conf "$@" </dev/null
