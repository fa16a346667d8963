#!/bin/bash
# Weak scaling: the global batch grows with the ranks N (the paper's figures 6 and 7).
#  simulator, the paper's shape (configs/paper-h4096-s16k.ini: h 4096, L 32, s 16384, b 1,
#    312 TFLOP/s, 10 Gbit/s between nodes, NVLink inside):
#      paper-small: 4 ranks per node, N = 4, 8, 16, batch 16N (64 -> 256), as figure 6
#      paper-large: 8 ranks per node, N = 8, 16, 32, batch 16N (128 -> 512), figure 7 (N <= L = 32: one chunk per rank)
#  real runs on this machine (configs/tiny.ini at s 128, b 4; every hop a 20 Mbit/s, 1 ms link;
#    compute paced to 0.004 TFLOP/s per rank), next to the simulator on the same point (cpu-tiny-sim):
#      cpu-tiny: N = 1, 2, 4, M = 2N micro-batches, 4 steps, every strategy
# Output: OUT/weak.csv (columns: scripts/plot_scaling.py) and IMG/scaling-weak-<label>.png.
# usage: scripts/weak_scaling.sh [--smoke] [--out DIR] [--img DIR] [--build DIR] [--netns]
#                                [--no-real | --real-only]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
. scripts/scaling_lib.sh
sweep_init "$@"
csv_start "$out/weak.csv"

if [ "$smoke" = 1 ]; then
    if [ "$do_sim" = 1 ]; then
        for n in 2 4; do sim_point weak smoke-sim configs/tiny.ini "$n" 1 $((2 * n)) 2 32 20Mbit 0.01; done
    fi
    [ "$do_real" = 1 ] && real_point weak smoke-real configs/tiny.ini 2 4 2 32 20Mbit 1ms 2 local 0.01
else
    if [ "$do_sim" = 1 ]; then
        paper=configs/paper-h4096-s16k.ini
        for n in 4 8 16; do sim_point weak paper-small "$paper" "$n" 4 $((16 * n)) 1 16384 10Gbit 312; done
        for n in 8 16 32; do sim_point weak paper-large "$paper" "$n" 8 $((16 * n)) 1 16384 10Gbit 312; done
    fi
    if [ "$do_real" = 1 ]; then
        for n in 1 2 4; do real_point weak cpu-tiny configs/tiny.ini "$n" $((2 * n)) 4 128 20Mbit 1ms 4 tcp 0.004; done
    fi
fi
plot_csv "$csv"
echo "$csv"
