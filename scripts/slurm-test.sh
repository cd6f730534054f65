#!/bin/sh
# slurm-test.sh: brings up a real Slurm cluster on this one machine and runs
# meshgrad's batch scripts (scripts/slurm/) on it. Debian's munged, slurmctld
# and slurmd run in the simulated hosts of scripts/netns-hosts.sh (network
# namespaces, each with its own hostname and address): host 1 is the controller
# and login node, hosts 2 and 3 are compute nodes with 2 CPUs each. From host 1
# it submits with sbatch:
#   1. train.sbatch through mpirun inside the allocation (2 nodes x 2 ranks,
#      mesh 2x2 dp,tp), its losses checked against the 1-rank run of the job;
#   2. the same through srun --mpi=pmix;
#   3. train.sbatch preempted: SIGUSR1 to the batch script once a checkpoint
#      exists (what --signal=B:USR1@120 sends before the time limit); the ranks
#      save and stop, the script requeues the job, the job resumes and ends; its
#      losses, the stop and the resume included, against the 1-rank run;
#   4. regress.sbatch --quick: scripts/regress.sh --launcher srun, every run a
#      job step (skipped with --no-regress).
# Prints a table of the legs and exits non-zero when any fails. Everything it
# starts it stops, also on failure and Ctrl-C: the daemons, jobs and ranks
# (every process left in the namespaces), the namespaces and their
# /etc/netns entries; configuration, keys, spool and state live in a temporary
# directory that is removed. Only the results directory (--out) stays: the job
# outputs, regress.sh's results and the daemons' logs. Needs root, iproute2,
# and Debian's slurm-wlm and munge (apt-get install slurm-wlm munge).
# See docs/REGRESSION.md ("Slurm").
#
# usage: scripts/slurm-test.sh [--no-regress] [--build DIR] [--out DIR]
#   --no-regress   skip leg 4 (the regression matrix, minutes)
#   --build DIR    the build directory with meshgrad and data/digits.h5 (default ./build)
#   --out DIR      results (default runs/slurm-<date>)
set -u

usage() { awk 'NR >= 26 { if (!/^#/) exit; sub(/^# ?/, ""); print }' "$0"; }

regress=1 build=./build out=''
need() { [ $# -ge 2 ] || { echo "slurm-test.sh: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
    case $1 in
    --no-regress) regress=0 ;;
    --build) need "$@"; build=$2; shift ;;
    --out) need "$@"; out=$2; shift ;;
    -h | --help) usage; exit 0 ;;
    *) echo "slurm-test.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
[ "$(id -u)" = 0 ] || { echo "slurm-test.sh: needs root (network namespaces, Slurm's daemons)" >&2; exit 2; }
for t in ip unshare hostname mpirun; do
    command -v $t >/dev/null 2>&1 || { echo "slurm-test.sh: '$t' is not on PATH (ip: apt-get install iproute2)" >&2; exit 2; }
done
for t in munged slurmctld slurmd sbatch srun scontrol sinfo scancel; do
    command -v $t >/dev/null 2>&1 ||
        { echo "slurm-test.sh: '$t' is not on PATH: apt-get install slurm-wlm munge" >&2; exit 2; }
done
here=$(cd "$(dirname "$0")" && pwd)
root=$(dirname "$here")
[ -d "$build" ] || { echo "slurm-test.sh: no build directory '$build' (give --build DIR)" >&2; exit 2; }
build=$(cd "$build" && pwd)
if [ ! -x "$build/meshgrad" ] || [ ! -r "$build/data/digits.h5" ]; then
    echo "slurm-test.sh: $build has no meshgrad or data/digits.h5: build first (scripts/setup.sh)" >&2
    exit 2
fi
[ -n "$out" ] || out=runs/slurm-$(date +%Y%m%d-%H%M%S)
# the runs replace what an earlier run of this script left there, nothing else:
# an earlier run's legs.tsv is empty or rows of the four fields leg() writes
# (a legs.tsv of another kind does not make a folder this script's)
if [ -d "$out" ] && [ -n "$(ls -A "$out")" ] && { [ ! -f "$out/legs.tsv" ] ||
    ! awk -F '\t' 'NF != 4 { exit 1 }' "$out/legs.tsv"; }; then
    echo "slurm-test.sh: --out $out holds files and is not an earlier run's output (no legs.tsv of this script's): give a new or empty directory" >&2
    exit 2
fi
mkdir -p "$out" && : >>"$out/legs.tsv" || exit 2
out=$(cd "$out" && pwd)
rm -rf "$out/daemons"

tmp=$(mktemp -d "${TMPDIR:-/tmp}/mg-slurm.XXXXXX") || exit 2
chmod 755 "$tmp" # munged wants every directory above its socket searchable
# shellcheck disable=SC2034 # read by netns-hosts.sh
sim_tag=slurm-test sim_tmp=$tmp
# shellcheck source-path=SCRIPTDIR source=netns-hosts.sh
. "$here/netns-hosts.sh"

cleanup() {
    trap '' INT TERM HUP
    sim_down 2 # daemons get SIGTERM and 2 s
    wait       # and are reaped
    if [ -d "$tmp/log" ]; then
        mkdir -p "$out/daemons" && cp "$tmp"/log/* "$out/daemons/" 2>/dev/null
    fi
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "slurm-test: interrupted"; exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

fail() { sim_fail "$@"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }
t_all=$(now)

# ---- the hosts, munge, Slurm's configuration ---------------------------------------
sim_up 3
ctl=$(sim_host 1) n1=$(sim_host 2) n2=$(sim_host 3)
echo "slurm-test: controller $ctl (10.77.0.11), nodes $n1 (10.77.0.12) and $n2 (10.77.0.13)"

mkdir -p "$tmp/munge" "$tmp/log" "$tmp/state" "$tmp/spool-$n1" "$tmp/spool-$n2"
chmod 755 "$tmp/munge"
dd if=/dev/urandom of="$tmp/munge/munge.key" bs=1024 count=1 2>/dev/null || fail "cannot write a munge key"
chmod 400 "$tmp/munge/munge.key"
cat >"$tmp/slurm.conf" <<EOF
# a two-node cluster for scripts/slurm-test.sh; every path in $tmp
ClusterName=meshgrad
SlurmctldHost=$ctl(10.77.0.11)
SlurmUser=root
AuthType=auth/munge
CredType=cred/munge
# cred_expire: also how long a requeued job waits before it may start again
# (default 120 s)
AuthInfo=socket=$tmp/munge/munge.socket,cred_expire=10
StateSaveLocation=$tmp/state
SlurmctldPidFile=$tmp/slurmctld.pid
SlurmctldLogFile=$tmp/log/slurmctld.log
SlurmdPidFile=$tmp/slurmd-%n.pid
SlurmdLogFile=$tmp/log/slurmd-%n.log
SlurmdSpoolDir=$tmp/spool-%n
# the nodes share this machine's /tmp: each gets its own (PMIx's directories
# spmix_appdir_<uid>_<job>.<step> would collide)
TmpFS=$tmp/spool-%n
PlugStackConfig=$tmp/plugstack.conf
MailProg=/bin/true
# no cgroups, accounting or binding: the nodes share the machine's cores
ProctrackType=proctrack/pgid
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
MpiDefault=none
# a requeued job may start again once cred_expire has passed: look every second
# (default: every 60 s)
SchedulerParameters=sched_interval=1
JobRequeue=1
ReturnToService=2
KillWait=5
SlurmdParameters=config_overrides
NodeName=$n1 NodeAddr=10.77.0.12 CPUs=2 State=UNKNOWN
NodeName=$n2 NodeAddr=10.77.0.13 CPUs=2 State=UNKNOWN
PartitionName=mg Nodes=ALL Default=YES MaxTime=INFINITE State=UP
EOF
: >"$tmp/plugstack.conf"
# slurmd loads a cgroup plugin even when nothing uses it; autodetection fails
# in a network namespace (ip netns exec mounts a fresh /sys without cgroups)
echo "CgroupPlugin=cgroup/v1" >"$tmp/cgroup.conf"
export SLURM_CONF="$tmp/slurm.conf"

# ---- the daemons -------------------------------------------------------------------
# in the foreground, children of this script: it knows them, notices when one
# dies, and reaps them at the end. What each prints goes to <name>.out (the
# Slurm daemons copy their log there; munged logs only there); slurmd's job
# steps log to slurmd-<node>.log.
t_up=$(now)
daemons='' # NAME:PID ...
daemon() { # daemon HOST NAME COMMAND...: starts COMMAND on HOST in the background
    h=$1 d=$2
    shift 2
    in_host "$h" "$@" >"$tmp/log/$d.out" 2>&1 &
    daemons="$daemons $d:$!"
}
# alive: fails, saying where to look, when one of the daemons has exited
alive() {
    for dp in $daemons; do
        kill -0 "${dp#*:}" 2>/dev/null || fail "${dp%:*} exited; see $out/daemons/${dp%:*}.out"
    done
}
daemon 1 munged munged --foreground --force --key-file="$tmp/munge/munge.key" --socket="$tmp/munge/munge.socket" \
    --pid-file="$tmp/munge/munged.pid" --seed-file="$tmp/munge/munged.seed"
i=0
until [ -S "$tmp/munge/munge.socket" ]; do
    alive
    i=$((i + 1))
    [ $i -lt 100 ] || fail "munged made no socket in 10 s"
    sleep 0.1
done
daemon 1 slurmctld slurmctld -D
daemon 2 "slurmd-$n1" slurmd -D -N "$n1"
daemon 3 "slurmd-$n2" slurmd -D -N "$n2"
i=0
until [ "$(in_host 1 sinfo -h -N -o '%T' 2>/dev/null | grep -c '^idle$')" = 2 ]; do
    alive
    i=$((i + 1))
    [ $i -lt 300 ] || fail "the nodes did not come up in 30 s: $(in_host 1 sinfo -h -N -o '%N %T %E' 2>&1 | tr '\n' ' ')"
    sleep 0.1
done
echo "slurm-test: Slurm $(slurmctld -V | awk '{ print $2 }') up in $(since "$t_up") s:" \
    "$(in_host 1 sinfo -h -o '%P %D nodes %c CPUs each, %T' | head -n 1)"

# ---- jobs --------------------------------------------------------------------------
# the jobs inherit this environment (sbatch --export=ALL): ranks as root, TCP
# on the hosts' subnet, the build
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 MG_BUILD="$build"
sim_mca_export
results=$out/legs.tsv
: >"$results"
failed=0
# leg NAME VERDICT SECONDS NOTE: one row of the table
leg() {
    printf '%s\t%s\t%s\t%s\n' "$1" "$2" "$3" "$4" >>"$results"
    echo "slurm-test: $2 $1 ($3 s)${4:+: $4}"
    [ "$2" = PASS ] || failed=$((failed + 1))
}

# submit OUTPUT SCRIPT ARGS...: sbatch from the login node; prints the job id
submit() {
    o=$1
    shift
    in_host 1 sbatch --parsable --output="$o" --chdir="$out" "$@" | cut -d ';' -f 1
}
# job_field ID FIELD: a field of `scontrol show job` (JobState, ExitCode, Restarts)
job_field() { in_host 1 scontrol -o show job "$1" 2>/dev/null | tr ' ' '\n' | sed -n "s/^$2=//p"; }
# wait_job ID SECONDS: waits until job ID has ended (cancels it after SECONDS);
# sets state and code (ExitCode, e.g. 0:0)
wait_job() {
    i=0
    while :; do
        state=$(job_field "$1" JobState)
        case $state in
        COMPLETED | FAILED | CANCELLED | TIMEOUT | NODE_FAIL | BOOT_FAIL | DEADLINE | OUT_OF_MEMORY | PREEMPTED) break ;;
        esac
        i=$((i + 1))
        if [ $i -gt $(($2 * 5)) ]; then
            in_host 1 scancel "$1"
            state="TIMEOUT (cancelled after $2 s)"
            break
        fi
        sleep 0.2
    done
    code=$(job_field "$1" ExitCode)
}

# the training job of legs 1-3 (the mlp of regress.sh) and its 1-rank
# reference; $job is a list of flags, split on purpose where it is used
# shellcheck disable=SC2086
job="--data $build/data/digits.h5 --batch 30 --seed 11 --model mlp --hidden 24 --optimizer adamw --lr 3e-3"
job="$job --schedule cosine --warmup 10 --clip 1.0 --log-every 10"
# reference STEPS: sets ref to the metrics of the 1-rank run of STEPS steps,
# made on the login node
reference() {
    ref=$out/reference-$1.jsonl
    in_host 1 "$build/meshgrad" train $job --steps "$1" --threads 1 --log-every 0 --metrics "$ref" \
        >"$out/reference-$1.out" 2>&1 || fail "the 1-rank reference run failed: see $out/reference-$1.out"
}
# losses_agree REF RUN STEPS: every step 1..STEPS in RUN, its loss within 1e-4
# (relative) of REF's; prints "ok <max rel diff>" or what is wrong
losses_agree() {
    awk -v last="$3" '
        function field(line, key) { sub(".*\"" key "\":", "", line); sub(/[,}].*/, "", line); return line + 0 }
        FNR == 1 { part++ }
        /"step":[0-9]+,"loss":/ {
            s = field($0, "step")
            if (part == 1) ref[s] = field($0, "loss"); else if (!(s in got)) got[s] = field($0, "loss")
        }
        END {
            worst = 0
            for (s = 1; s <= last; s++) {
                if (!(s in got) || !(s in ref)) { printf "step %d missing\n", s; exit }
                d = got[s] - ref[s]; r = ref[s] < 0 ? -ref[s] : ref[s]
                rel = (d < 0 ? -d : d) / (r > 1e-30 ? r : 1e-30)
                if (rel > worst) worst = rel
                if (rel > 1e-4) { printf "step %d: loss %.9g, 1 rank %.9g\n", s, got[s], ref[s]; exit }
            }
            printf "ok %.2e\n", worst
        }' "$1" "$2"
}
# spread OUTPUT: "ok" when the job's ranks ran on both nodes
spread() {
    [ "$(sed -n 's/^train.sbatch: *rank [0-9]* on //p' "$1" | sort -u | wc -l)" -ge 2 ] && echo ok
}

# ---- 1 and 2: train.sbatch through mpirun, then srun --mpi=pmix --------------------
steps=60
reference $steps
for launcher in mpirun srun; do
    name=train-$launcher
    t0=$(now)
    rm -rf "$out/$name-ckpt" "$out/$name.out" "$out/$name.jsonl"
    id=$(MG_LAUNCHER=$launcher MG_CKPT_DIR=$out/$name-ckpt submit "$out/$name.out" "$root/scripts/slurm/train.sbatch" \
        $job --steps $steps --mesh 2x2 --parallel dp,tp --metrics "$out/$name.jsonl")
    [ -n "$id" ] || { leg "$name" FAIL 0 "sbatch failed"; continue; }
    wait_job "$id" 300
    secs=$(since "$t0")
    sed 's/^/  | /' "$out/$name.out"
    if [ "$state" != COMPLETED ] || [ "$code" != 0:0 ]; then
        leg "$name" FAIL "$secs" "job $id: $state, exit $code; see $out/$name.out"
        continue
    fi
    agree=$(losses_agree "$ref" "$out/$name.jsonl" $steps)
    if [ "$(spread "$out/$name.out")" != ok ]; then
        leg "$name" FAIL "$secs" "the ranks did not run on both nodes"
    elif [ "${agree%% *}" != ok ]; then
        leg "$name" FAIL "$secs" "losses differ from the 1-rank run: $agree"
    else
        leg "$name" PASS "$secs" "job $id, 4 ranks on $n1 and $n2, $steps steps, max rel diff ${agree#ok }"
    fi
done

# ---- 3: preempted, requeued, resumed ---------------------------------------------
# SIGUSR1 to the batch script (scancel --batch: the path --signal=B:USR1@120
# takes) once a checkpoint exists and a fifth of the steps are done; should the
# run end before that, again with four times the steps
name=train-preempt
steps=200
while :; do
    t0=$(now)
    rm -rf "$out/$name-ckpt" "$out/$name.out" "$out/$name.jsonl"
    id=$(MG_LAUNCHER=srun MG_CKPT_DIR=$out/$name-ckpt MG_SAVE_EVERY=$((steps / 10)) submit "$out/$name.out" \
        "$root/scripts/slurm/train.sbatch" $job --steps $steps --mesh 2x2 --parallel dp,tp --metrics "$out/$name.jsonl")
    [ -n "$id" ] || { leg "$name" FAIL 0 "sbatch failed"; break; }
    signalled=0 i=0
    while [ $i -lt 1500 ]; do
        state=$(job_field "$id" JobState)
        [ "$state" = RUNNING ] || [ "$state" = PENDING ] || break
        s=$(sed -n 's/^step \([0-9]*\)\/.*/\1/p' "$out/$name.out" 2>/dev/null | tail -n 1)
        if [ "${s:-0}" -ge $((steps / 5)) ] && ls "$out/$name-ckpt"/ckpt-*.h5 >/dev/null 2>&1; then
            in_host 1 scancel --batch --signal=USR1 "$id" && signalled=1
            echo "slurm-test: SIGUSR1 to job $id at step $s"
            break
        fi
        i=$((i + 1))
        sleep 0.2
    done
    wait_job "$id" 300
    [ $signalled -eq 1 ] || [ $steps -ge 3200 ] || [ "$state" != COMPLETED ] || {
        echo "slurm-test: job $id ended before the signal; again with $((steps * 4)) steps"
        steps=$((steps * 4))
        continue
    }
    break
done
secs=$(since "$t0")
sed 's/^/  | /' "$out/$name.out"
restarts=$(job_field "$id" Restarts)
if [ -z "$id" ]; then
    :
elif [ "$state" != COMPLETED ] || [ "$code" != 0:0 ]; then
    leg "$name" FAIL "$secs" "job $id: $state, exit $code; see $out/$name.out"
elif [ "$signalled" -eq 0 ]; then
    leg "$name" FAIL "$secs" "the job ended before it could be signalled"
elif [ "$restarts" != 1 ] || ! grep -q "^stopped by SIGUSR1 after step" "$out/$name.out" ||
    ! grep -q "^resumed from " "$out/$name.out"; then
    leg "$name" FAIL "$secs" "expected one stop by SIGUSR1, one requeue and a resume (restarts: $restarts); see $out/$name.out"
else
    reference $steps
    agree=$(losses_agree "$ref" "$out/$name.jsonl" $steps)
    if [ "${agree%% *}" != ok ]; then
        leg "$name" FAIL "$secs" "losses differ from the 1-rank run: $agree"
    else
        stop=$(sed -n 's/^stopped by SIGUSR1 after step \([0-9]*\).*/\1/p' "$out/$name.out")
        leg "$name" PASS "$secs" "job $id stopped after step $stop, requeued, resumed to $steps; max rel diff ${agree#ok }"
    fi
fi

# ---- 4: the regression matrix, every run a job step ---------------------------------
if [ $regress -eq 1 ]; then
    name=regress
    t0=$(now)
    rm -rf "${out:?}/$name" "$out/$name.out"
    id=$(MG_ROOT=$root submit "$out/$name.out" "$root/scripts/slurm/regress.sbatch" --quick --out "$out/$name")
    if [ -z "$id" ]; then
        leg "$name" FAIL 0 "sbatch failed"
    else
        wait_job "$id" 1200
        secs=$(since "$t0")
        sed 's/^/  | /' "$out/$name.out"
        count() { awk -F '\t' -v v="$1" '$9 == v { n++ } END { print n + 0 }' "$out/$name/results.tsv" 2>/dev/null; }
        if [ "$state" != COMPLETED ] || [ "$code" != 0:0 ]; then
            leg "$name" FAIL "$secs" "job $id: $state, exit $code; see $out/$name.out"
        else
            leg "$name" PASS "$secs" "job $id: regress.sh --quick --launcher srun: $(count PASS) runs PASS, $(count SKIP) SKIP"
        fi
    fi
fi

echo
printf '%-16s %-7s %8s  %s\n' leg verdict seconds note
awk -F '\t' '{ printf "%-16s %-7s %8s  %s\n", $1, $2, $3, $4 }' "$results"
echo "slurm-test: $(grep -c . "$results") legs, $failed failed, $(since "$t_all") s in all; results in $out"
[ $failed -eq 0 ]
