#!/bin/bash
# Strong scaling: the global batch stays fixed while the ranks N grow (the paper's figures 8
# and 9), plus two sweeps at fixed N and batch:
#  simulator, the paper's shape (configs/paper-h4096-s16k.ini: h 4096, L 32, s 16384, b 1,
#    312 TFLOP/s, 10 Gbit/s between nodes, NVLink inside):
#      paper-small: 4 ranks per node, N = 4, 8, 16, batch 128 (figure 8)
#      paper-large: 8 ranks per node, N = 8, 16, 32, batch 256 (figure 9; N <= L = 32: one chunk per rank)
#      seqlen paper-n16: N = 16 (8 per node), M = 32, b = 1, s = 4096 ... 262144: where weight
#        passing overtakes 1F1B, next to the analytic traffic crossover b*s = 18hL/N
#      bandwidth paper-n16-s16k: N = 16, every hop the link (--ranks-per-node 1), M = 32, b = 1,
#        links 1 Gbit/s ... 10 Tbit/s and unlimited: where each strategy stops being link-bound
#  real runs on this machine (configs/tiny.ini at s 128, b 4; every hop a 20 Mbit/s, 1 ms link;
#    compute paced to 0.004 TFLOP/s per rank), next to the simulator on the same point (cpu-tiny-sim):
#      cpu-tiny: N = 1, 2, 4, M = 8, 4 steps, every strategy
# Output: OUT/strong.csv, OUT/seqlen.csv, OUT/bandwidth.csv (columns: scripts/plot_scaling.py)
# and IMG/scaling-{strong,seqlen,bandwidth}-<label>.png.
# usage: scripts/strong_scaling.sh [--smoke] [--out DIR] [--img DIR] [--build DIR] [--netns]
#                                  [--no-real | --real-only]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. scripts/scaling_lib.sh
sweep_init "$@"
paper=configs/paper-h4096-s16k.ini
made=()

csv_start "$out/strong.csv"
if [ "$smoke" = 1 ]; then
    if [ "$do_sim" = 1 ]; then
        for n in 2 4; do sim_point strong smoke-sim configs/tiny.ini "$n" 1 8 2 32 20Mbit 0.01; done
    fi
    [ "$do_real" = 1 ] && real_point strong smoke-real configs/tiny.ini 2 8 2 32 20Mbit 1ms 2 local 0.01
else
    if [ "$do_sim" = 1 ]; then
        for n in 4 8 16; do sim_point strong paper-small "$paper" "$n" 4 128 1 16384 10Gbit 312; done
        for n in 8 16 32; do sim_point strong paper-large "$paper" "$n" 8 256 1 16384 10Gbit 312; done
    fi
    if [ "$do_real" = 1 ]; then
        for n in 1 2 4; do real_point strong cpu-tiny configs/tiny.ini "$n" 8 4 128 20Mbit 1ms 4 tcp 0.004; done
    fi
fi
made+=("$csv")

if [ "$do_sim" = 1 ]; then
    csv_start "$out/seqlen.csv"
    if [ "$smoke" = 1 ]; then
        for s in 32 64 128; do sim_point seqlen smoke-sim configs/tiny.ini 2 1 4 2 "$s" 20Mbit 0.01; done
    else
        for s in 4096 8192 16384 32768 65536 131072 262144; do
            sim_point seqlen paper-n16 "$paper" 16 8 32 1 "$s" 10Gbit 312
        done
    fi
    made+=("$csv")

    csv_start "$out/bandwidth.csv"
    if [ "$smoke" = 1 ]; then
        for bw in 10Mbit 100Mbit 1Gbit 0; do sim_point bandwidth smoke-sim configs/tiny.ini 2 1 4 2 32 "$bw" 0.01; done
    else
        for bw in 1Gbit 3Gbit 10Gbit 30Gbit 100Gbit 300Gbit 1Tbit 3Tbit 10Tbit 0; do
            sim_point bandwidth paper-n16-s16k "$paper" 16 1 32 1 16384 "$bw" 312
        done
    fi
    made+=("$csv")
fi
plot_csv "${made[@]}"
printf '%s\n' "${made[@]}"
