#!/bin/bash
# K emulated hosts of G ranks each, launched the way a cluster launches them.
#
# Host H (0..K-1) is a network namespace named host<H+1> with one veth interface (address
# 10.78.0.<H+1>/24) plugged into a bridge, and its own loopback. The G ranks of a host share its
# namespace: they reach each other over its address (or its loopback), and the other hosts over
# the bridge. With -r, the link between hosts is slow: each host's egress has an HTB class per
# other host, rate = ceil = RATE (this kernel has no netem, see scripts/netns_ring.sh; pass
# --link-latency to weipipe train for latency). Traffic inside a host is never shaped.
#
# Host names resolve everywhere: the script runs in its own mount namespace too and binds a
# file of its own over /etc/hosts there ("10.78.0.1 host1" ...), which every rank sees
# (getaddrinfo reads it; the real /etc/hosts is untouched). Everything lives in a fresh user +
# network + PID + mount namespace (unshare -rnpfm), so it needs no root and nothing outlives
# the script, even when it is SIGKILLed (see netns_ring.sh for how).
#
# usage: scripts/netns_hosts.sh [-k K] [-g G] [-c CONTRACT] [-r RATE] [-p PORT] [-j ID]
#                               [-e R:VAR=VALUE]... [-o R:ARGS]... [-J ID2] [-K H -W FILE:N] [--] ARGS...
#   -k K         hosts (default 2)          -g G   ranks per host (default 2)
#   -c CONTRACT  how ranks are launched and learn who they are (default env):
#       slurm    what srun -N K --ntasks-per-node G sets: SLURM_JOB_ID, SLURM_STEP_ID,
#                SLURM_PROCID, SLURM_LOCALID, SLURM_NODEID, SLURM_NTASKS, SLURM_JOB_NODELIST=host[1-K],
#                SLURM_STEP_TASKS_PER_NODE; no MASTER_ADDR / MASTER_PORT (the port is then
#                20000 + (131 SLURM_JOB_ID + SLURM_STEP_ID) % 20000, as weipipe derives it)
#       torchrun one real `torchrun --no-python` per host (static rendezvous: its agent store
#                holds MASTER_PORT on host1): torchrun --nnodes K --nproc-per-node G --node-rank H
#                --master-addr host1 --master-port PORT --rdzv-id ID weipipe train ARGS
#       mpirun   one Open MPI `mpirun -np K*G --host host1:G,...` on host1, MASTER_ADDR=host1 and
#                MASTER_PORT exported (-x); it reaches the other hosts without ssh: its rsh agent
#                (--mca plm_rsh_agent) is a script that runs the remote orted inside that host's
#                namespaces (nsenter), where ssh would log in
#       env      the torchrun variables set by hand (any other launcher): RANK, WORLD_SIZE,
#                LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR=host1, MASTER_PORT, TORCHELASTIC_RUN_ID
#   -r RATE      bandwidth of each direction between two hosts (weipipe's spelling); default unshaped
#   -p PORT      MASTER_PORT (default 29500)        -j ID   the job id (default: derived from $$)
#   -e R:VAR=V   for rank R only (slurm, env): set VAR=V (e.g. an unreachable MASTER_ADDR)
#   -o R:ARGS    for rank R only (slurm, env): append ARGS (word-split) to its arguments
#   -d R:SEC     (slurm, env) the first job's rank R starts SEC seconds late: its rendezvous stays open
#   -J ID2       (slurm, env) a second job with id ID2, same contract, hosts, ports and ARGS,
#                started once the first one's rank 0 listens for its rendezvous on host1
#   -K H         SIGKILL every process of host H (its ranks, its namespace) once -W holds (not with -J)
#   -W FILE:N    ... once FILE has at least N lines (at most 60 s)
#   -X           with -K: first unplug the host (its veth down), so that no FIN or RST of its
#                dying sockets reaches anyone: the others see silence, as when a machine loses power
# Each rank (each torchrun) runs `$WEIPIPE train ARGS`: no --bind, no --nranks, no WEIPIPE_SECRET.
# Output lines come back as "[rank R] ..." (torchrun: "[host H] ...", the second job: "[job2 rank R] ...").
# At the end, one line per rank (per torchrun) that exited non-zero:
#   "netns_hosts.sh: [job2] rank R (hostH) exited with status S".
# Exit status: the first job's first failing rank's; 2 for bad usage, 77 when namespaces, tc or
# (for -c torchrun) torchrun are missing. WEIPIPE: the binary (default build/weipipe).
set -euo pipefail

die() { echo "netns_hosts.sh: $*" >&2; exit 2; }

rate_bits() {
    awk -v s="$1" 'BEGIN {
        if (!match(s, /^[0-9]+(\.[0-9]+)?/)) exit 1
        v = substr(s, 1, RLENGTH); u = substr(s, RLENGTH + 1); sub(/\/s$/, "", u)
        m["bit"] = 1; m["Kbit"] = 1e3; m["Mbit"] = 1e6; m["Gbit"] = 1e9; m["Tbit"] = 1e12
        m["Byte"] = 8; m["KByte"] = 8e3; m["MByte"] = 8e6; m["GByte"] = 8e9; m["TByte"] = 8e12
        if (!(u in m) || v * m[u] <= 0) exit 1
        printf "%.0f\n", v * m[u] }'
}

orig_args=("$@")
K=2 G=2 contract=env rate="" port=29500 jobid="" job2="" kill_host="" kill_when="" unplug=0
rank_env=() rank_args=() rank_delay=()
while getopts "k:g:c:r:p:j:e:o:d:J:K:W:Xh" opt; do
    case $opt in
        k) K=$OPTARG ;;
        g) G=$OPTARG ;;
        c) contract=$OPTARG ;;
        r) rate=$OPTARG ;;
        p) port=$OPTARG ;;
        j) jobid=$OPTARG ;;
        e) rank_env+=("$OPTARG") ;;
        o) rank_args+=("$OPTARG") ;;
        d) rank_delay+=("$OPTARG") ;;
        J) job2=$OPTARG ;;
        K) kill_host=$OPTARG ;;
        W) kill_when=$OPTARG ;;
        X) unplug=1 ;;
        h) sed -n '2,45p' "$0"; exit 0 ;;
        *) die "unknown option (see -h)" ;;
    esac
done
shift $((OPTIND - 1))
[ "${1:-}" = "--" ] && shift
[[ $K =~ ^[0-9]+$ ]] && [ "$K" -ge 1 ] && [ "$K" -le 200 ] || die "-k: '$K' is not a host count in 1..200"
[[ $G =~ ^[0-9]+$ ]] && [ "$G" -ge 1 ] && [ "$G" -le 64 ] || die "-g: '$G' is not a rank count in 1..64"
[[ $port =~ ^[0-9]+$ ]] && [ "$port" -ge 1 ] && [ "$port" -le 65534 ] || die "-p: '$port' is not a port"
case $contract in slurm | torchrun | mpirun | env) ;; *) die "-c: '$contract' is not slurm, torchrun, mpirun or env" ;; esac
[ -z "$kill_host" ] || { [[ $kill_host =~ ^[0-9]+$ ]] && [ "$kill_host" -lt "$K" ]; } || die "-K: '$kill_host' is not a host in 0..$((K - 1))"
[ -z "$kill_host" ] || [[ $kill_when =~ ^.+:[0-9]+$ ]] || die "-K needs -W FILE:N"
[ -z "$kill_when" ] || [[ $kill_when =~ ^.+:[0-9]+$ ]] || die "-W: '$kill_when' is not FILE:N"
[ -z "$kill_host" ] || [ -z "$job2" ] || die "-K and -J: one at a time"
bits=""
if [ -n "$rate" ]; then bits=$(rate_bits "$rate") || die "-r: '$rate' is not a rate such as 1Gbit or 125MByte"; fi
if [ "${#rank_env[@]}${#rank_args[@]}${#rank_delay[@]}" != 000 ] || [ -n "$job2" ]; then
    [ "$contract" = slurm ] || [ "$contract" = env ] || die "-e, -o, -d and -J are per rank: not with -c $contract"
fi
[ "$contract" != slurm ] || [ -z "$jobid" ] || [[ $jobid =~ ^[0-9]+$ ]] || die "-j: Slurm job ids are numbers"

if [ -z "${WP_NETNS_INSIDE:-}" ]; then
    for tool in unshare nsenter ip tc; do
        command -v "$tool" >/dev/null || { echo "netns_hosts.sh: '$tool' not found (Debian: util-linux, iproute2)" >&2; exit 77; }
    done
    if [ "$contract" = torchrun ] || [ "$contract" = mpirun ]; then
        command -v "$contract" >/dev/null || { echo "netns_hosts.sh: $contract not found" >&2; exit 77; }
    fi
    unshare -rnpfm --mount-proc true 2>/dev/null || {
        echo "netns_hosts.sh: cannot create user+network+PID+mount namespaces here (unshare -rnpfm failed)" >&2; exit 77; }
    # As netns_ring.sh: the inner copy reads a pipe whose only writer is this outer process, and
    # tears down at its end of file, however this process ends.
    fifo_dir=$(mktemp -d)
    mkfifo "$fifo_dir/alive"
    stop_asked=0
    trap 'stop_asked=1' INT TERM
    WP_NETNS_INSIDE=1 unshare -rnpfm --mount-proc --kill-child "$0" "${orig_args[@]}" 8<"$fifo_dir/alive" &
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

weipipe=$(realpath "${WEIPIPE:-build/weipipe}")
[ -x "$weipipe" ] || die "$weipipe is not an executable (set WEIPIPE or build first)"
[ -n "$jobid" ] || jobid=$(( 4000 + $$ % 5000 ))

holders=() procs=() watcher="" hosts_file=""
# This script is PID 1 of its PID namespace: on any exit it signals every process in it, gives
# the ranks 5 s to end on their own, and exits, upon which the kernel kills whatever is left
# and the namespaces (network, mount: the /etc/hosts binding) vanish.
cleanup() {
    trap - EXIT INT TERM
    kill -s TERM -- -1 2>/dev/null || true
    for _ in $(seq 50); do
        local alive=0 p
        for p in "${procs[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
        [ "$alive" = 0 ] && break
        sleep 0.1
    done
    [ -z "$hosts_file" ] || rm -f "$hosts_file"
    [ -z "${logs:-}" ] || rm -rf "$logs"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
(while read -r -u 8 _; do :; done; kill -TERM $$) &
watcher=$!
exec 8<&-

addr() { echo "10.78.0.$(( $1 + 1 ))"; }
in_ns() { local h=$1; shift; nsenter -t "${holders[$h]}" -n -u "$@"; }

# names: a file of our own bound over /etc/hosts in this mount namespace only
hosts_file=$(mktemp)
# torchrun's own logs (--tee 2 also writes each rank's stderr here): Debian's torch 1.13 on
# Python 3.11 cannot parse the default "--redirects 0 --tee 0" (Std.from_str returns None for
# 0, as IntFlag no longer iterates it), so they are "2" (stderr) and need a --log_dir.
logs=$(mktemp -d)
{ echo "127.0.0.1 localhost"; for ((h = 0; h < K; h++)); do echo "$(addr "$h") host$((h + 1))"; done; } > "$hosts_file"
mount --bind "$hosts_file" /etc/hosts

ip link set lo up
ip link add br0 type bridge
ip link set br0 up
for ((h = 0; h < K; h++)); do
    # its own network and host name (UTS) namespace: gethostname() says host<H+1> there, as on a node
    unshare -nu sh -c "hostname host$((h + 1)) && exec sleep infinity" &
    holders[h]=$!
done
for ((h = 0; h < K; h++)); do
    for _ in $(seq 100); do
        [ "$(readlink "/proc/${holders[h]}/ns/net")" != "$(readlink /proc/self/ns/net)" ] &&
            [ "$(readlink "/proc/${holders[h]}/exe")" != "$(readlink /proc/self/exe)" ] &&
            [ "$(nsenter -t "${holders[h]}" -u hostname)" = "host$((h + 1))" ] && break
        sleep 0.01
    done
    ip link add "vh$h" type veth peer name eth0 netns "${holders[h]}"
    ip link set "vh$h" master br0
    ip link set "vh$h" up
    in_ns "$h" ip link set lo up
    in_ns "$h" ip addr add "$(addr "$h")/24" dev eth0
    in_ns "$h" ip link set eth0 up
done
if [ -n "$bits" ]; then
    burst=$(( bits / 8 / 100 )) # a tick's worth at HZ=100 (the largest), at least a 64 KiB GSO packet
    [ "$burst" -ge 65536 ] || burst=65536
    for ((h = 0; h < K; h++)); do
        in_ns "$h" tc qdisc add dev eth0 root handle 1: htb default 1 r2q 1000
        in_ns "$h" tc class add dev eth0 parent 1: classid 1:1 htb rate 100gbit quantum 200000
        for ((p = 0; p < K; p++)); do
            [ "$p" = "$h" ] && continue
            in_ns "$h" tc class add dev eth0 parent 1: classid "1:$((p + 10))" htb rate "${bits}bit" ceil "${bits}bit" \
                burst "$burst" cburst "$burst" quantum 200000
            in_ns "$h" tc filter add dev eth0 parent 1: protocol ip prio 1 u32 match ip dst "$(addr "$p")/32" \
                flowid "1:$((p + 10))"
        done
    done
fi
echo "netns_hosts.sh: $K hosts x $G ranks, contract $contract, job $jobid, links between hosts ${bits:+shaped to $bits bit/s}${bits:-unshaped}" >&2

declare -A who
# rank R's environment under the contract (job id ID), one VAR=VALUE per line
rank_vars() {
    local r=$1 id=$2 h=$(( $1 / G )) l=$(( $1 % G ))
    case $contract in
        slurm)
            printf '%s\n' "SLURM_JOB_ID=$id" SLURM_STEP_ID=0 SLURM_STEPID=0 "SLURM_PROCID=$r" "SLURM_LOCALID=$l" \
                "SLURM_NODEID=$h" "SLURM_NTASKS=$((K * G))" "SLURM_NNODES=$K" "SLURM_JOB_NODELIST=host[1-$K]" \
                "SLURM_STEP_TASKS_PER_NODE=$G(x$K)" "SLURMD_NODENAME=host$((h + 1))" ;;
        env)
            printf '%s\n' "RANK=$r" "WORLD_SIZE=$((K * G))" "LOCAL_RANK=$l" "LOCAL_WORLD_SIZE=$G" "GROUP_RANK=$h" \
                MASTER_ADDR=host1 "MASTER_PORT=$port" "TORCHELASTIC_RUN_ID=$id" ;;
    esac
}

# start_job ID TAG: every rank (or torchrun) of one job in the background
start_job() {
    local id=$1 tag=$2
    shift 2
    if [ "$contract" = mpirun ]; then
        # Open MPI's rsh launcher runs "AGENT HOST COMMAND..." per remote node: here AGENT runs
        # COMMAND in HOST's namespaces (the holders' pids are in the file beside it)
        local agent="$logs/agent.sh" hostlist="" h
        for ((h = 0; h < K; h++)); do
            echo "host$((h + 1)) ${holders[h]}" >> "$logs/holders"
            hostlist+="${hostlist:+,}host$((h + 1)):$G"
        done
        cat > "$agent" <<AGENT
#!/bin/bash
# Open MPI rsh agent for netns_hosts.sh: [-x] HOST COMMAND... -> COMMAND in HOST's namespaces
while [ "\${1#-}" != "\$1" ]; do shift; done
pid=\$(awk -v h="\$1" '\$1 == h {print \$2}' "$logs/holders")
[ -n "\$pid" ] || { echo "agent: unknown host '\$1'" >&2; exit 1; }
shift
exec nsenter -t "\$pid" -n -u /bin/sh -c "\$*"
AGENT
        chmod +x "$agent"
        (
            set +e
            in_ns 0 env -u WEIPIPE_SECRET -u WEIPIPE_JOB_ID -u RANK MASTER_ADDR=host1 MASTER_PORT="$port" \
                mpirun --allow-run-as-root --oversubscribe -np $((K * G)) --host "$hostlist" --mca plm_rsh_agent "$agent" \
                -x MASTER_ADDR -x MASTER_PORT "$weipipe" train "$@" 2>&1 | sed -u "s/^/[${tag}mpirun] /"
            exit "${PIPESTATUS[0]}"
        ) &
        procs+=($!)
        who[$!]="${tag}mpirun on host1"
        return
    fi
    if [ "$contract" = torchrun ]; then
        for ((h = 0; h < K; h++)); do
            (
                set +e
                in_ns "$h" env -u WEIPIPE_SECRET -u WEIPIPE_JOB_ID -u RANK -u MASTER_ADDR -u MASTER_PORT \
                    torchrun --no_python --nnodes "$K" --nproc_per_node "$G" --node_rank "$h" --master_addr host1 \
                    --master_port "$port" --rdzv_id "$id" --max_restarts 0 --monitor_interval 0.5 \
                    --redirects 2 --tee 2 --log_dir "$logs/$tag$h" \
                    "$weipipe" train "$@" 2>&1 | sed -u "s/^/[${tag}host $h] /"
                exit "${PIPESTATUS[0]}"
            ) &
            procs+=($!)
            who[$!]="${tag}torchrun of host$((h + 1))"
        done
        return
    fi
    for ((r = 0; r < K * G; r++)); do
        local h=$(( r / G )) envs=() extra=() e a
        mapfile -t envs < <(rank_vars "$r" "$id")
        for e in "${rank_env[@]}"; do [ "${e%%:*}" = "$r" ] && envs+=("${e#*:}"); done
        for a in "${rank_args[@]}"; do [ "${a%%:*}" = "$r" ] && read -r -a more <<< "${a#*:}" && extra+=("${more[@]}"); done
        local delay=0 d
        for d in "${rank_delay[@]}"; do [ -z "$tag" ] && [ "${d%%:*}" = "$r" ] && delay=${d#*:}; done
        (
            set +e
            sleep "$delay"
            in_ns "$h" env -u WEIPIPE_SECRET -u WEIPIPE_JOB_ID -u RANK -u MASTER_ADDR -u MASTER_PORT "${envs[@]}" \
                "$weipipe" train "$@" "${extra[@]}" 2>&1 | sed -u "s/^/[${tag}rank $r] /"
            exit "${PIPESTATUS[0]}"
        ) &
        procs+=($!)
        who[$!]="${tag}rank $r (host$((h + 1)))"
    done
}

# wait_for FILE:N: until FILE has N lines (at most 60 s)
wait_for() {
    local file=${1%:*} want=${1##*:}
    for _ in $(seq 600); do
        [ -f "$file" ] && [ "$(wc -l < "$file")" -ge "$want" ] && break
        sleep 0.1
    done
}

args=("$@")
start_job "$jobid" "" "${args[@]}"
first=("${procs[@]}")
if [ -n "$job2" ]; then
    rdv=$port
    [ "$contract" != slurm ] || rdv=$(( 20000 + jobid % 20000 * 131 % 20000 )) # as ring/launch/launcher_env.c derives it
    for _ in $(seq 300); do
        in_ns 0 ss -Hltn "sport = :$rdv" 2>/dev/null | grep -q . && break
        sleep 0.1
    done
    start_job "$job2" "job2 " "${args[@]}"
fi

if [ -n "$kill_host" ]; then
    wait_for "$kill_when"
    victim_ns=$(readlink "/proc/${holders[kill_host]}/ns/net")
    victims=()
    for d in /proc/[0-9]*; do
        [ "$(readlink "$d/ns/net" 2>/dev/null)" = "$victim_ns" ] && victims+=("${d#/proc/}")
    done
    killed_at=$(date +%s.%N)
    [ "$unplug" = 0 ] || ip link set "vh$kill_host" down
    kill -9 "${victims[@]}" 2>/dev/null || true
    echo "netns_hosts.sh: killed host$((kill_host + 1)) ($(addr "$kill_host")): ${#victims[@]} processes, every one in its namespace" >&2
fi

status=0
for p in "${procs[@]}"; do
    rc=0
    wait "$p" || rc=$?
    if [ "$rc" != 0 ]; then
        echo "netns_hosts.sh: ${who[$p]} exited with status $rc" >&2
        for f in "${first[@]}"; do [ "$f" = "$p" ] && [ "$status" = 0 ] && status=$rc; done
    fi
done
if [ -n "$kill_host" ]; then
    echo "netns_hosts.sh: the last process ended $(awk -v a="$killed_at" -v b="$(date +%s.%N)" 'BEGIN {printf "%.2f", b - a}') s after the kill" >&2
fi
exit "$status"
