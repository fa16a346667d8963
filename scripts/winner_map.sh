#!/bin/bash
# Which strategy wins where: `weipipe simulate --strategy all` over micro-batch size b x sequence
# length s on a preset (default configs/paper-h4096-s16k.ini: 16 ranks at the effective 156
# TFLOP/s, two nodes of 8, 10 Gbit/s between, 80 GB per rank), M as the preset says. At each
# point the winner is the fastest strategy among those whose peak memory fits (--device-memory),
# each strategy at its best of --warmup-extra 0/1 (1f1b, zb-h1, zb-h2, seq1f1b) and
# --seq-segments 2/8 (seq1f1b), the knobs that matter most here. Prints a Markdown grid (winner and its lead over the runner-up) and
# draws it as a picture when matplotlib is there (Debian python3-matplotlib).
#
# usage: scripts/winner_map.sh [WEIPIPE] [PNG] [EXTRA FLAGS...]
#        (defaults build/weipipe, docs/img/winner-map-paper-n16.png)
set -eu
cd "$(dirname "$0")/.."
W=${1:-build/weipipe}
PNG=${2:-docs/img/winner-map-paper-n16.png}
shift $(($# < 2 ? $# : 2))
CONFIG=configs/paper-h4096-s16k.ini
[ -x "$W" ] || { echo "winner_map: no weipipe binary at $W (build first, or pass its path)" >&2; exit 2; }
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
bs=(1 2 4 8 16)
ss=(2048 4096 8192 16384 32768 65536)
for b in "${bs[@]}"; do
  for s in "${ss[@]}"; do
    # each strategy's knobs that matter here (auto's full search also varies b: minutes per map)
    for knobs in "--seq-segments 2 --warmup-extra 0" "--seq-segments 2 --warmup-extra 1" \
                 "--seq-segments 8 --warmup-extra 0" "--seq-segments 8 --warmup-extra 1"; do
      # shellcheck disable=SC2086 # knobs holds flags
      "$W" simulate --strategy all --config "$CONFIG" --micro-batch-size "$b" --seq-length "$s" $knobs "$@" --format csv |
        awk -F, -v b="$b" -v s="$s" 'NR > 1 && $2 != "" { print b "," s "," $1 "," $3 "," $NF }' >>"$tmp/points.csv"
    done
  done
done
/usr/bin/python3 - "$tmp/points.csv" "$PNG" "$CONFIG $*" <<'PY'
import collections, csv, sys
pts = collections.defaultdict(list)
for b, s, st, tps, fits in csv.reader(open(sys.argv[1])):
    pts[(int(b), int(s))].append((float(tps), st, fits == "true"))
bs = sorted({k[0] for k in pts}); ss = sorted({k[1] for k in pts})
win = {}
for k, rows in pts.items():
    best = {}  # each strategy's fastest setting that fits
    for tps, st, fits in rows:
        if fits and tps > best.get(st, 0):
            best[st] = tps
    fit = sorted(((t, st) for st, t in best.items()), reverse=True)
    win[k] = (fit[0][1], fit[0][0] / fit[1][0] if len(fit) > 1 else None) if fit else (None, None)
print("| b \\ s | " + " | ".join(f"{s:,}" for s in ss) + " |")
print("| --- |" + " --- |" * len(ss))
for b in bs:
    cells = []
    for s in ss:
        st, lead = win[(b, s)]
        cells.append("none fits" if st is None else f"{st} ({lead:.2f}x)" if lead else st)
    print(f"| {b} | " + " | ".join(cells) + " |")
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    print("winner_map: matplotlib is missing, no picture", file=sys.stderr)
    sys.exit(0)
names = sorted({w[0] for w in win.values() if w[0]})
cmap = matplotlib.colormaps["tab10"]
col = {n: cmap(i) for i, n in enumerate(names)}
fig, ax = plt.subplots(figsize=(8.5, 4.6))
for i, b in enumerate(bs):
    for j, s in enumerate(ss):
        st, lead = win[(b, s)]
        ax.add_patch(plt.Rectangle((j, i), 1, 1, color=col[st] if st else "lightgrey", alpha=0.8))
        ax.text(j + 0.5, i + 0.5, (st or "none fits") + (f"\n{lead:.2f}x" if lead else ""), ha="center", va="center",
                fontsize=7)
ax.set_xlim(0, len(ss)); ax.set_ylim(0, len(bs))
ax.set_xticks([j + 0.5 for j in range(len(ss))]); ax.set_xticklabels([f"{s:,}" for s in ss])
ax.set_yticks([i + 0.5 for i in range(len(bs))]); ax.set_yticklabels([str(b) for b in bs])
ax.set_xlabel("sequence length s (tokens)"); ax.set_ylabel("micro-batch size b")
ax.set_title("fastest strategy that fits in memory (lead over the runner-up)\n" + sys.argv[3], fontsize=8)
fig.tight_layout(); fig.savefig(sys.argv[2], dpi=110)
print(f"winner_map: drew {sys.argv[2]}", file=sys.stderr)
PY
