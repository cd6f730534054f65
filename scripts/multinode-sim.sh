#!/bin/sh
# multinode-sim.sh: runs the regression (scripts/regress.sh --quick) across
# several simulated hosts on this one machine: network namespaces on a bridge,
# each with its own hostname and eth0 at 10.77.0.(10+i)/24 (made by
# scripts/netns-hosts.sh). Open MPI starts its daemons on the other hosts
# without sshd, through an rsh agent that runs the command with `ip netns exec
# HOST`, and talks TCP between them (btl tcp,self; oob and btl restricted to
# 10.77.0.0/24). mpirun runs on host 1, like a login node; ranks are spread over
# the hosts (--map-by node).
# Everything made (namespaces, links, /etc/netns entries, temporary files,
# processes left in the namespaces) is removed on exit, also on failure and
# Ctrl-C. Needs root and iproute2 (apt-get install iproute2); --delay and --loss
# need the kernel's netem qdisc (sch_netem). See docs/REGRESSION.md.
#
# usage: scripts/multinode-sim.sh [--hosts N] [--delay 5ms] [--loss 0.1%]
#                                 [--build DIR] [--out DIR] [-- REGRESS-ARGS...]
#   --hosts N      simulated hosts (default 2, at most 8)
#   --delay D      netem delay on every host's link (e.g. 5ms)
#   --loss P       netem packet loss on every host's link (e.g. 0.1%)
#   --build DIR    the build directory (default ./build)
#   --out DIR      regress.sh's output directory (default runs/multinode-<date>)
#   REGRESS-ARGS   replace regress.sh's default --quick (e.g. -- with nothing
#                  after it for the full matrix)
set -u

usage() { awk 'NR >= 15 { if (!/^#/) exit; sub(/^# ?/, ""); print }' "$0"; }

hosts=2 delay='' loss='' build=./build out='' regress_args=--quick
need() { [ $# -ge 2 ] || { echo "multinode-sim.sh: $1 needs a value" >&2; exit 2; }; }
while [ $# -gt 0 ]; do
    case $1 in
    --hosts) need "$@"; hosts=$2; shift ;;
    --delay) need "$@"; delay=$2; shift ;;
    --loss) need "$@"; loss=$2; shift ;;
    --build) need "$@"; build=$2; shift ;;
    --out) need "$@"; out=$2; shift ;;
    --) shift; regress_args="$*"; break ;;
    -h | --help) usage; exit 0 ;;
    *) echo "multinode-sim.sh: unknown argument '$1'" >&2; usage >&2; exit 2 ;;
    esac
    shift
done
case $hosts in [2-8]) ;; *) echo "multinode-sim.sh: --hosts must be 2 to 8, not '$hosts'" >&2; exit 2 ;; esac
[ "$(id -u)" = 0 ] || { echo "multinode-sim.sh: needs root (network namespaces)" >&2; exit 2; }
for t in ip unshare hostname mpirun; do
    command -v $t >/dev/null 2>&1 || { echo "multinode-sim.sh: '$t' is not on PATH (ip: apt-get install iproute2)" >&2; exit 2; }
done
here=$(cd "$(dirname "$0")" && pwd)
[ -d "$build" ] || { echo "multinode-sim.sh: no build directory '$build' (give --build DIR)" >&2; exit 2; }
build=$(cd "$build" && pwd)
[ -n "$out" ] || out=runs/multinode-$(date +%Y%m%d-%H%M%S)
mkdir -p "$out" || exit 2
out=$(cd "$out" && pwd)

tmp=$(mktemp -d "${TMPDIR:-/tmp}/mg-multinode.XXXXXX") || exit 2
# shellcheck disable=SC2034 # read by netns-hosts.sh
sim_tag=multinode-sim sim_tmp=$tmp
# shellcheck source-path=SCRIPTDIR source=netns-hosts.sh
. "$here/netns-hosts.sh"

cleanup() {
    trap '' INT TERM HUP
    sim_down
    rm -rf "$tmp"
}
trap cleanup EXIT
trap 'echo "multinode-sim: interrupted"; exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

fail() { sim_fail "$@"; }

# ---- the network ------------------------------------------------------------------
sim_up "$hosts" "$delay" "$loss"
echo "multinode-sim: $hosts hosts:$(for i in $(seq 1 "$hosts"); do printf ' %s=10.77.0.%s' "$(sim_host "$i")" $((10 + i)); done)" \
    "on bridge br0 in ${sim_prefix}sw${delay:+, delay $delay}${loss:+, loss $loss}"
last=$(sim_host "$hosts")
command -v ping >/dev/null 2>&1 && echo "multinode-sim: host 1 reaches $last"

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN_ARGS="--mca plm_rsh_agent $tmp/netns-rsh --mca plm_rsh_no_tree_spawn 1$(sim_mca_args)"
export MPIRUN_ARGS

# where the ranks land: one line per rank
# shellcheck disable=SC2086
in_host 1 timeout 60 mpirun --oversubscribe --hostfile "$tmp/hostfile" --map-by node -np 4 $MPIRUN_ARGS \
    sh -c 'echo "rank $OMPI_COMM_WORLD_RANK on $(hostname)"' >"$tmp/where" 2>&1
rc=$?
sort "$tmp/where" | sed 's/^/multinode-sim:   /'
[ $rc -eq 0 ] || fail "mpirun across the simulated hosts failed (exit $rc)"
[ "$(sed -n 's/^rank [0-9]* on //p' "$tmp/where" | sort -u | wc -l)" -ge 2 ] || fail "the ranks did not spread over the hosts"

# the regression, launched from host 1
t0=$(date +%s)
# shellcheck disable=SC2086
in_host 1 sh "$here/regress.sh" $regress_args --hostfile "$tmp/hostfile" --build "$build" --out "$out" &
job=$!
wait $job
rc=$?
echo "multinode-sim: regress.sh exit $rc after $(($(date +%s) - t0)) s"
for i in $(seq 1 "$hosts"); do
    ip -n "$(sim_host "$i")" -s link show eth0 | awk -v h="$(sim_host "$i")" '
        /RX:/ { getline; rx = $1 } /TX:/ { getline; tx = $1 }
        END { printf "multinode-sim: %s eth0: %.1f MB received, %.1f MB sent\n", h, rx / 1e6, tx / 1e6 }'
done
exit $rc
