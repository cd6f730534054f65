#!/bin/sh
# test_examples.sh: the example programs, as users run them.
# 1. examples/seed_permute_linear (built by make check) at 1, 2 and 4 ranks.
# 2. make install into a scratch prefix, then compile the example with
#    `mpicc prog.c $(pkg-config --cflags --libs meshgrad)` against the installed
#    header and library only, and run it on 2 ranks.
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

scratch=$(mktemp -d "${TMPDIR:-/tmp}/meshgrad-install.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
if make -s -C "$top_builddir" install prefix="$scratch/prefix" >"$scratch/install.log" 2>&1; then
    pass "make install into a scratch prefix"
    pc=$(find "$scratch/prefix" -name meshgrad.pc | head -n 1)
    export PKG_CONFIG_PATH="$(dirname "$pc")"
    flags=$(pkg-config --define-prefix --cflags --libs meshgrad 2>"$scratch/pc.err")
    if [ -n "$flags" ] &&
        mpicc "$top_srcdir/examples/seed_permute_linear.c" $flags -Wl,-rpath,"$scratch/prefix/lib" \
            -o "$scratch/seed" 2>"$scratch/cc.err"; then
        pass "mpicc seed_permute_linear.c \$(pkg-config --cflags --libs meshgrad)"
        if MG_TEST_NP=2 "$SHELL" "$top_srcdir/tests/mpi-run.sh" "$scratch/seed" >"$scratch/run.log" 2>&1; then
            pass "the installed build runs on 2 ranks"
        else
            cat "$scratch/run.log"
            fail "the installed build failed on 2 ranks"
        fi
    else
        cat "$scratch/pc.err" "$scratch/cc.err"
        fail "compiling against the installed header"
    fi
else
    tail -20 "$scratch/install.log"
    fail "make install"
fi
check_summary
