#!/bin/bash
# weipipe train on emulated hosts (scripts/netns_hosts.sh: K network namespaces on a bridge, G
# ranks each), started with nothing but a launcher's variables: no --bind, no --nranks, no
# WEIPIPE_SECRET. For K = 2 and 3 (G = 2), under the Slurm variables (SLURM_JOB_NODELIST=host[1-K],
# no MASTER_ADDR), a real torchrun per host (its agent store holds MASTER_PORT on host1) and the
# torchrun variables set by hand, 5 steps of weipipe-interleave and of 1f1b give losses
# bit-identical to the same job as threads of one process (--transport local --nranks K*G); the
# same under one Open MPI mpirun across the hosts (its rsh agent enters the namespaces, no ssh).
# Each rank says once which address it listens on: its host's, the one that routes to host1.
# Skips (77) where network namespaces cannot be made; the torchrun / mpirun runs where they are missing.
source "$(dirname "$0")/runtime_lib.sh"
HOSTS=$(realpath "$(dirname "$0")/../../scripts/netns_hosts.sh")
export WEIPIPE=$W
unshare -rnpfm --mount-proc true 2> /dev/null || { echo "SKIP: cannot create network namespaces (unshare -rnpfm)"; exit 77; }
contracts=(slurm env)
for l in torchrun mpirun; do
  if command -v $l > /dev/null; then contracts+=($l); else echo "$l not found: its runs are skipped"; fi
done
job() { # job K CONTRACT OUT ARGS...: netns_hosts.sh's output in OUT; fails the test unless it exits 0
  local k=$1 c=$2 out=$3; shift 3
  "$HOSTS" -k $k -g 2 -c $c -p 29500 -- --config "$CFG" --data "$DATA" --threads 1 --timeout 60s "$@" > "$out" 2>&1 ||
    { cat "$out"; fail "K=$k $c: exit $?"; }
}
for k in 2 3; do
  n=$((k * 2)) shape=()
  [ $k = 3 ] && shape=(--num-layers 6) # a chunk per rank needs a layer per rank
  for S in weipipe-interleave 1f1b; do
    rm -f "$TMP/local.jsonl"
    train --transport local --nranks $n --strategy $S --steps 5 "${shape[@]}" --metrics "$TMP/local.jsonl" ||
      fail "K=$k $S local"
    for c in "${contracts[@]}"; do
      rm -f "$TMP/$c.jsonl"
      quiet=(--quiet)
      [ $S = 1f1b ] && quiet=() # one run of each: every rank's address line
      job $k $c "$TMP/out" --strategy $S --steps 5 "${shape[@]}" "${quiet[@]}" --metrics "$TMP/$c.jsonl"
      [ "$(losses "$TMP/$c.jsonl" | wc -l)" = 5 ] || { cat "$TMP/out"; fail "K=$k $c $S: not 5 losses"; }
      [ "$(losses "$TMP/$c.jsonl")" = "$(losses "$TMP/local.jsonl")" ] ||
        fail "K=$k $c $S: losses $(losses "$TMP/$c.jsonl" | tr '\n' ' ') differ from local $(losses "$TMP/local.jsonl" | tr '\n' ' ')"
      if [ $S = 1f1b ]; then
        for ((r = 0; r < n; r++)); do
          want="rank $r: listening on 10.78.0.$((r / 2 + 1)), the interface that routes to MASTER_ADDR host1"
          [ "$(grep -cF "$want" "$TMP/out")" = 1 ] || { cat "$TMP/out"; fail "K=$k $c: no single line '$want'"; }
        done
      fi
      case $c in # the rendezvous port each contract gives
        slurm) port="host1:$((20000 + $(sed -n "s/.*job \([0-9]*\),.*/\1/p" "$TMP/out" | head -1) % 20000 * 131 % 20000))" ;;  # step 0
        torchrun) port=host1:29501 ;; # MASTER_PORT + 1: torchrun's agent store holds 29500
        env | mpirun) port=host1:29500 ;;
      esac
      grep -q "any process that reaches $port may join" "$TMP/out" || { cat "$TMP/out"; fail "K=$k $c: rendezvous not at $port"; }
      echo "K=$k G=2 $c $S: 5 losses bit-identical to --transport local --nranks $n (rendezvous at $port)"
    done
  done
done
