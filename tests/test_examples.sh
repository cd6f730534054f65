#!/bin/sh
# test_examples.sh: the example programs, as users run them.
# 1. examples/seed_permute_linear (built by make check) at 1, 2 and 4 ranks.
# 2. `make install prefix=DIR` into a scratch prefix: the installed meshgrad.pc
#    names DIR (not configure's prefix), and plain pkg-config (no
#    --define-prefix) gives the flags; each example is compiled with `mpicc
#    prog.c $(pkg-config --cflags --libs meshgrad)` against the installed
#    headers (meshgrad.h, meshgrad_train.h) and library only, with the rpath
#    the README gives, and run on 2 ranks; the seed example also built without
#    the rpath runs with LD_LIBRARY_PATH; the installed meshgrad program runs
#    with neither. Libs.private names CUDA and NCCL exactly when config.h says
#    they are built in.
# 3. A prefix given to configure instead: a second configure of the sources
#    (the build's own options, another --prefix) installs the headers and
#    meshgrad.pc there, this build the library and program; the seed example
#    built against it with pkg-config runs on 2 ranks. (Skipped when the
#    sources are configured in place, where configure cannot run again.)
# 4. examples/train_gpt so built, a tiny GPT on data/mobydick.h5 for a few
#    steps (two micro-batches a step): its loss falls, the losses and
#    validation losses of 2 ranks are those of 1 rank within 1e-4 relative at
#    every step, its checkpoint passes `meshgrad ckpt info` and `meshgrad
#    generate` samples from it (one GPT checkpoint format for the program and
#    the API), and resumed on 1 rank it gives the 2-rank run's last validation
#    loss again (within 1e-4); with -R 1 (each block through mg_recompute)
#    the 2-rank run prints the same losses, norms and validation losses.
# Prints a Check-style summary line.
set -u
top_builddir=${top_builddir:-.}
top_srcdir=${top_srcdir:-.}
. "$(dirname "$0")/check.sh"

if "$SHELL" "$top_srcdir/tests/mpi-run.sh" "$top_builddir/examples/seed_permute_linear"; then
    pass "seed example at 1, 2 and 4 ranks"
else
    fail "seed example"
fi

# The tiny GPT on 1 and 2 ranks, then resumed on 1 rank from the 2-rank checkpoint.
train_gpt_runs() {
    data="$top_builddir/data/mobydick.h5"
    if [ ! -f "$data" ]; then
        fail "no $data (make builds it)"
        return
    fi
    export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
    export OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
    tiny="-d $data -L 2 -H 2 -C 32 -T 32 -B 8 -A 2 -n 12 -l 3e-3 -w 2 -m 3e-4 -e 6 -V 16"
    for np in 1 2; do
        # shellcheck disable=SC2086
        if ! timeout 120 mpirun -np "$np" "$scratch/train_gpt" $tiny -o "$scratch/gpt$np.h5" \
            >"$scratch/gpt$np.log" 2>&1; then
            cat "$scratch/gpt$np.log"
            fail "train_gpt on $np rank(s)"
            return
        fi
    done
    pass "train_gpt ran 12 steps on 1 and on 2 ranks"
    # shellcheck disable=SC2086
    if timeout 120 mpirun -np 2 "$scratch/train_gpt" $tiny -R 1 >"$scratch/gpt2r.log" 2>&1 &&
        sed 's/ | [0-9.]* ms$//' "$scratch/gpt2.log" | grep -v '^saved' >"$scratch/want" &&
        sed 's/ | [0-9.]* ms$//' "$scratch/gpt2r.log" >"$scratch/got" &&
        cmp -s "$scratch/want" "$scratch/got"; then
        pass "-R 1 (each block through mg_recompute) prints the same losses, norms and val losses"
    else
        diff "$scratch/want" "$scratch/got" | head -n 8
        fail "train_gpt -R 1 on 2 ranks differs from -R 0"
    fi
    falls=$(grep '^step ' "$scratch/gpt2.log" | sed 's/|/ /g' | awk '
        NR == 1 { first = $4 } { last = $4 }
        END { print first " -> " last; exit !(NR == 12 && last < 0.9 * first) }') &&
        pass "the loss falls on 2 ranks: $falls" || fail "the loss does not fall on 2 ranks: $falls"
    grep -E '^(step|val loss)' "$scratch/gpt1.log" | sed 's/.*loss \([^ ]*\).*/\1/' >"$scratch/l1"
    grep -E '^(step|val loss)' "$scratch/gpt2.log" | sed 's/.*loss \([^ ]*\).*/\1/' >"$scratch/l2"
    if [ "$(wc -l <"$scratch/l1")" -eq 14 ] && paste "$scratch/l1" "$scratch/l2" | awk '
        { d = $1 - $2; if (d < 0) d = -d; if (d > 1e-4 * $1) { print "line " NR ": " $1 " vs " $2; bad = 1 } }
        END { exit bad }'; then
        pass "2 ranks give the 1-rank losses within 1e-4 (12 steps, 2 validation losses)"
    else
        paste "$scratch/l1" "$scratch/l2"
        fail "the 2-rank losses differ from the 1-rank ones"
    fi
    if "$top_builddir/meshgrad" ckpt info "$scratch/gpt2.h5" >"$scratch/info" 2>&1 &&
        grep -q 'checksums: all 84 datasets verify' "$scratch/info" &&
        grep -q '^  model = gpt$' "$scratch/info" && grep -q '^  model.layers = 2$' "$scratch/info" &&
        grep -q '^  model.embd = 32$' "$scratch/info"; then
        pass "meshgrad ckpt info reads the checkpoint: $(grep checksums "$scratch/info")"
    else
        cat "$scratch/info"
        fail "meshgrad ckpt info of the train_gpt checkpoint"
    fi
    if timeout 60 mpirun -np 2 "$top_builddir/meshgrad" generate --resume "$scratch/gpt2.h5" \
        --mesh 2 --parallel tp --tokens 16 >"$scratch/gen" 2>"$scratch/gen.err" &&
        grep -q '^generate: 16 tokens' "$scratch/gen.err"; then
        pass "meshgrad generate samples from the example's checkpoint on 2 ranks (tp)"
    else
        cat "$scratch/gen" "$scratch/gen.err"
        fail "meshgrad generate on the example's checkpoint"
    fi
    # shellcheck disable=SC2086
    timeout 120 mpirun -np 1 "$scratch/train_gpt" $tiny -r "$scratch/gpt2.h5" >"$scratch/resume.log" 2>&1
    want=$(grep '^val loss' "$scratch/gpt2.log" | tail -n 1 | cut -d' ' -f3)
    got=$(grep '^val loss' "$scratch/resume.log" | tail -n 1 | cut -d' ' -f3)
    if grep -q 'resumed from .* at step 12' "$scratch/resume.log" &&
        awk -v a="$got" -v b="$want" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && d <= 1e-4 * b) }'; then
        pass "resumed on 1 rank from the 2-rank checkpoint: val loss $got (2 ranks: $want)"
    else
        cat "$scratch/resume.log"
        fail "resuming train_gpt on 1 rank: val loss '$got', want $want"
    fi
}

scratch=$(mktemp -d "${TMPDIR:-/tmp}/meshgrad-install.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1

# seed_against PREFIX TAG: the seed example compiled with the flags of PREFIX's
# meshgrad.pc (plain pkg-config) and the rpath of its libdir, run on 2 ranks
seed_against() {
    libdir=$(PKG_CONFIG_PATH="$1/lib/pkgconfig" pkg-config --variable=libdir meshgrad)
    flags=$(PKG_CONFIG_PATH="$1/lib/pkgconfig" pkg-config --cflags --libs meshgrad 2>"$scratch/pc.err")
    # shellcheck disable=SC2086
    if [ -n "$flags" ] && mpicc "$top_srcdir/examples/seed_permute_linear.c" $flags \
        -Wl,-rpath,"$libdir" -o "$scratch/seed-$2" 2>"$scratch/cc.err"; then
        pass "$2: mpicc seed_permute_linear.c \$(pkg-config --cflags --libs meshgrad) -Wl,-rpath,$libdir"
    else
        cat "$scratch/pc.err" "$scratch/cc.err"
        fail "$2: compiling against the installed header"
        return 1
    fi
    if MG_TEST_NP=2 "$SHELL" "$top_srcdir/tests/mpi-run.sh" "$scratch/seed-$2" >"$scratch/run.log" 2>&1; then
        pass "$2: the installed build runs on 2 ranks"
    else
        cat "$scratch/run.log"
        fail "$2: the installed build failed on 2 ranks"
    fi
}

prefix=$scratch/prefix
if make -s -C "$top_builddir" install prefix="$prefix" >"$scratch/install.log" 2>&1; then
    pass "make install prefix=$prefix"
    export PKG_CONFIG_PATH="$prefix/lib/pkgconfig"
    got=$(pkg-config --variable=prefix meshgrad)
    check "... its meshgrad.pc names that prefix, not configure's: $got" test "$got" = "$prefix"
    seed_against "$prefix" install-time
    flags=$(pkg-config --cflags --libs meshgrad)
    # shellcheck disable=SC2086
    if mpicc "$top_srcdir/examples/seed_permute_linear.c" $flags -o "$scratch/seed-plain" \
        2>"$scratch/cc.err" &&
        LD_LIBRARY_PATH="$prefix/lib" "$scratch/seed-plain" >"$scratch/run.log" 2>&1; then
        pass "... built without the rpath, it runs with LD_LIBRARY_PATH=$prefix/lib"
    else
        cat "$scratch/cc.err" "$scratch/run.log"
        fail "... built without the rpath, with LD_LIBRARY_PATH"
    fi
    check_output "... the installed meshgrad runs (no LD_LIBRARY_PATH)" \
        env -u LD_LIBRARY_PATH "$prefix/bin/meshgrad" --version
    private=$(pkg-config --static --libs meshgrad)
    if grep -q '^#define MG_HAVE_CUDA 1' "$top_builddir/config.h"; then
        check "... built with CUDA: Libs.private names cudart and NCCL" \
            sh -c "echo '$private' | grep -q -- -lcudart && echo '$private' | grep -q -- -lnccl"
    else
        check "... built without CUDA: Libs.private names neither cudart nor NCCL" \
            sh -c "! echo '$private' | grep -q -e cuda -e nccl"
    fi
    flags=$(pkg-config --cflags --libs meshgrad)
    # shellcheck disable=SC2086
    if mpicc -O2 -Wall -Wextra -Werror "$top_srcdir/examples/train_gpt.c" $flags -lm \
        -Wl,-rpath,"$(pkg-config --variable=libdir meshgrad)" -o "$scratch/train_gpt" 2>"$scratch/cc.err"; then
        pass "mpicc -Wall -Wextra -Werror train_gpt.c against the installed headers"
        train_gpt_runs
    else
        cat "$scratch/cc.err"
        fail "compiling train_gpt.c against the installed headers"
    fi
    unset PKG_CONFIG_PATH
else
    tail -20 "$scratch/install.log"
    fail "make install"
fi

# 3. the prefix given to configure: this build's own options, another --prefix
srcdir_abs=$(cd "$top_srcdir" && pwd)
prefix2=$scratch/prefix2
if [ -f "$srcdir_abs/config.status" ]; then
    echo "skip: the sources are configured in place: a configure with another --prefix cannot run"
else
    eval "set -- $("$top_builddir/config.status" --config)"
    for arg; do
        shift
        case $arg in --srcdir=* | --prefix=* | --cache-file=*) ;; *) set -- "$@" "$arg" ;; esac
    done
    mkdir "$scratch/build2"
    if (cd "$scratch/build2" && "$srcdir_abs/configure" "$@" --prefix="$prefix2") >"$scratch/configure.log" 2>&1 &&
        make -s -C "$scratch/build2" install-data >"$scratch/install2.log" 2>&1 &&
        make -s -C "$top_builddir" install-exec prefix="$prefix2" >>"$scratch/install2.log" 2>&1; then
        pass "configure --prefix=$prefix2: headers and meshgrad.pc from it, the library and program from this build"
        got=$(PKG_CONFIG_PATH="$prefix2/lib/pkgconfig" pkg-config --variable=prefix meshgrad)
        check "... its meshgrad.pc names that prefix: $got" test "$got" = "$prefix2"
        seed_against "$prefix2" configure-time
        check_output "... the installed meshgrad runs (no LD_LIBRARY_PATH)" \
            env -u LD_LIBRARY_PATH "$prefix2/bin/meshgrad" --version
    else
        tail -20 "$scratch/configure.log" "$scratch/install2.log"
        fail "configure --prefix=$prefix2 and install"
    fi
fi
check_summary
