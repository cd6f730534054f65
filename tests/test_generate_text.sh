#!/bin/sh
# test_generate_text.sh: `meshgrad generate` on a GPT trained here for a few
# steps (the demo's data/mobydick-demo.conf cut to 2 layers, 2 heads, embd 32,
# ctx 32, 30 steps) and saved:
# - the same seed gives the same text on 1 rank, 2 ranks dp, 2 ranks tp, 2
#   ranks fsdp and 2x2 dp,tp (sampling at temperature 1, and with top-k 5 at
#   temperature 0.8), 100 bytes, so the window slides (ctx 32) several times;
#   another seed gives other text;
# - greedy (temperature 0) gives the same text for every seed and mesh;
# - the output is the prompt, then exactly --tokens bytes; a prompt longer than
#   ctx is cropped with a note on stderr; the speed is printed on stderr;
# - bad input is one `meshgrad: error:` line and a non-zero exit: no --resume,
#   a missing or corrupt checkpoint, an MLP checkpoint, one whose attributes
#   count fewer layers than it holds, one with an extra dataset, --tokens -1,
#   --temperature -1 and nan, --top-k -2, and a tp degree that cannot split
#   the heads; stdout on a full disk or closed stops the run (exit 1, named);
# - on a terminal (script(1) gives mpirun one), the text, its newline, then
#   the speed line, in 8 runs (mpirun passes a rank's stdout and stderr on
#   in either order: the line landed inside the text in about a third of runs).
#   Prints a Check-style summary line.
. "$(dirname "$0")/check.sh"
program_test_env generate
: "${top_srcdir:=$(dirname "$0")/..}"
mobydick=$top/data/mobydick.h5
check_failed() { [ -s "$tmp/err" ] && sed 's|^|  err> |' "$tmp/err"; }

# the default job's config (scripts/demo.sh), cut down
"$TIMEOUT" -k 5 120 "$MPIRUN" -np 1 "$prog" train --config "$top_srcdir/data/mobydick-demo.conf" \
    --mesh 1 --data "$mobydick" --layers 2 --heads 2 --embd 32 --ctx 32 --batch 8 --steps 30 \
    --warmup 5 --seed 5 --log-every 0 --threads 1 --save "$tmp/gpt.h5" >"$tmp/train.out" 2>&1
check "a GPT trains 30 steps (data/mobydick-demo.conf, cut down) and saves" test -f "$tmp/gpt.h5"
before=$(cksum <"$tmp/gpt.h5")

# gen TAG NP ARGS...: stdout in $tmp/TAG.txt, stderr in $tmp/err; the exit status
gen() {
    tag=$1 np=$2
    shift 2
    "$TIMEOUT" -k 5 60 "$MPIRUN" -np "$np" "$prog" generate --resume "$tmp/gpt.h5" --threads 1 \
        "$@" >"$tmp/$tag.txt" 2>"$tmp/err"
}

args="--prompt CALL --tokens 100 --seed 7"
gen one 1 $args
check "1 rank: exit 0" test $? -eq 0
check "the output is the prompt, then 100 bytes (and a newline)" \
    test "$(head -c 4 "$tmp/one.txt")" = CALL -a "$(wc -c <"$tmp/one.txt")" -eq 105
check "the speed is on stderr" grep -q "tokens/s" "$tmp/err"
check "the window slid (ctx 32, 104 tokens)" grep -q " [1-9][0-9]* window slides" "$tmp/err"
for run in "dp 2 --parallel dp" "tp 2 --parallel tp" "fsdp 2 --parallel fsdp" \
           "dptp 4 --mesh 2x2 --parallel dp,tp"; do
    set -- $run
    tag=$1 np=$2
    shift 2
    gen "$tag" "$np" $args "$@"
    check "seed 7 on $np ranks ($*): the same text as on 1 rank" cmp -s "$tmp/one.txt" "$tmp/$tag.txt"
done
gen other 1 --prompt CALL --tokens 100 --seed 8
check "seed 8 gives other text" sh -c "! cmp -s '$tmp/one.txt' '$tmp/other.txt'"

topk="--prompt The --tokens 100 --seed 3 --top-k 5 --temperature 0.8"
gen k1 1 $topk
gen k2 2 $topk --parallel tp
check "top-k 5 at temperature 0.8: 2 ranks tp give 1 rank's text" cmp -s "$tmp/k1.txt" "$tmp/k2.txt"
check "... which is not the text of temperature 1" sh -c "! cmp -s '$tmp/k1.txt' '$tmp/one.txt'"

gen g1 1 --prompt CALL --tokens 60 --temperature 0 --seed 1
gen g2 1 --prompt CALL --tokens 60 --temperature 0 --seed 99
gen g3 2 --prompt CALL --tokens 60 --temperature 0 --parallel tp
check "greedy: the same text for every seed" cmp -s "$tmp/g1.txt" "$tmp/g2.txt"
check "greedy: the same text on 2 ranks tp" cmp -s "$tmp/g1.txt" "$tmp/g3.txt"

# on a terminal: what a run to a file prints, then the speed line, every time
if command -v script >/dev/null 2>&1; then
    order=ok
    for seed in 1 2 3 4 5 6 7 8; do
        gen tty$seed 1 --prompt CALL --tokens 20 --seed "$seed"
        "$TIMEOUT" -k 5 60 script -qec "'$MPIRUN' -np 1 '$prog' generate --resume '$tmp/gpt.h5' \
            --threads 1 --prompt CALL --tokens 20 --seed $seed" /dev/null </dev/null >"$tmp/tty.out" 2>&1
        tr -d '\r' <"$tmp/tty.out" >"$tmp/got"
        { tr -d '\r' <"$tmp/tty$seed.txt"; grep -a '^generate: 20 tokens' "$tmp/got"; } >"$tmp/want"
        if ! cmp -s "$tmp/got" "$tmp/want"; then
            order="seed $seed: the terminal got $(od -c "$tmp/got" | tail -n 4 | tr -s ' \n' ' ')"
            break
        fi
    done
    check "on a terminal: the text, a newline, then the speed line, in 8 runs ($order)" \
        test "$order" = ok
else
    echo "skip: no script(1) here: the terminal check is not run"
fi

long=$(awk 'BEGIN { for (i = 0; i < 10; i++) printf "Call me Ishmael. " }')
gen long 1 --prompt "$long" --tokens 10
check "a prompt of 170 bytes (ctx 32): exit 0" test $? -eq 0
check "... cropped to its last 32 bytes, said on stderr" grep -q "using its last 32" "$tmp/err"
check "... and printed whole" test "$(wc -c <"$tmp/long.txt")" -eq $((170 + 10 + 1))

"$TIMEOUT" -k 5 120 "$MPIRUN" -np 1 "$prog" train --model mlp --steps 2 --log-every 0 --threads 1 \
    --data "$data" --save "$tmp/mlp.h5" >"$tmp/mlp.out" 2>&1
echo "not a checkpoint" >"$tmp/bad.h5"
head -c 20000 "$tmp/gpt.h5" >"$tmp/cut.h5"
g="$prog generate --threads 1"
check_refused "no --resume" 1 "no checkpoint given" $g --prompt x
check_refused "a missing checkpoint" 1 "$tmp/none.h5" $g --resume "$tmp/none.h5"
check_refused "a file that is not a checkpoint" 1 "bad.h5" $g --resume "$tmp/bad.h5"
check_refused "a truncated checkpoint" 2 "cut.h5" $g --resume "$tmp/cut.h5"
check_refused "an MLP checkpoint" 1 "model of kind mlp, not a GPT" $g --resume "$tmp/mlp.h5"
# a checkpoint with more weights than its attributes count (model.layers 1 on
# a 2-layer GPT): loaded in part before; refused as generate reads the
# attributes, by the names of the weights the file holds (a dataset beside
# the parameters: one rule of checkpoint_load.c)
cp "$tmp/gpt.h5" "$tmp/fewer.h5"
"$tool" set-attr "$tmp/fewer.h5" model.layers 1
check_refused "model.layers 1 on a checkpoint of 2 layers" 1 \
    "fewer.h5: attribute model.layers is 1 but the file holds the weights of 2 blocks" \
    $g --resume "$tmp/fewer.h5"
if command -v h5copy >/dev/null 2>&1; then
    cp "$tmp/gpt.h5" "$tmp/extra.h5"
    h5copy -i "$tmp/gpt.h5" -o "$tmp/extra.h5" -s /params/wte -d /params/wte.extra 2>/dev/null ||
        fail "h5copy could not add a dataset"
    check_refused "a checkpoint with an extra dataset" 1 \
        "cannot load .*extra.h5: it holds /params/wte.extra, which is not among" \
        $g --resume "$tmp/extra.h5"
fi
check_refused "--tokens -1" 1 "--tokens -1" $g --resume "$tmp/gpt.h5" --tokens -1
# 2^62 tokens overflowed the size of the token buffer (a heap overrun, abort)
check_refused "--tokens 2^62" 1 "--tokens 4611686018427387904: give a whole number from 0 to 2147483647" \
    $g --resume "$tmp/gpt.h5" --tokens 4611686018427387904
check_refused "--threads 2^32" 1 "--threads 4294967296: give a whole number from 0 to 2147483647" \
    $g --resume "$tmp/gpt.h5" --threads 4294967296
check_refused "--temperature -1" 1 "--temperature -1" $g --resume "$tmp/gpt.h5" --temperature -1
check_refused "--temperature nan" 1 "--temperature nan" $g --resume "$tmp/gpt.h5" --temperature nan
check_refused "--top-k -2" 1 "--top-k -2" $g --resume "$tmp/gpt.h5" --top-k -2
check_refused "tp 4 with 2 heads" 4 "cannot split 2 heads" $g --resume "$tmp/gpt.h5" --parallel tp
# stdout that takes no more text (a full disk, closed): it stops within a
# buffer's bytes with one error and exit 1 (it sampled all 10^8 bytes, for hours)
for to in full closed; do
    if [ $to = full ]; then
        "$TIMEOUT" -k 5 30 $g --resume "$tmp/gpt.h5" --tokens 100000000 >/dev/full 2>"$tmp/err"
    else
        "$TIMEOUT" -k 5 30 $g --resume "$tmp/gpt.h5" --tokens 100000000 >&- 2>"$tmp/err"
    fi
    rc=$?
    check "--tokens 10^8 with stdout $to: stops, exit 1 ($rc), one error naming stdout" \
        sh -c "test $rc -eq 1 && test \$(grep -c 'meshgrad: error:' '$tmp/err') -eq 1 &&
               grep -q 'meshgrad: error: generate: stdout took no more of the text' '$tmp/err'"
done
# the sample buffer holds 2 ctx tokens, not --tokens of them (8 GB for 2^31):
# in 2 GB of address space, 2^31 tokens run until stdout takes no more
( ulimit -v 2000000 && "$TIMEOUT" -k 5 30 $g --resume "$tmp/gpt.h5" --tokens 2147483647 \
    >/dev/full 2>"$tmp/err" )
check "--tokens 2^31 in 2 GB of address space: runs, stops at stdout's end ($?)" \
    grep -q 'meshgrad: error: generate: stdout took no more of the text after' "$tmp/err"
check "the checkpoint is untouched by all this" test "$(cksum <"$tmp/gpt.h5")" = "$before"
check_summary
