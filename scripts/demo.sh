#!/bin/sh
# demo.sh: sets the checkout up (scripts/setup.sh), then runs the default job on
# 2 ranks: a GPT trained on Moby-Dick for 400 steps (1 to 4 minutes on 2 cores:
# README.md), its validation loss, and a 200-byte sample from the trained model:
#   mpirun -np 2 build/meshgrad train --config data/mobydick-demo.conf --save build/demo-gpt.h5 --overwrite [extra flags]
#   mpirun -np 2 build/meshgrad generate --resume build/demo-gpt.h5 --parallel tp --prompt ... --tokens 200
# `scripts/demo.sh --digits [extra flags]` runs the digits job instead (an MLP on
# the UCI digits: mpirun -np 2 build/meshgrad train --config data/digits.conf).
# Extra arguments are passed to `meshgrad train` (e.g. --steps 200). Root-safe
# (oversubscribed only on a 1-core machine); MG_DEMO_TIMEOUT (seconds, default
# 1800) bounds each run. The checkpoint build/demo-gpt.h5 stays, for more text:
#   build/meshgrad generate --resume build/demo-gpt.h5 --prompt "Call me Ishmael."
# Its last line is the demo's total time, split into set-up (packages and build),
# training and generation, with the cores and BLAS threads it ran on.
set -eu
cd "$(dirname "$0")/.."
start=$(date +%s)
# the machine's cores (nproc counts OMP_NUM_THREADS instead when it is set)
cores=$(env -u OMP_NUM_THREADS -u OMP_THREAD_LIMIT nproc 2>/dev/null || echo 1)
# total PARTS: the closing line
total() {
    s=$(($(date +%s) - start))
    echo "demo: total time $((s / 60)) min $((s % 60)) s ($1; $cores cores," \
        "OPENBLAS_NUM_THREADS=$OPENBLAS_NUM_THREADS)"
}
scripts/setup.sh
set_up=$(date +%s)

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
# 2 ranks; oversubscribe only on a machine with fewer cores (it makes Open MPI
# yield when idle, which slows every message)
over=
[ "$cores" -lt 2 ] && over=--oversubscribe
: "${OPENBLAS_NUM_THREADS:=1}"
: "${OMP_NUM_THREADS:=1}"
export OPENBLAS_NUM_THREADS OMP_NUM_THREADS
limit=${MG_DEMO_TIMEOUT:-1800}

if [ "${1:-}" = --digits ]; then
    shift
    echo "demo: mpirun -np 2 build/meshgrad train --config data/digits.conf $*"
    timeout -k 10 "$limit" \
        mpirun $over -np 2 build/meshgrad train --config data/digits.conf "$@" </dev/null
    total "set-up $((set_up - start)) s, training $(($(date +%s) - set_up)) s"
    exit 0
fi

ckpt=build/demo-gpt.h5
# --overwrite: a demo run again replaces the checkpoint of the one before
echo "demo: mpirun -np 2 build/meshgrad train --config data/mobydick-demo.conf --save $ckpt --overwrite $*"
timeout -k 10 "$limit" mpirun $over -np 2 build/meshgrad train --config data/mobydick-demo.conf \
    --save "$ckpt" --overwrite "$@" </dev/null
trained=$(date +%s)
prompt="Call me Ishmael. "
echo
echo "demo: mpirun -np 2 build/meshgrad generate --resume $ckpt --parallel tp --prompt \"$prompt\" --tokens 200"
echo "----"
timeout -k 10 "$limit" mpirun $over -np 2 build/meshgrad generate --resume "$ckpt" --parallel tp \
    --prompt "$prompt" --tokens 200 </dev/null
echo "----"
echo "demo: more text: build/meshgrad generate --resume $ckpt --prompt TEXT [--tokens N] [--seed S]"
total "set-up $((set_up - start)) s, training $((trained - set_up)) s, generation $(($(date +%s) - trained)) s"
