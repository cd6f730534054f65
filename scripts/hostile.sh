#!/bin/sh
# hostile.sh [--quick] [--only PATTERN] [--list] [--limit S]: a bounded matrix
# of what a hostile user (or a damaged file) hands meshgrad, each case in a
# sandbox folder of its own under a time limit (default 60 s, 30 with
# --quick), classified as
#   refused  the command exits 1 or 2 with exactly one "meshgrad: error:" line
#            (or, for a job that must stop, ends non-zero by itself), and what
#            the case checks afterwards holds (the planted file is unchanged...);
#   correct  the command exits 0 and what the case checks holds (the output
#            escaped, nothing left behind...);
#   hang     the time limit ended it;
#   crash    a signal ended it, it exited above 2, or its output holds a
#            segmentation fault, an abort or a sanitizer report;
#   harmful  a file outside its sandbox changed (a guard folder of victims:
#            a text file, the data set, a checkpoint; the symbolic links and
#            the paths of the cases point there), or appeared or went there;
#   wrong    none of these: refused what it should take, or took what it
#            should refuse.
# The families: every output path (--metrics, --save, --trace, --flight-dir's
# dump, text2h5 OUT, csv2h5 --out, ckpt bench's file, eval --logits, ckpt
# export's OUT) over a planted symbolic link, a FIFO, a device node (mknod,
# root), the data set, a directory and a file that is not the program's, and
# --save over another run's checkpoint
# (without and with --overwrite); inputs that are a FIFO, a copy of /dev/zero,
# a truncated gzip; --val-fraction 0; hostile checkpoints for ckpt info and
# resume (2^62 elements, 3000 nested groups, no checksum, unwritten chunks, an
# external link, a NaN, an extra dataset, control bytes in an attribute, a
# GPT's model.layers of a million) and a train of 1e8 layers;
# hostile dumps for trace analyze, and 300 ranks' dumps of 113 MB in 1 GB of address
# space; a full disk (a 200 kB tmpfs, root); SIGSTOP
# of a rank; SIGTERM of ckpt bench. --quick runs the cases marked quick (the
# short run of make check, tests/test_hostile.sh); --only runs the cases whose
# name matches PATTERN (grep -E); --list prints the cases.
# The last line: "hostile: T tried, R refused, C correct, H hang, X crash,
# M harmful, W wrong"; the exit status is 0 when H, X, M and W are 0.
# Environment: BUILD (default build), MPIRUN (mpirun), KEEP=1 keeps the files.
set -u
cd "$(dirname "$0")/.." || exit 1
quick=0 only= list=0 limit=
while [ $# -gt 0 ]; do
    case $1 in
    --quick) quick=1; shift ;;
    --list) list=1; shift ;;
    --only) only=${2:?--only takes a pattern}; shift 2 ;;
    --limit)
        case ${2:-} in '' | *[!0-9]* | 0*) echo "hostile.sh: --limit takes seconds >= 1" >&2; exit 2 ;; esac
        limit=$2; shift 2 ;;
    -h | --help) sed -n '2,33p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
    *) echo "usage: scripts/hostile.sh [--quick] [--only PATTERN] [--list] [--limit S]" >&2; exit 2 ;;
    esac
done
[ -n "$limit" ] || limit=$([ "$quick" = 1 ] && echo 30 || echo 60)
: "${BUILD:=build}" "${MPIRUN:=mpirun}"
build=$(cd "$BUILD" && pwd) || exit 1
here=$(cd "$(dirname "$0")/.." && pwd)
prog=$build/meshgrad tool=$build/tests/train_ckpt_tool data=$build/data/digits.h5
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
export OMPI_MCA_rmaps_base_oversubscribe=1 OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1
root=0
[ "$(id -u)" -eq 0 ] && root=1
small="--hidden 16 --batch 32 --log-every 0 --threads 1"

# ---- the cases: "NAME QUICK" (QUICK 1: in --quick), each a function case_NAME --
cases="
metrics_symlink 1
metrics_fifo 1
metrics_device 1
metrics_dataset 0
metrics_dir 0
metrics_notours 0
metrics_stdout 1
save_symlink 1
save_fifo 0
save_device 0
save_dataset 1
save_notours 0
save_resume_same 0
save_other_model 1
save_overwrite 0
trace_symlink 0
trace_fifo 1
flight_fifo 1
flight_symlink 0
flight_notours 0
text2h5_out_symlink 0
text2h5_out_dataset 1
csv2h5_out_fifo 0
logits_fifo 0
export_fifo 0
bench_notours 0
text2h5_fifo 1
text2h5_zero 1
text2h5_truncated 1
text2h5_cut20 0
text2h5_valzero 0
csv2h5_fifo 0
data_fifo 0
info_fifo 0
info_huge 0
info_nest 0
info_strip 0
info_unwritten 0
info_elink 0
info_nan 1
info_escape 1
resume_extra 1
resume_nan 0
resume_escape 0
gpt_layers_lie 1
train_huge_layers 1
trace_dump_fifo 0
trace_dump_ranks 0
trace_dump_nested 0
trace_dump_escape 0
trace_dump_many 0
trace_dump_large 0
full_save 0
full_text2h5 0
sigstop 0
bench_sigterm 0
"
if [ "$list" = 1 ]; then
    printf '%s\n' "$cases" | awk 'NF { print $1 ($2 ? " (quick)" : "") }'
    exit 0
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/mg-hostile.XXXXXX")
cleanup() {
    for m in "$tmp"/case/*/full; do mountpoint -q "$m" 2>/dev/null && umount "$m"; done
    [ "${KEEP:-0}" = 1 ] || rm -rf "$tmp"
}
trap cleanup EXIT
outside=$tmp/outside # the guard: nothing in it may change
mkdir -p "$outside" "$tmp/case"
echo "a victim" >"$outside/victim.txt"
cp "$data" "$outside/data.h5"
if ! "$prog" train --data "$data" $small --steps 5 --save "$outside/good.h5" >"$tmp/setup.out" 2>&1 ||
    ! "$prog" train --model gpt --data "$build/data/mobydick.h5" --layers 2 --heads 2 --embd 32 \
        --ctx 16 --batch 4 --steps 2 --log-every 0 --save "$outside/gpt.h5" >>"$tmp/setup.out" 2>&1; then
    cat "$tmp/setup.out"
    exit 1
fi
snapshot() { (cd "$outside" && find . -printf '%p %y %i %s %m\n' | sort && find . -type f -exec cksum {} + | sort); }

# try EXPECT COMMAND...: the case's command, in its sandbox, under the limit
# (its output in out, its status in rc); the command "train" is a 2-step
# run of `meshgrad train` on one process, "mpi_train" the same on 2 ranks
# (flags after them are added; a flag given again takes the later value).
# EXPECT: refuse, ok, or ends (a job that must end by itself, non-zero).
try() {
    expect=$1
    shift
    case $1 in
    train) shift; set -- "$prog" train --data "$data" $small --steps 2 "$@" ;;
    mpi_train) shift; set -- "$MPIRUN" -np 2 "$prog" train --data "$data" $small --steps 2 "$@" ;;
    esac
    timeout -k 5 "$limit" "$@" >out 2>&1 </dev/null
    rc=$?
}
# holds CONDITION...: what the case checks after its command (all must hold)
holds() { "$@" || held=0; }
raw() { LC_ALL=C tr -d '\n\t -~\200-\377' <"$1" | wc -c; }
unchanged() { cmp -s "$1" "$2"; }

dev_node() { [ "$root" = 1 ] && mknod "$1" c 1 "$2" 2>/dev/null; }
skip() { skipped="$1"; }

# -- outputs ----------------------------------------------------------------------
case_metrics_symlink() { ln -s "$outside/victim.txt" m.jsonl; try refuse train --metrics m.jsonl; }
case_metrics_fifo() { mkfifo m.jsonl; try refuse train --metrics m.jsonl; }
case_metrics_device() { dev_node null 3 || { skip "mknod needs root"; return; }; try refuse train --metrics null; holds test -c null; }
case_metrics_dataset() { try refuse train --metrics "$outside/data.h5"; }
case_metrics_dir() { mkdir m; try refuse train --metrics m; }
case_metrics_notours() { echo notes >notes.txt; try refuse train --metrics notes.txt; holds grep -qx notes notes.txt; }
case_metrics_stdout() { try ok train --metrics /dev/stdout; holds grep -q '^{"step":2,"loss"' out; }
case_save_symlink() { ln -s "$outside/good.h5" s.h5; try refuse mpi_train --save s.h5; holds test -L s.h5; }
case_save_fifo() { mkfifo s.h5; try refuse train --save s.h5; }
case_save_device() { dev_node null 3 || { skip "mknod needs root"; return; }; try refuse train --save null; holds test -c null; }
case_save_dataset() { try refuse mpi_train --data "$outside/data.h5" --save "$outside/data.h5"; }
case_save_notours() { echo notes >s.h5; try refuse train --save s.h5; holds grep -qx notes s.h5; }
case_save_resume_same() {
    cp "$outside/good.h5" r.h5
    try ok mpi_train --steps 8 --resume r.h5 --save r.h5
    holds sh -c "'$prog' ckpt info r.h5 | grep -q 'step = 8'"
}
# a new run's --save FILE that is a checkpoint of another run (here of a
# wider MLP): replaced silently before; refused unless --overwrite
case_save_other_model() {
    cp "$outside/good.h5" s.h5
    try refuse mpi_train --hidden 8 --save s.h5
    holds unchanged s.h5 "$outside/good.h5"
}
case_save_overwrite() {
    cp "$outside/good.h5" s.h5
    try ok train --hidden 8 --save s.h5 --overwrite
    holds sh -c "'$prog' ckpt info s.h5 | grep -q 'step = 2'"
}
case_trace_symlink() { ln -s "$outside/victim.txt" t.json; try refuse train --steps 4 --trace t.json; }
case_trace_fifo() { mkfifo t.json; try refuse train --steps 4 --trace t.json; }
case_flight_fifo() { mkdir fl && mkfifo fl/rank-0.json; try refuse train --flight-dir fl; }
case_flight_symlink() { mkdir fl && ln -s "$outside/victim.txt" fl/rank-0.json; try refuse train --flight-dir fl; }
case_flight_notours() {
    mkdir fl && echo notes >fl/rank-0.json
    try ok train --flight-dir fl
    holds grep -qx notes fl/rank-0.json
}
case_text2h5_out_symlink() {
    printf 'some text for a data set\n%.0s' 1 2 3 4 5 6 7 8 >t.txt
    ln -s "$outside/data.h5" o.h5
    try refuse "$prog" data text2h5 t.txt o.h5
}
case_text2h5_out_dataset() {
    printf 'some text for a data set\n%.0s' 1 2 3 4 5 6 7 8 >t.txt
    try refuse "$prog" data text2h5 t.txt "$outside/victim.txt"
}
case_logits_fifo() {
    printf 'Call me Ishmael.' >t.txt
    mkfifo l.h5
    try refuse "$prog" eval --resume "$outside/gpt.h5" --text t.txt --logits l.h5
}
case_export_fifo() { mkfifo o.st; try refuse "$prog" ckpt export --format safetensors "$outside/gpt.h5" o.st; }
case_csv2h5_out_fifo() {
    printf '0,1,2,3,1\n4,5,6,7,0\n' >s.csv
    mkfifo o.h5
    try refuse "$prog" data csv2h5 --in s.csv --out o.h5 --shape 2x2
}
case_bench_notours() {
    cp "$outside/good.h5" ckpt-bench.h5
    try refuse "$prog" ckpt bench --params 1M --dir .
    holds unchanged ckpt-bench.h5 "$outside/good.h5"
}

# -- inputs -----------------------------------------------------------------------
case_text2h5_fifo() { mkfifo in.txt; try refuse "$prog" data text2h5 in.txt o.h5; }
case_text2h5_zero() {
    dev_node zero 5 || { skip "mknod needs root"; return; }
    try refuse "$prog" data text2h5 zero o.h5
}
gz_text() { awk 'BEGIN { for (i = 0; i < 20000; i++) printf "line %d of a longer text\n", i }' | gzip -c; }
case_text2h5_truncated() {
    gz_text | head -c 30000 >cut.gz
    try refuse "$prog" data text2h5 cut.gz o.h5
    holds test ! -e o.h5
}
case_text2h5_cut20() { gz_text | head -c 20 >cut.gz; try refuse "$prog" data text2h5 cut.gz o.h5; }
case_text2h5_valzero() {
    printf 'some text for a data set\n%.0s' 1 2 3 4 5 6 7 8 >t.txt
    try refuse "$prog" data text2h5 t.txt o.h5 --val-fraction 0
}
case_csv2h5_fifo() { mkfifo in.csv; try refuse "$prog" data csv2h5 --in in.csv --out o.h5 --shape 2x2; }
case_data_fifo() { mkfifo d.h5; try refuse train --data d.h5; }
case_info_fifo() { mkfifo c.h5; try refuse "$prog" ckpt info c.h5; }

# -- hostile checkpoints ------------------------------------------------------------
edited() { cp "$outside/good.h5" c.h5 && "$tool" "$@" >/dev/null 2>&1; }
case_info_huge() { edited huge c.h5; try refuse "$prog" ckpt info c.h5; }
case_info_nest() { edited nest c.h5 3000; try refuse "$prog" ckpt info c.h5; }
case_info_strip() { edited strip c.h5 params/fc1.weight; try refuse "$prog" ckpt info c.h5; }
case_info_unwritten() { edited unwritten c.h5 params/fc1.weight; try refuse "$prog" ckpt info c.h5; }
case_info_elink() { edited elink c.h5 params/fc1.weight "$outside/good.h5"; try refuse "$prog" ckpt info c.h5; }
case_info_nan() { edited set c.h5 params/fc1.weight 0 nan; try refuse "$prog" ckpt info c.h5; }
evil=$(printf 'x\r\033[Kchecksums: all 12 datasets verify')
case_info_escape() {
    edited set-attr c.h5 seed "$evil"
    try ok "$prog" ckpt info c.h5
    holds test "$(raw out)" -eq 0
}
case_resume_extra() {
    cp "$outside/good.h5" c.h5
    command -v h5copy >/dev/null 2>&1 || { skip "no h5copy"; return; }
    h5copy -i "$outside/good.h5" -o c.h5 -s /params/fc1.bias -d /params/fc3.bias
    try refuse mpi_train --steps 8 --resume c.h5
}
# a GPT checkpoint whose model.layers says a million (it built a model of 3 GB
# and more before checking anything), and a train of 1e8 layers (5 GB before
# any check): refused at once, in bounded memory
case_gpt_layers_lie() {
    cp "$outside/gpt.h5" g.h5 && "$tool" set-attr g.h5 model.layers 1000000 >/dev/null 2>&1
    try refuse "$prog" generate --resume g.h5 --tokens 5
}
case_train_huge_layers() {
    try refuse "$prog" train --model gpt --data "$build/data/mobydick.h5" --layers 100000000 --steps 1
}
case_resume_nan() { edited set c.h5 params/fc2.bias 1 nan; try refuse train --steps 8 --resume c.h5; }
case_resume_escape() {
    edited set-attr c.h5 step "$(printf '5\r\033[Kresumed fine')"
    try refuse train --steps 8 --resume c.h5
    holds test "$(raw out)" -eq 0
}

# -- hostile dumps ---------------------------------------------------------------------
dump() { # JSON after the header
    mkdir -p fl
    printf '{"meshgrad_flight":1,"reason":"test","rank":0,"world":2,"now_ns":2000000000,"step":3,%s}\n' "$1" >fl/rank-0.json
}
case_trace_dump_fifo() { mkdir fl && mkfifo fl/rank-0.json; try refuse "$prog" trace analyze fl; }
case_trace_dump_ranks() { dump '"comms":[{"name":"x","dim":0,"ordinal":0,"ranks":[-7,0,99999],"seq":1}],"entries":[]'; try refuse "$prog" trace analyze fl; }
case_trace_dump_nested() {
    dump "\"comms\":$(awk 'BEGIN { for (i = 0; i < 5000; i++) printf "["; for (i = 0; i < 5000; i++) printf "]" }'),\"entries\":[]"
    try refuse "$prog" trace analyze fl
}
# 300 ranks' dumps that disagree on who is in the communicator (each names
# rank 0 alone): the report names every rank (it printed "Ranks  wait" with
# no rank, once a rank) in an address space of 1 GB
case_trace_dump_many() {
    mkdir fl
    for r in $(seq 0 299); do
        printf '{"meshgrad_flight":1,"reason":"test","rank":%d,"world":300,"now_ns":2000000000,"step":3,"comms":[{"name":"meshgrad mesh","dim":-1,"ordinal":0,"ranks":[0],"seq":5}],"entries":[{"comm":0,"seq":5,"op":"all_reduce","peer":-1,"bytes":4,"dtype":"float32","step":3,"state":"started","post_ns":1,"start_ns":1,"end_ns":0}]}\n' "$r" >"fl/rank-$r.json"
    done
    try ok sh -c 'ulimit -v 1000000 && exec "$0" trace analyze fl' "$prog"
    holds sh -c "! grep -q 'Ranks  ' out && grep -q 'Rank 299 waits in all_reduce' out"
}
# 300 ranks' dumps of the recorder's default 2048 records (113 MB): analysed in an
# address space of 1 GB, rank 137 named behind (a reader that held the dumps took
# 2.6 GB for 20 of them)
case_trace_dump_large() {
    mkdir fl
    awk -v W=300 -v N=2048 -v behind=137 -v dir=fl -f "$here/tests/trace_dumps.awk" || { skip "awk failed"; return; }
    try ok sh -c 'ulimit -v 1000000 && exec "$0" trace analyze fl' "$prog"
    holds grep -q 'Rank 137 is behind: it is in no collective' out
}
case_trace_dump_escape() {
    dump '"comms":[{"name":"w\u001b[2J","dim":-1,"ordinal":0,"ranks":[0],"seq":1}],"entries":[{"comm":0,"seq":1,"op":"x\u001b[K\r","peer":-1,"bytes":4,"dtype":"float32","step":3,"state":"started","post_ns":1,"start_ns":1,"end_ns":0}]'
    try ok "$prog" trace analyze fl
    holds test "$(raw out)" -eq 0
}

# -- a full disk, a stopped rank, a stopped bench --------------------------------
full_disk() { [ "$root" = 1 ] && mkdir full && mount -t tmpfs -o size=200k tmpfs full 2>/dev/null; }
case_full_save() {
    full_disk || { skip "mount needs root"; return; }
    cp "$outside/good.h5" full/run.h5 # the previous checkpoint
    try refuse "$MPIRUN" -np 2 "$prog" train --data "$data" --hidden 128 --batch 64 --steps 3 \
        --log-every 0 --threads 1 --save full/run.h5 --overwrite
    holds unchanged full/run.h5 "$outside/good.h5"
    holds sh -c "! ls full | grep -q tmp"
}
case_full_text2h5() {
    full_disk || { skip "mount needs root"; return; }
    gz_text >t.gz
    try refuse "$prog" data text2h5 t.gz full/t.h5
    holds test -z "$(ls -A full)"
}
case_sigstop() {
    MG_COLLECTIVE_TIMEOUT=5 "$MPIRUN" -np 2 "$prog" train --data "$data" $small --steps 1000000 \
        --metrics m.jsonl --flight-dir fl >out 2>&1 </dev/null &
    job=$! i=0
    while [ "$i" -lt 300 ] && ! grep -q '"loss"' m.jsonl 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
    victim=$(rank_pid "$job" 1)
    [ -n "$victim" ] && kill -STOP "$victim"
    i=0
    while kill -0 "$job" 2>/dev/null && [ "$i" -lt $((limit * 10)) ]; do sleep 0.1; i=$((i + 1)); done
    expect=ends rc=0
    if kill -0 "$job" 2>/dev/null; then
        rc=124
        [ -n "$victim" ] && kill -CONT "$victim"
        kill -KILL "$job" 2>/dev/null
    fi
    wait "$job"
    w=$?
    [ "$rc" -eq 124 ] || rc=$w
    holds test -n "$victim"
}
case_bench_sigterm() {
    "$prog" ckpt bench --params 20M --dir . >out 2>&1 </dev/null &
    job=$! i=0
    while [ "$i" -lt 300 ] && ! ls | grep -q 'ckpt-bench.h5.tmp'; do sleep 0.1; i=$((i + 1)); done
    kill -TERM "$job"
    wait "$job" 2>/dev/null
    rc=$? expect=stopped
    holds test -z "$(ls | grep ckpt-bench)"
}
. tests/check.sh # rank_pid

# ---- the run ---------------------------------------------------------------------
# what a crash leaves in the output (a signal's death under mpirun, glibc's
# abort, a sanitizer's report; not mpirun's "the job has been aborted")
crashed='Segmentation fault|core dumped|exited on signal|Aborted|double free|free\(\): |AddressSanitizer|LeakSanitizer|UndefinedBehaviorSanitizer|runtime error:'
tried=0 refused=0 correct=0 hang=0 crash=0 harmful=0 wrong=0
for name in $(printf '%s\n' "$cases" | awk -v q="$quick" 'NF && (!q || $2 == 1) { print $1 }'); do
    [ -n "$only" ] && ! printf '%s\n' "$name" | grep -Eq -- "$only" && continue
    dir=$tmp/case/$name
    mkdir -p "$dir"
    before=$(snapshot)
    skipped= held=1 rc=0 expect=
    start=$(date +%s)
    # a case runs in a subshell of its own, in its sandbox
    (cd "$dir" && { "case_$name"; echo "$expect $rc $held $skipped" >"$dir/.verdict"; })
    read -r expect rc held skipped <"$dir/.verdict" 2>/dev/null || { expect=? rc=255 held=0; }
    secs=$(($(date +%s) - start))
    if [ -n "$skipped" ]; then
        echo "skipped $name: $skipped"
        continue
    fi
    tried=$((tried + 1))
    errors=$(grep -c "meshgrad: error:" "$dir/out" 2>/dev/null)
    if [ "$(snapshot)" != "$before" ]; then
        v=harmful
    elif grep -qE "$crashed" "$dir/out" 2>/dev/null; then
        v=crash
    elif [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
        v=hang
    elif [ "$expect" = stopped ] && [ "$rc" -gt 128 ] && [ "$held" = 1 ]; then
        v=correct # ended by the signal it was sent, as it should be
    elif [ "$rc" -gt 2 ]; then
        v=crash
    elif [ "$expect" = refuse ] && [ "$rc" -ne 0 ] && [ "$errors" -eq 1 ] && [ "$held" = 1 ]; then
        v=refused
    elif [ "$expect" = ends ] && [ "$rc" -ne 0 ] && [ "$errors" -ge 1 ] && [ "$held" = 1 ]; then
        v=refused
    elif [ "$expect" = ok ] && [ "$rc" -eq 0 ] && [ "$held" = 1 ]; then
        v=correct
    else
        v=wrong
    fi
    eval "$v=\$(($v + 1))"
    printf '%-8s %-22s exit %3s %3ss  %s\n' "$v" "$name" "$rc" "$secs" \
        "$(grep 'meshgrad: error:' "$dir/out" 2>/dev/null | head -n 1 | cut -c1-150)"
    case $v in refused | correct) ;; *) sed 's/^/  | /' "$dir/out" 2>/dev/null | tail -n 15 ;; esac
done
echo "hostile: $tried tried, $refused refused, $correct correct, $hang hang, $crash crash, $harmful harmful, $wrong wrong"
[ "$hang" -eq 0 ] && [ "$crash" -eq 0 ] && [ "$harmful" -eq 0 ] && [ "$wrong" -eq 0 ]
