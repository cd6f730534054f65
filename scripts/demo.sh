#!/bin/sh
# demo.sh: sets the checkout up (scripts/setup.sh), then runs the default job on
# 2 ranks: a GPT trained on Moby-Dick for about a minute, its validation loss,
# and a 200-byte sample from the trained model:
#   mpirun -np 2 build/meshgrad train --config data/mobydick-demo.conf --save build/demo-gpt.h5 [extra flags]
#   mpirun -np 2 build/meshgrad generate --resume build/demo-gpt.h5 --parallel tp --prompt ... --tokens 200
# `scripts/demo.sh --digits [extra flags]` runs the digits job instead (an MLP on
# the UCI digits: mpirun -np 2 build/meshgrad train --config data/digits.conf).
# Extra arguments are passed to `meshgrad train` (e.g. --steps 200). Root-safe
# (oversubscribed only on a 1-core machine); MG_DEMO_TIMEOUT (seconds, default
# 1800) bounds each run. The checkpoint build/demo-gpt.h5 stays, for more text:
#   build/meshgrad generate --resume build/demo-gpt.h5 --prompt "Call me Ishmael."
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
limit=${MG_DEMO_TIMEOUT:-1800}

if [ "${1:-}" = --digits ]; then
    shift
    echo "demo: mpirun -np 2 build/meshgrad train --config data/digits.conf $*"
    exec timeout -k 10 "$limit" \
        mpirun $over -np 2 build/meshgrad train --config data/digits.conf "$@" </dev/null
fi

ckpt=build/demo-gpt.h5
echo "demo: mpirun -np 2 build/meshgrad train --config data/mobydick-demo.conf --save $ckpt $*"
timeout -k 10 "$limit" mpirun $over -np 2 build/meshgrad train --config data/mobydick-demo.conf \
    --save "$ckpt" "$@" </dev/null
prompt="Call me Ishmael. "
echo
echo "demo: mpirun -np 2 build/meshgrad generate --resume $ckpt --parallel tp --prompt \"$prompt\" --tokens 200"
echo "----"
timeout -k 10 "$limit" mpirun $over -np 2 build/meshgrad generate --resume "$ckpt" --parallel tp \
    --prompt "$prompt" --tokens 200 </dev/null
echo "----"
echo "demo: more text: build/meshgrad generate --resume $ckpt --prompt TEXT [--tokens N] [--seed S]"
