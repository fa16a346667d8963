# shellcheck shell=bash disable=SC2034
# Shared by scripts/weak_scaling.sh and scripts/strong_scaling.sh (sourced, not run).
# Options both take:
#   --smoke        tiny shapes, seconds (CI: tests/scaling)
#   --out DIR      CSV directory (default out/scaling)
#   --img DIR      PNG directory (default: --out)
#   --build DIR    build directory holding weipipe (default $WEIPIPE_BUILD or build; WEIPIPE=path wins)
#   --netns        real runs over kernel links (scripts/netns_ring.sh) instead of --link-bandwidth
#   --no-real      simulator only
#   --real-only    real runs only
# Every strategy `weipipe simulate --strategy all` lists is swept. Real runs of a strategy that
# `weipipe train` refuses are kept as rows with the refusal in the note column.

die() { echo "$(basename "$0"): $*" >&2; exit 2; }

sweep_init() {
    smoke=0 out=out/scaling img="" build=${WEIPIPE_BUILD:-build} netns=0 do_sim=1 do_real=1
    while [ $# -gt 0 ]; do
        case $1 in
            --smoke) smoke=1 ;;
            --out) out=${2:?--out needs a directory}; shift ;;
            --img) img=${2:?--img needs a directory}; shift ;;
            --build) build=${2:?--build needs a directory}; shift ;;
            --netns) netns=1 ;;
            --no-real) do_real=0 ;;
            --real-only) do_sim=0 ;;
            -h|--help) sed -n '2,/^set -/p' "$0" | sed '$d'; sed -n '/^# Options/,/^$/p' scripts/scaling_lib.sh; exit 0 ;;
            *) die "unknown option '$1' (see --help)" ;;
        esac
        shift
    done
    img=${img:-$out}
    wp=${WEIPIPE:-$build/weipipe}
    [ -x "$wp" ] || die "$wp is not an executable (build first, or --build DIR, or WEIPIPE=path)"
    py=/usr/bin/python3
    [ -x "$py" ] || py=python3
    mkdir -p "$out" "$img" || die "cannot create $out or $img"
    tmp=$(mktemp -d) || exit 1
    trap 'rm -rf "$tmp"' EXIT
    strategies=$("$wp" simulate --strategy all --format csv --config configs/tiny.ini --nranks 2 --device-tflops 1 |
        tail -n +2 | cut -d, -f1) || { echo "$(basename "$0"): weipipe simulate --strategy all failed" >&2; exit 1; }
    [ -n "$strategies" ] || { echo "$(basename "$0"): weipipe simulate listed no strategies" >&2; exit 1; }
}

# ini_get FILE KEY DEFAULT: a key's value in an INI config (the last one wins, as in cli.c)
ini_get() {
    local v
    v=$(sed -n "s/^[[:space:]]*$2[[:space:]]*=[[:space:]]*\\([^#;]*\\).*/\\1/p" "$1" | tail -n 1 | sed 's/[[:space:]]*$//')
    echo "${v:-$3}"
}

# csv_start FILE: a new CSV with the header
csv_start() { csv=$1; "$py" scripts/plot_scaling.py header >"$csv"; }

# sim_point SWEEP LABEL CONFIG N RANKS_PER_NODE M B S LINK TFLOPS [LATENCY]: one simulate
# --strategy all (latency: the config's unless given)
sim_point() {
    local sweep=$1 label=$2 config=$3 n=$4 rpn=$5 m=$6 b=$7 s=$8 link=$9 tflops=${10} lat=${11:-}
    local h l
    h=$(ini_get "$config" hidden-size 64)
    l=$(ini_get "$config" num-layers 4)
    if ! "$wp" simulate --strategy all --format csv --config "$config" --nranks "$n" --ranks-per-node "$rpn" \
        --num-microbatches "$m" --micro-batch-size "$b" --seq-length "$s" --link-bandwidth "$link" \
        --device-tflops "$tflops" ${lat:+--link-latency "$lat"} >"$tmp/sim.csv" 2>"$tmp/sim.err"; then
        echo "$(basename "$0"): weipipe simulate failed at N=$n M=$m b=$b s=$s link=$link: $(tail -n 1 "$tmp/sim.err")" >&2
        exit 1
    fi
    "$py" scripts/plot_scaling.py sim-rows sweep="$sweep" source=sim label="$label" nranks="$n" \
        ranks_per_node="$rpn" num_microbatches="$m" micro_batch_size="$b" seq_length="$s" hidden_size="$h" \
        num_layers="$l" link="$link" device_tflops="$tflops" <"$tmp/sim.csv" >>"$csv" || exit 1
}

# real_point SWEEP LABEL CONFIG N M B S LINK LATENCY STEPS TRANSPORT TFLOPS: weipipe train for
# every strategy, compute paced by --device-tflops, links by --link-bandwidth/--link-latency
# (every hop a link: --ranks-per-node 1), or over netns_ring.sh's shaped links with --netns;
# then the simulator's rows for the same point (label LABEL-sim), to compare with. One thread per
# rank: OpenMP threads that spin at barriers on a shared, busy machine slow a rank down 20x.
real_point() {
    local sweep=$1 label=$2 config=$3 n=$4 m=$5 b=$6 s=$7 link=$8 lat=$9 steps=${10} transport=${11} tflops=${12}
    local h l st source rc note
    h=$(ini_get "$config" hidden-size 64)
    l=$(ini_get "$config" num-layers 4)
    local args=(--config "$config" --nranks "$n" --num-microbatches "$m" --micro-batch-size "$b" --seq-length "$s"
        --steps "$steps" --link-latency "$lat" --ranks-per-node 1 --device-tflops "$tflops" --threads 1 --quiet
        --timeout 120s)
    for st in $strategies; do
        rm -f "$tmp/metrics.jsonl"
        rc=0
        if [ "$netns" = 1 ]; then
            source=real-netns
            WEIPIPE=$wp scripts/netns_ring.sh -n "$n" -r "$link" -- "${args[@]}" --strategy "$st" \
                --metrics "$tmp/metrics.jsonl" >"$tmp/train.out" 2>"$tmp/train.err" || rc=$?
        else
            source=real-$transport
            "$wp" train "${args[@]}" --transport "$transport" --link-bandwidth "$link" --strategy "$st" \
                --metrics "$tmp/metrics.jsonl" >"$tmp/train.out" 2>"$tmp/train.err" || rc=$?
        fi
        note=""
        if [ "$rc" != 0 ]; then
            # (over netns_ring.sh the ranks' stderr arrives on stdout, prefixed "[rank R] ")
            note="train exit $rc: $(cat "$tmp/train.err" "$tmp/train.out" | grep -v '^netns_ring' | grep 'error' |
                tail -n 1 | tr -d '"' || true)"
            echo "$(basename "$0"): $st N=$n: $note" >&2
        fi
        "$py" scripts/plot_scaling.py real-rows sweep="$sweep" source="$source" label="$label" nranks="$n" \
            ranks_per_node=1 num_microbatches="$m" micro_batch_size="$b" seq_length="$s" hidden_size="$h" \
            num_layers="$l" link="$link" device_tflops="$tflops" "$st" "$tmp/metrics.jsonl" \
            ${note:+"$note"} >>"$csv" || exit 1
    done
    sim_point "$sweep" "$label-sim" "$config" "$n" 1 "$m" "$b" "$s" "$link" "$tflops" "$lat"
}

# plot_csv CSV...: the PNGs (a missing matplotlib is a warning: the CSVs are the result)
plot_csv() {
    local rc=0
    "$py" scripts/plot_scaling.py plot "$@" --img "$img" || rc=$?
    if [ "$rc" = 3 ]; then echo "$(basename "$0"): no plots (matplotlib missing)" >&2
    elif [ "$rc" != 0 ]; then exit 1; fi
}
