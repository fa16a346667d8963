#!/bin/bash
# N ranks on one machine over real kernel links of a chosen bandwidth.
#
# Each rank gets its own network namespace with one veth interface (address 10.77.0.R+1/24)
# plugged into a bridge. Every direction of every rank pair is its own link, as in the
# simulator and in the transports' pacing (docs/transports.md): the sending side's egress has
# an HTB class per destination, rate = ceil = the link bandwidth. Latency is not added here
# (this kernel has no netem): pass --link-latency to weipipe train, whose transports add it in
# user space.
#
# Everything lives in a fresh user + network + PID namespace (unshare -rnpf), so it needs no
# root, touches nothing on the host, and cannot outlive the script: the namespaces and every
# process in them end with the script, by the kernel, even when it is killed with SIGKILL. The
# trap below also ends the ranks and the namespace holders in order on a normal exit or a signal.
#
# usage: scripts/netns_ring.sh [-n N] [-r RATE] [-m MTU] [-p PORT] [-x] [--] ARGS...
#   -n N     ranks (default 4)
#   -r RATE  bandwidth of each direction of each rank pair, spelled as --link-bandwidth
#            (100Mbit, 1Gbit, 125MByte); default: unshaped
#   -m MTU   veth MTU (default 9000: jumbo frames keep the TCP/IP header share at 0.7%;
#            with 1500 it is 4.4% of the shaped rate)
#   -p PORT  MASTER_PORT (default 29500; each run has a network of its own)
#   -x       ARGS is a command run once per rank; otherwise ARGS are `weipipe train` arguments
#            and each rank runs `$WEIPIPE train ARGS --transport tcp --nranks N --bind ADDR`
# Each rank's environment: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR,
# MASTER_PORT, WEIPIPE_SECRET, WEIPIPE_JOB_ID (ring/launch/launcher_env.c) and NETNS_ADDR (its address);
# the word {addr} in ARGS is replaced by that address. Output lines come back as "[rank R] ...".
# Exit status: the first failing rank's, 2 for bad usage, 77 when namespaces or tc are missing.
# WEIPIPE: the binary (default build/weipipe).
set -euo pipefail

die() { echo "netns_ring.sh: $*" >&2; exit 2; }

# RATE (weipipe's spelling) -> bits per second, an integer for tc.
rate_bits() {
    awk -v s="$1" 'BEGIN {
        if (!match(s, /^[0-9]+(\.[0-9]+)?/)) exit 1
        v = substr(s, 1, RLENGTH); u = substr(s, RLENGTH + 1); sub(/\/s$/, "", u)
        m["bit"] = 1; m["Kbit"] = 1e3; m["Mbit"] = 1e6; m["Gbit"] = 1e9; m["Tbit"] = 1e12
        m["Byte"] = 8; m["KByte"] = 8e3; m["MByte"] = 8e6; m["GByte"] = 8e9; m["TByte"] = 8e12
        if (!(u in m) || v * m[u] <= 0) exit 1
        printf "%.0f\n", v * m[u] }'
}

# The kernel's tick rate: tbf/HTB refill their buckets once per tick, so a burst below
# rate/HZ caps the rate below the setting. Unknown -> 100, the smallest common HZ (largest burst).
kernel_hz() {
    local hz=""
    if [ -r /proc/config.gz ]; then hz=$(zcat /proc/config.gz 2>/dev/null | sed -n 's/^CONFIG_HZ=//p')
    elif [ -r "/boot/config-$(uname -r)" ]; then hz=$(sed -n 's/^CONFIG_HZ=//p' "/boot/config-$(uname -r)"); fi
    echo "${hz:-100}"
}

orig_args=("$@")
nranks=4 rate="" mtu=9000 port=29500 raw=0
while getopts "n:r:m:p:xh" opt; do
    case $opt in
        n) nranks=$OPTARG ;;
        r) rate=$OPTARG ;;
        m) mtu=$OPTARG ;;
        p) port=$OPTARG ;;
        x) raw=1 ;;
        h) sed -n '2,30p' "$0"; exit 0 ;;
        *) die "unknown option (see -h)" ;;
    esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
[[ $nranks =~ ^[0-9]+$ ]] && [ "$nranks" -ge 1 ] && [ "$nranks" -le 200 ] || die "-n: '$nranks' is not a rank count in 1..200"
[[ $mtu =~ ^[0-9]+$ ]] && [ "$mtu" -ge 576 ] && [ "$mtu" -le 65535 ] || die "-m: '$mtu' is not an MTU in 576..65535"
[[ $port =~ ^[0-9]+$ ]] && [ "$port" -ge 1 ] && [ "$port" -le 65535 ] || die "-p: '$port' is not a port"
bits=""
if [ -n "$rate" ]; then bits=$(rate_bits "$rate") || die "-r: '$rate' is not a rate such as 1Gbit or 125MByte"; fi
[ $# -ge 1 ] || [ "$raw" = 0 ] || die "-x needs a command"

if [ -z "${WP_NETNS_INSIDE:-}" ]; then
    for tool in unshare nsenter ip tc; do
        command -v "$tool" >/dev/null || { echo "netns_ring.sh: '$tool' not found (Debian: util-linux, iproute2)" >&2; exit 77; }
    done
    unshare -rnpf --mount-proc true 2>/dev/null || {
        echo "netns_ring.sh: cannot create user+network+PID namespaces here (unshare -rnpf failed)" >&2; exit 77; }
    # The namespace's first process (this script again, inside) watches a pipe whose only writer
    # is this outer process: when the outer ends in any way (done, a signal, SIGKILL), the inner
    # one reads end-of-file and tears down; when the inner one, PID 1 of its PID namespace, ends,
    # the kernel ends every process in it. (unshare itself ignores SIGTERM while it waits.)
    # A signal before this process holds the pipe's write end would leave the child blocked
    # opening it forever, so until then a signal is only noted, and acted on once it is open.
    fifo_dir=$(mktemp -d)
    mkfifo "$fifo_dir/alive"
    stop_asked=0
    trap 'stop_asked=1' INT TERM
    WP_NETNS_INSIDE=1 unshare -rnpf --mount-proc --kill-child "$0" "${orig_args[@]}" 8<"$fifo_dir/alive" &
    child=$!
    exec 9>"$fifo_dir/alive"
    rm -rf "$fifo_dir"
    trap 'exec 9>&-' INT TERM
    [ "$stop_asked" = 0 ] || exec 9>&-
    rc=0
    while kill -0 "$child" 2>/dev/null; do
        rc=0
        wait "$child" || rc=$?
    done
    exit "$rc"
fi

weipipe=${WEIPIPE:-build/weipipe}
[ "$raw" = 1 ] || [ -x "$weipipe" ] || die "$weipipe is not an executable (set WEIPIPE or build first)"

holders=() ranks=() watcher=""
# The ranks' subshells defer SIGTERM while they wait for their command, so signalling them alone
# never ends a rank; this script is PID 1 of the namespace, so it signals every process in it,
# gives the ranks 5 s to end on their own (weipipe saves and stops on SIGTERM), and then exits,
# upon which the kernel kills whatever is left.
cleanup() {
    trap - EXIT INT TERM
    if [ "$$" = 1 ]; then
        kill -s TERM -- -1 2>/dev/null || true
    else
        for p in "${ranks[@]}" "${holders[@]}" $watcher; do kill "$p" 2>/dev/null || true; done
    fi
    for _ in $(seq 50); do
        local alive=0 p
        for p in "${ranks[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ "$alive" = 0 ] && break
        sleep 0.1
    done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
# the outer process ended (see above): end too
(while read -r -u 8 _; do :; done; kill -TERM $$) &
watcher=$!
exec 8<&-

addr() { echo "10.77.0.$(( $1 + 1 ))"; }
in_ns() { local r=$1; shift; nsenter -t "${holders[$r]}" -n "$@"; }

hz=$(kernel_hz)
ip link set lo up
ip link add br0 type bridge
ip link set br0 mtu "$mtu" up
for ((r = 0; r < nranks; r++)); do
    unshare -n sleep infinity &
    holders[r]=$!
done
for ((r = 0; r < nranks; r++)); do
    # the holder must have entered its namespace before a veth end is moved into it
    for _ in $(seq 100); do
        [ "$(readlink "/proc/${holders[r]}/ns/net")" != "$(readlink /proc/self/ns/net)" ] && break
        sleep 0.01
    done
    ip link add "vr$r" mtu "$mtu" type veth peer name eth0 mtu "$mtu" netns "${holders[r]}"
    ip link set "vr$r" master br0
    ip link set "vr$r" up
    in_ns "$r" ip link set lo up
    in_ns "$r" ip addr add "$(addr "$r")/24" dev eth0
    in_ns "$r" ip link set eth0 up
done

if [ -n "$bits" ]; then
    # burst: at least one tick's worth of bytes (rate/HZ) and a whole 64 KiB GSO packet
    burst=$(( bits / 8 / hz ))
    [ "$burst" -ge 65536 ] || burst=65536
    for ((r = 0; r < nranks; r++)); do
        in_ns "$r" tc qdisc add dev eth0 root handle 1: htb default 1 r2q 1000
        in_ns "$r" tc class add dev eth0 parent 1: classid 1:1 htb rate 100gbit quantum 200000
        for ((p = 0; p < nranks; p++)); do
            [ "$p" = "$r" ] && continue
            in_ns "$r" tc class add dev eth0 parent 1: classid "1:$((p + 10))" htb rate "${bits}bit" ceil "${bits}bit" \
                burst "$burst" cburst "$burst" quantum 200000
            in_ns "$r" tc filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dst "$(addr "$p")/32" \
                flowid "1:$((p + 10))"
        done
    done
    echo "netns_ring.sh: $nranks ranks, every directed pair shaped to ${bits} bit/s (HTB, burst $burst bytes, HZ $hz, MTU $mtu)" >&2
else
    echo "netns_ring.sh: $nranks ranks, links unshaped (MTU $mtu)" >&2
fi

secret=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
for ((r = 0; r < nranks; r++)); do
    a=$(addr "$r")
    args=()
    for x in "$@"; do args+=("${x//\{addr\}/$a}"); done
    if [ "$raw" = 0 ]; then
        args=("$weipipe" train "${args[@]}" --transport tcp --nranks "$nranks" --bind "$a")
    fi
    (
        export RANK=$r WORLD_SIZE=$nranks LOCAL_RANK=$r LOCAL_WORLD_SIZE=$nranks MASTER_ADDR=$(addr 0) \
            MASTER_PORT=$port WEIPIPE_SECRET=$secret WEIPIPE_JOB_ID=netns-$$ NETNS_ADDR=$a
        set +e
        in_ns "$r" "${args[@]}" 2>&1 | sed -u "s/^/[rank $r] /"
        exit "${PIPESTATUS[0]}"
    ) &
    ranks[r]=$!
done

status=0
for ((r = 0; r < nranks; r++)); do
    rc=0
    wait "${ranks[r]}" || rc=$?
    if [ "$rc" != 0 ] && [ "$status" = 0 ]; then
        status=$rc
        echo "netns_ring.sh: rank $r exited with status $rc" >&2
    fi
done
exit "$status"
