#!/bin/sh
# test_bin2h5.sh: `meshgrad data bin2h5` (src/cli/data_bin.c) on token files
# made here (perl packs them): 4000 tokens below 512, as nanoGPT writes them
# (raw uint16) and as llm.c does (its 1024-byte header, magic 20240520,
# version 1, the count, then the tokens).
# - each converts (llm.c's found by its magic, nanoGPT's as raw) into the same
#   uint16 datasets, split 90/10 as text2h5 splits, with vocab_size 512;
#   --val takes /val from a second file;
# - `meshgrad train --model gpt` takes one step on each, on 1 and 2 ranks;
# - hostile files are refused with one line, exit 1, no OUT written: a count
#   past the file, a count short of it, a negative count, another magic
#   (--format llmc), another version, llm.c's uint32 kind, a file shorter
#   than the header, an odd number of bytes, a token past --vocab-size, too
#   few tokens to split, a directory, a FIFO (refused at once, never opened
#   to wait for a writer, as every reader of io/files.h); and bad flags,
#   --val-fraction 0 among them (no /val, which train evaluates).
# Prints a Check-style summary line.
. "$(dirname "$0")/check.sh"
program_test_env bin2h5

if ! command -v perl >/dev/null 2>&1; then
    echo "skip: no perl here to write the token files"
    check_summary
    exit
fi
cd "$tmp" || exit 1
# tokens i = (37 i + i / 7) mod 512; f: raw, llm.c's, its header with fields changed
perl -e '
    my @t = map { ($_ * 37 + int($_ / 7)) % 512 } 0 .. 3999;
    sub put { my ($name, $data) = @_; open(my $f, ">", $name) or die; binmode $f; print $f $data; close $f }
    my $tok = pack("v*", @t), $few = pack("v*", @t[0 .. 99]);
    put("raw.bin", $tok);
    put("llmc.bin", pack("V256", 20240520, 1, 4000) . $tok);
    put("val.bin", pack("v*", @t[0 .. 499]));
    put("past.bin", pack("V256", 20240520, 1, 200) . $few);
    put("short.bin", pack("V256", 20240520, 1, 50) . $few);
    put("negative.bin", pack("V256", 20240520, 1, -5) . $few);
    put("magic.bin", pack("V256", 12345, 1, 100) . $few);
    put("version.bin", pack("V256", 20240520, 2, 100) . $few);
    put("u32.bin", pack("V256", 20240801, 7, 100) . pack("V*", @t[0 .. 99]));
    put("header.bin", pack("V3", 20240520, 1, 3));
    put("odd.bin", $few . "x");
    put("big.bin", pack("v*", @t[0 .. 49], 600, @t[51 .. 99]));
    put("three.bin", pack("v*", 1, 2, 3));
'

bin2h5() { "$prog" data bin2h5 "$@" --vocab-size 512 >"$tmp/out" 2>&1; }

bin2h5 raw.bin raw.h5
check "nanoGPT's raw tokens: exit $?: $(cat "$tmp/out")" \
    grep -q "^raw.h5: train 3600 tokens, val 400 tokens (uint16, from raw file), vocabulary 512, largest token 511" "$tmp/out"
bin2h5 llmc.bin llmc.h5
check "llm.c's file, found by its magic: $(cat "$tmp/out")" \
    grep -q "^llmc.h5: train 3600 tokens, val 400 tokens (uint16, from llm.c file)" "$tmp/out"
check "... the same tokens as the raw file's" sh -c 'h5diff raw.h5 llmc.h5 /train/tokens && h5diff raw.h5 llmc.h5 /val/tokens'
check "... stored as uint16" sh -c 'h5dump -H -d /train/tokens llmc.h5 | grep -q H5T_STD_U16LE'
check_output "... meshgrad data info reads it" sh -c "'$prog' data info llmc.h5 | grep -x '/train: 3600 tokens, vocabulary 512'"
bin2h5 raw.bin both.h5 --val val.bin
check "--val: all of IN as /train, all of VAL as /val: $(cat "$tmp/out")" \
    grep -q "^both.h5: train 4000 tokens, val 500 tokens" "$tmp/out"

gpt="train --model gpt --layers 1 --heads 2 --embd 16 --ctx 16 --batch 4 --steps 1 --warmup 0"
gpt="$gpt --threads 1 --log-every 1"
for f in raw llmc; do
    for np in 1 2; do
        # shellcheck disable=SC2086
        "$TIMEOUT" -k 5 60 "$MPIRUN" -np $np "$prog" $gpt --data "$f.h5" >"$tmp/train.out" 2>&1
        check "a GPT trains one step on $f.h5 on $np rank(s): exit $?" \
            grep -q "^done: 1 steps" "$tmp/train.out"
    done
done

# refused FILE PATTERN [FLAGS]: one error line matching PATTERN, exit 1, no OUT
refused() {
    file=$1 pattern=$2
    shift 2
    rm -f out.h5
    "$TIMEOUT" 60 "$prog" data bin2h5 "$file" out.h5 --vocab-size 512 "$@" >"$tmp/out" 2>&1
    rc=$?
    if [ "$rc" -eq 1 ] && [ "$(grep -c 'meshgrad: error:' "$tmp/out")" -eq 1 ] &&
        grep -q "meshgrad: error: bin2h5: .*$pattern" "$tmp/out" && [ ! -e out.h5 ]; then
        pass "$file refused: $(cat "$tmp/out")"
    else
        fail "$file (exit $rc, want 1 with /$pattern/ in one line and no out.h5)"
        show_log "$tmp/out"
    fi
}
refused past.bin "declares 200 tokens (400 bytes), but the file holds 200 bytes after the header: it is cut short"
refused short.bin "declares 50 tokens (100 bytes), but the file holds 200 bytes after the header: the rest is not tokens"
refused negative.bin "declares -5 tokens: the header is wrong"
refused magic.bin "starts with 12345, not llm.c's magic 20240520" --format llmc
refused version.bin "llm.c header version 2; only version 1"
refused u32.bin "magic 20240801, of uint32 tokens"
refused header.bin "has 12 bytes, fewer than llm.c's header of 1024"
refused odd.bin "an odd number of bytes (201)"
refused big.bin "token 50 is 600, outside the vocabulary of 512: give the tokenizer's size with --vocab-size"
refused three.bin "has 3 tokens: too few for a train and a val split"
refused "$tmp" "cannot open token file $tmp: it is a directory"
mkfifo fifo.bin && refused fifo.bin "cannot open token file fifo.bin: it is a FIFO (a named pipe), not a regular file"
refused missing.bin "cannot open token file missing.bin: No such file"
"$prog" data bin2h5 raw.bin out.h5 --format bits >"$tmp/out" 2>&1
check "--format bits: a usage error, exit $?" grep -q "meshgrad: error: bin2h5: --format 'bits' is not auto, llmc or raw" "$tmp/out"
"$prog" data bin2h5 raw.bin out.h5 --vocab-size 512 --val-fraction 0 >"$tmp/out" 2>&1
check "--val-fraction 0 (no val split, which train evaluates): a usage error, exit $?" \
    sh -c "grep -q \"meshgrad: error: bin2h5: --val-fraction '0' is not a number in (0, 1)\" '$tmp/out' && test ! -e out.h5"
"$prog" data bin2h5 raw.bin out.h5 --vocab-size 70000 >"$tmp/out" 2>&1
check "--vocab-size 70000: refused, exit $?" grep -q "meshgrad: error: bin2h5: --vocab-size '70000': give a whole number from 1 to 65536" "$tmp/out"
"$prog" data bin2h5 raw.bin raw.bin >"$tmp/out" 2>&1
check "OUT the input file: refused, exit $?, the input untouched" \
    sh -c "grep -q 'meshgrad: error: bin2h5: OUT raw.bin is an input file' '$tmp/out' && test \$(wc -c <raw.bin) -eq 8000"
check_summary
