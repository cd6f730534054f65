# netns-hosts.sh: simulated hosts on this one machine, for the scripts that
# run jobs across several hosts (scripts/multinode-sim.sh, scripts/slurm-test.sh);
# sourced, not run. Each host is a Linux network namespace with its own
# hostname (a UTS namespace per process tree) and one interface, eth0 at
# 10.77.0.(10+i)/24, a veth whose peer sits on a bridge in a switch namespace:
# the hosts reach each other and their own loopback, nothing else (the root
# namespace's network is not touched). Host names resolve through
# /etc/netns/<host>/hosts, which `ip netns exec` puts over /etc/hosts in the
# namespace only; the real /etc/hosts is not changed. Needs root and iproute2.
#
# Before sourcing, the caller sets sim_tag (its name, for messages) and sim_tmp
# (its temporary directory, removed by the caller). Exports:
#   sim_up N [DELAY] [LOSS]  makes the switch and hosts 1..N (a netem qdisc
#                            with DELAY / LOSS on every eth0 when given), writes
#                            $sim_tmp/hosts, $sim_tmp/hostfile (slots=2 each) and
#                            the rsh agent $sim_tmp/netns-rsh; exits on failure
#   sim_down [GRACE]         ends the processes left in the hosts (SIGTERM, and
#                            SIGKILL after GRACE seconds, default 0), deletes the
#                            namespaces (their links go with them), the
#                            /etc/netns entries and the /run/netns mount when
#                            sim_up made it, and says so; safe to call at any time
#   sim_host I               prints the name of host I (mg<pid>h<I>)
#   in_host I COMMAND...     runs COMMAND on host I (its network and hostname)
#   sim_mca_args             prints Open MPI's --mca options for ranks across
#                            the hosts (TCP on 10.77.0.0/24, yielding when idle)
#   sim_mca_export           exports the same settings as OMPI_MCA_* variables
#   sim_fail MESSAGE         prints "$sim_tag: MESSAGE" and exits 1
# shellcheck shell=sh disable=SC2154 # sim_tag and sim_tmp come from the caller

sim_prefix=mg$$ # hosts mg<pid>h<i>, switch mg<pid>sw, links mg<pid>a<i> / mg<pid>b<i>
sim_ns=''       # the namespaces made so far
sim_n=0         # the number of hosts

# pml ob1 over tcp on the hosts' subnet only; the simulated hosts share this
# machine's cores, so a waiting rank gives its core up
sim_mca='pml=ob1 mpi_yield_when_idle=1 btl=tcp,self btl_tcp_if_include=10.77.0.0/24 oob_tcp_if_include=10.77.0.0/24'

sim_fail() {
    echo "$sim_tag: $*" >&2
    exit 1
}

sim_host() { echo "${sim_prefix}h$1"; }

sim_mca_args() {
    for kv in $sim_mca; do printf ' --mca %s %s' "${kv%%=*}" "${kv#*=}"; done
}

sim_mca_export() {
    for kv in $sim_mca; do export "OMPI_MCA_$kv"; done
}

in_host() {
    sim_i=$1
    shift
    ip netns exec "${sim_prefix}h$sim_i" unshare --uts sh -c 'hostname "$0" && exec "$@"' "${sim_prefix}h$sim_i" "$@"
}

sim_up() {
    sim_n=$1
    # the first `ip netns add` on a machine makes /run/netns a mount point;
    # sim_down undoes that when it was not one before and no namespace is left
    sim_run_netns=1
    mountpoint -q /run/netns 2>/dev/null || sim_run_netns=0
    sim_delay=${2:-} sim_loss=${3:-}
    sw=${sim_prefix}sw
    ip netns add "$sw" || sim_fail "cannot create network namespace $sw"
    sim_ns=" $sw"
    ip -n "$sw" link set lo up
    ip -n "$sw" link add br0 type bridge || sim_fail "cannot create a bridge (kernel without bridge support?)"
    ip -n "$sw" link set br0 up
    for i in $(seq 1 "$sim_n"); do
        ns=${sim_prefix}h$i
        ip netns add "$ns" || sim_fail "cannot create network namespace $ns"
        sim_ns="$sim_ns $ns"
        ip link add "${sim_prefix}a$i" type veth peer name "${sim_prefix}b$i" || sim_fail "cannot create a veth pair"
        ip link set "${sim_prefix}a$i" netns "$ns"
        ip link set "${sim_prefix}b$i" netns "$sw"
        ip -n "$ns" link set "${sim_prefix}a$i" name eth0
        ip -n "$ns" addr add "10.77.0.$((10 + i))/24" dev eth0
        ip -n "$ns" link set lo up
        ip -n "$ns" link set eth0 up
        ip -n "$sw" link set "${sim_prefix}b$i" master br0
        ip -n "$sw" link set "${sim_prefix}b$i" up
        if [ -n "$sim_delay$sim_loss" ]; then
            ip netns exec "$ns" tc qdisc add dev eth0 root netem ${sim_delay:+delay "$sim_delay"} ${sim_loss:+loss "$sim_loss"} ||
                sim_fail "tc netem failed on $ns (this kernel may lack the netem qdisc, sch_netem): run without --delay/--loss"
        fi
    done
    {
        echo "127.0.0.1 localhost"
        for i in $(seq 1 "$sim_n"); do echo "10.77.0.$((10 + i)) ${sim_prefix}h$i"; done
    } >"$sim_tmp/hosts"
    for i in $(seq 1 "$sim_n"); do
        mkdir -p "/etc/netns/${sim_prefix}h$i" && cp "$sim_tmp/hosts" "/etc/netns/${sim_prefix}h$i/hosts"
    done
    for i in $(seq 1 "$sim_n"); do echo "${sim_prefix}h$i slots=2"; done >"$sim_tmp/hostfile"

    # the rsh agent: netns-rsh [options] HOST COMMAND... runs COMMAND (joined,
    # as ssh would) by sh in HOST's network namespace, under HOST's hostname
    cat >"$sim_tmp/netns-rsh" <<'EOF'
#!/bin/sh
while [ $# -gt 0 ]; do case $1 in -*) shift ;; *) break ;; esac; done
host=$1
shift
exec ip netns exec "$host" unshare --uts sh -c 'hostname "$0" && exec sh -c "$1"' "$host" "$*"
EOF
    chmod +x "$sim_tmp/netns-rsh"

    if command -v ping >/dev/null 2>&1; then
        in_host 1 ping -c 1 -W 2 "$(sim_host "$sim_n")" >/dev/null || sim_fail "host 1 cannot reach $(sim_host "$sim_n")"
    fi
}

sim_down() {
    grace=${1:-0}
    # processes still in a simulated host (daemons or ranks of ours): end them
    if [ "$grace" -gt 0 ]; then
        for ns in $sim_ns; do
            pids=$(ip netns pids "$ns" 2>/dev/null)
            [ -n "$pids" ] && kill -TERM $pids 2>/dev/null
        done
        until=$(($(date +%s) + grace))
        while [ "$(date +%s)" -lt $until ]; do
            left=''
            for ns in $sim_ns; do left="$left$(ip netns pids "$ns" 2>/dev/null)"; done
            [ -z "$left" ] && break
            sleep 0.2
        done
    fi
    for ns in $sim_ns; do
        pids=$(ip netns pids "$ns" 2>/dev/null)
        [ -n "$pids" ] && kill -KILL $pids 2>/dev/null
    done
    for ns in $sim_ns; do
        ip netns del "$ns" 2>/dev/null # its links go with it
        rm -rf "/etc/netns/$ns"
    done
    rmdir /etc/netns 2>/dev/null
    if [ "${sim_run_netns:-1}" = 0 ] && [ -z "$(ls -A /run/netns 2>/dev/null)" ]; then
        umount /run/netns 2>/dev/null && rmdir /run/netns 2>/dev/null
    fi
    [ -n "$sim_ns" ] && echo "$sim_tag: removed namespaces$sim_ns"
    sim_ns=''
}
