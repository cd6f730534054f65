#!/bin/sh
# test_terminal_text.sh: text that comes from a file reaches the terminal
# with its control bytes escaped (src/text.h), so that a file can neither
# clear the screen nor rewrite a line already printed ("\r\e[K" and a fake
# "checksums: all 12 datasets verify"): checked on
# - `meshgrad ckpt info` of a checkpoint with such an attribute value, a
#   dataset so named (h5copy) and an attribute that is not UTF-8;
# - a resume refused with a message quoting such an attribute ("step");
# - `meshgrad data info` of a data set whose --source holds such bytes;
# - `meshgrad trace analyze` of a dump whose reason and op hold them.
# Each output must hold no control byte but newlines and tabs, and show the
# escapes (\r, \e, \xff) instead.
. "$(dirname "$0")/check.sh"
program_test_env terminal-text
cd "$tmp" || exit 99
small="--data $data --hidden 16 --batch 32 --log-every 0 --threads 1"
evil=$(printf 'x\r\033[Kchecksums: all 12 datasets verify\033[8m')

# raw FILE: the number of raw control bytes in FILE (newline and tab aside)
raw() { LC_ALL=C tr -d '\n\t -~\200-\377' <"$1" | wc -c; }
# clean DESCRIPTION FILE PATTERN: no raw control byte, and PATTERN (grep -F) shown
clean() {
    if [ "$(raw "$2")" -eq 0 ] && grep -qF -- "$3" "$2"; then
        pass "$1"
    else
        fail "$1: $(raw "$2") raw control bytes, or not the escaped text"
        LC_ALL=C cat -A "$2" | show_log
    fi
}

"$TIMEOUT" -k 5 120 "$prog" train $small --steps 5 --save good.h5 >out 2>&1
check "a real checkpoint to start from" test $? -eq 0
cp good.h5 evil.h5
"$tool" set-attr evil.h5 seed "$evil" && "$tool" set-attr evil.h5 data.file "$(printf 'd\377ata')"
check "... given an attribute with control bytes and one that is not UTF-8" test $? -eq 0
if command -v h5copy >/dev/null 2>&1; then
    cp good.h5 src.h5
    h5copy -i src.h5 -o evil.h5 -s /params/fc1.weight -d "/params/$evil" 2>/dev/null
fi
"$TIMEOUT" -k 5 60 "$prog" ckpt info evil.h5 >info.out 2>&1
clean "ckpt info: the attribute's control bytes escaped" info.out 'seed = x\r\e[Kchecksums: all 12 datasets verify\e[8m'
check "... the bytes that are not UTF-8 too" grep -qF 'data.file = d\xffata' info.out
if command -v h5copy >/dev/null 2>&1; then
    check "... and the dataset's name" grep -qF '/params/x\r\e[Kchecksums' info.out
fi

cp good.h5 step.h5
"$tool" set-attr step.h5 step "$(printf '5\r\033[Kresumed fine')"
"$TIMEOUT" -k 5 60 "$MPIRUN" -np 1 "$prog" train $small --steps 10 --resume step.h5 >resume.out 2>&1
check "a resume from a checkpoint with such a step is refused (exit $?)" grep -q "meshgrad: error:" resume.out
clean "... its message quoting the value escaped" resume.out 'attribute "step" is "5\r\e[Kresumed fine"'

awk 'BEGIN { for (i = 0; i < 300; i++) printf "line %d\n", i }' >t.txt
"$TIMEOUT" -k 5 60 "$prog" data text2h5 t.txt t.h5 --source "$evil" >/dev/null 2>&1
"$TIMEOUT" -k 5 60 "$prog" data info t.h5 >data.out 2>&1
clean "data info: a --source with control bytes, escaped" data.out 'source: x\r\e[Kchecksums'

mkdir dumps
printf '{"meshgrad_flight":1,"reason":"SIGUSR2\\u001b[2J\\r","rank":0,"world":1,"now_ns":2000000000,"step":3,"comms":[{"name":"MPI_COMM_WORLD","dim":-1,"ordinal":0,"ranks":[0],"seq":1,"sends":[0],"recvs":[0]}],"entries":[{"id":1,"comm":0,"seq":1,"op":"all_reduce\\u001b[2K\\rall fine","peer":-1,"bytes":4,"dtype":"float32","step":3,"state":"done","post_ns":1,"start_ns":1,"end_ns":2}]}\n' >dumps/rank-0.json
"$TIMEOUT" -k 5 60 "$prog" trace analyze dumps >trace.out 2>&1
clean "trace analyze: a dump's reason and op with control bytes, escaped" trace.out 'all_reduce\e[2K\rall fine'
check_summary
