#!/bin/sh
# multinode-sim.sh: runs the regression (scripts/regress.sh --quick) across
# several simulated hosts on this one machine. Each host is a Linux network
# namespace with its own hostname (a UTS namespace per process tree) and one
# interface, eth0 at 10.77.0.(10+i)/24, a veth whose peer sits on a bridge in a
# switch namespace: the hosts reach each other and their own loopback, nothing
# else (the root namespace's network is not touched). Open MPI starts its
# daemons on the other hosts without sshd, through an rsh agent that runs the
# command with `ip netns exec HOST`, and talks TCP between them (btl tcp,self;
# oob and btl restricted to 10.77.0.0/24). mpirun runs on host 1, like a login
# node; ranks are spread over the hosts (--map-by node). Host names resolve
# through /etc/netns/<host>/hosts, which `ip netns exec` puts over /etc/hosts
# in the namespace only; the real /etc/hosts is not changed.
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

usage() { awk 'NR >= 19 { if (!/^#/) exit; sub(/^# ?/, ""); print }' "$0"; }

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

# names: mg<pid>h<i> (hosts), mg<pid>sw (switch); links mg<pid>a<i> / mg<pid>b<i>
p=mg$$
sw=${p}sw
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mg-multinode.XXXXXX") || exit 2
made_ns=''

cleanup() {
    trap '' INT TERM HUP
    for ns in $made_ns; do
        # processes still in a simulated host (a daemon or rank of ours): end them
        pids=$(ip netns pids "$ns" 2>/dev/null)
        [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
    done
    for ns in $made_ns; do
        ip netns del "$ns" 2>/dev/null # its links go with it
        rm -rf "/etc/netns/$ns"
    done
    rmdir /etc/netns 2>/dev/null
    rm -rf "$tmp"
    [ -n "$made_ns" ] && echo "multinode-sim: removed namespaces$made_ns"
}
trap cleanup EXIT
trap 'echo "multinode-sim: interrupted"; exit 130' INT
trap 'exit 143' TERM
trap 'exit 129' HUP

fail() { echo "multinode-sim: $*" >&2; exit 1; }

# ---- the network ------------------------------------------------------------------
ip netns add "$sw" || fail "cannot create network namespace $sw"
made_ns=" $sw"
ip -n "$sw" link set lo up
ip -n "$sw" link add br0 type bridge || fail "cannot create a bridge (kernel without bridge support?)"
ip -n "$sw" link set br0 up
names=''
for i in $(seq 1 "$hosts"); do
    ns=${p}h$i addr=10.77.0.$((10 + i))
    ip netns add "$ns" || fail "cannot create network namespace $ns"
    made_ns="$made_ns $ns"
    ip link add "${p}a$i" type veth peer name "${p}b$i" || fail "cannot create a veth pair"
    ip link set "${p}a$i" netns "$ns"
    ip link set "${p}b$i" netns "$sw"
    ip -n "$ns" link set "${p}a$i" name eth0
    ip -n "$ns" addr add "$addr/24" dev eth0
    ip -n "$ns" link set lo up
    ip -n "$ns" link set eth0 up
    ip -n "$sw" link set "${p}b$i" master br0
    ip -n "$sw" link set "${p}b$i" up
    if [ -n "$delay$loss" ]; then
        ip netns exec "$ns" tc qdisc add dev eth0 root netem ${delay:+delay "$delay"} ${loss:+loss "$loss"} ||
            fail "tc netem failed on $ns (this kernel may lack the netem qdisc, sch_netem): run without --delay/--loss"
    fi
    names="$names $ns"
done
{
    echo "127.0.0.1 localhost"
    for i in $(seq 1 "$hosts"); do echo "10.77.0.$((10 + i)) ${p}h$i"; done
} >"$tmp/hosts"
for ns in $names; do
    mkdir -p "/etc/netns/$ns" && cp "$tmp/hosts" "/etc/netns/$ns/hosts"
done
for ns in $names; do echo "$ns slots=2"; done >"$tmp/hostfile"

# the rsh agent: netns-rsh [options] HOST COMMAND... runs COMMAND (joined, as
# ssh would) by sh in HOST's network namespace, under HOST's hostname
cat >"$tmp/netns-rsh" <<'EOF'
#!/bin/sh
while [ $# -gt 0 ]; do case $1 in -*) shift ;; *) break ;; esac; done
host=$1
shift
exec ip netns exec "$host" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"
EOF
chmod +x "$tmp/netns-rsh"
# in_host N COMMAND...: runs COMMAND on simulated host N
in_host() {
    n=$1
    shift
    ip netns exec "${p}h$n" unshare --uts sh -c 'hostname "$0" && exec "$@"' "${p}h$n" "$@"
}

echo "multinode-sim: $hosts hosts:$(for i in $(seq 1 "$hosts"); do printf ' %sh%s=10.77.0.%s' "$p" "$i" $((10 + i)); done)" \
    "on bridge br0 in $sw${delay:+, delay $delay}${loss:+, loss $loss}"
last=${p}h$hosts
if command -v ping >/dev/null 2>&1; then
    in_host 1 ping -c 1 -W 2 "$last" >/dev/null || fail "host 1 cannot reach $last"
    echo "multinode-sim: host 1 reaches $last"
fi

export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
MPIRUN_ARGS="--mca plm_rsh_agent $tmp/netns-rsh --mca plm_rsh_no_tree_spawn 1 --mca pml ob1"
# the simulated hosts share this machine's cores: waiting ranks give theirs up
MPIRUN_ARGS="$MPIRUN_ARGS --mca mpi_yield_when_idle 1"
MPIRUN_ARGS="$MPIRUN_ARGS --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24"
MPIRUN_ARGS="$MPIRUN_ARGS --mca oob_tcp_if_include 10.77.0.0/24"
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
    ip -n "${p}h$i" -s link show eth0 | awk -v h="${p}h$i" '
        /RX:/ { getline; rx = $1 } /TX:/ { getline; tx = $1 }
        END { printf "multinode-sim: %s eth0: %.1f MB received, %.1f MB sent\n", h, rx / 1e6, tx / 1e6 }'
done
exit $rc
