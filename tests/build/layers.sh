#!/bin/bash
# The layers only point down, and the build enforces it (docs/architecture.md): compile a probe
# file with the very command line ninja uses for a real object of each layer, and check that
#   - an upward include (a header of a layer above) does not compile: "No such file";
#   - another layer's private header (*_impl.h, a backend's internals) does not compile;
#   - the public headers of the layers below do compile (the probe is a fair one).
# Arguments: BUILD_DIR (with compile_commands.json).
set -u
B=$1
CC_JSON=$B/compile_commands.json
[ -f "$CC_JSON" ] || { echo "no $CC_JSON"; exit 1; }
ROOT=$(cd "$(dirname "$0")/../.." && pwd) || exit 1 # the source tree: folders are matched under it
TMP=$(mktemp -d) || exit 1
trap 'rm -rf "$TMP"' EXIT
fails=0

# The compile command for $1, a source or a folder of the tree (cc_command.py): line 1 the folder
# it runs in, line 2 the flags.
command_for() { python3 "$(dirname "$0")/cc_command.py" "$CC_JSON" "$ROOT" "$1"; }

# probe LAYER_FOLDER HEADER expect(ok|refused)
probe() {
    local folder=$1 header=$2 expect=$3
    local info dir cmd
    info=$(command_for "$folder")
    dir=$(printf '%s\n' "$info" | sed -n 1p)
    cmd=$(printf '%s\n' "$info" | sed -n 2p)
    [ -n "$cmd" ] || { echo "FAIL: no compile command for $folder"; fails=$((fails + 1)); return; }
    printf '#include "%s"\nint wp_probe;\n' "$header" >"$TMP/probe.c"
    if (cd "$dir" && eval "$cmd -fsyntax-only $TMP/probe.c") >"$TMP/out.txt" 2>&1; then got=ok; else got=refused; fi
    if [ "$got" = refused ] && ! grep -q "No such file" "$TMP/out.txt"; then
        echo "FAIL: $folder including $header failed for another reason:"; cat "$TMP/out.txt"; fails=$((fails + 1)); return
    fi
    if [ "$got" = "$expect" ]; then
        echo "ok: $folder -> \"$header\": $got"
    else
        echo "FAIL: $folder -> \"$header\": $got, expected $expect"; fails=$((fails + 1))
    fi
}

# kernels: the bottom but for src/base
probe kernels kernels.h ok
probe kernels result.h ok         # src/base: the result type and the log, below every layer
probe kernels transport.h refused
probe kernels optim.h refused
probe kernels layout.h refused
# ring: kernels (and src/base) only
probe ring kernels.h ok
probe ring result.h ok
probe ring cli.h refused
probe ring train.h refused
probe ring layout.h refused
probe ring optim.h refused
probe ring cpu.h refused          # a backend's internals
# optim: kernels only
probe optim kernels.h ok
probe optim layout.h refused
probe optim cli.h refused
probe optim transport.h refused
# src/: the public headers below, never their internals ...
probe src/runtime transport.h ok
probe src/runtime optim.h ok
probe src/runtime kernels.h ok
probe src/faults control_impl.h refused
# ring/, folder by folder (ring/meson.build): the public headers (ring_public, copied flat) ...
for h in transport.h transport_table.h device_tp.h ib_ops.h control.h clock.h clock_sync.h bootstrap.h launch.h \
         job.h ring_warn.h; do
    probe src/runtime "$h" ok
done
# ... and each folder's private ones: net/, link/, transport/ and its transports, control/,
# rendezvous/, launch/ (by bare name, as ring's own files include them, and by path)
for h in sock.h wire.h link_model.h transport_impl.h tcp.h tcp_impl.h local.h local_world.h ib_transport.h \
         ib_proto.h ib_soft.h nccl_transport.h layered_impl.h staged.h control_impl.h control_tcp.h rendezvous.h \
         handshake.h flags_check.h sha256.h mpi_boot.h peer_hosts.h \
         transport/transport_impl.h transport/tcp/tcp_impl.h rendezvous/rendezvous.h ring/net/sock.h; do
    probe src/runtime "$h" refused
done
probe src/model backend.h refused
probe src/model cuda_impl.h refused
# ... and inside src/: base < model < io, schedule < faults < cli < runtime < cmd
probe src/base layout.h refused
probe src/base kernels.h refused   # src/base is below every layer, kernels included
probe src/model layout.h ok
probe src/model result.h ok
probe src/model checkpoint.h refused
probe src/model ir.h refused
probe src/io layout.h ok
probe src/io ir.h refused
probe src/io cli.h refused
# ... and inside src/io, subject by subject (src/io/meson.build): common < tokenizer,
# tensorboard, checkpoint < formats < data
probe src/io/common layout.h ok
probe src/io/common tokenizer.h refused
probe src/io/common checkpoint.h refused
probe src/io/tokenizer fsutil.h ok
probe src/io/tokenizer gguf.h refused
probe src/io/tokenizer checkpoint.h refused
probe src/io/tokenizer prepare.h refused
probe src/io/tensorboard fsutil.h ok
probe src/io/tensorboard tokenizer.h refused
probe src/io/checkpoint safetensors.h ok
probe src/io/checkpoint hf.h refused
probe src/io/checkpoint tokenizer.h refused
probe src/io/formats tokenizer.h ok
probe src/io/formats checkpoint.h ok
probe src/io/formats shard.h refused
probe src/io/formats chat.h refused
probe src/io/data gguf.h ok
probe src/io/data tokenizer.h ok
probe src/io/data checkpoint.h ok
probe src/io/data tb_events.h refused
probe src/schedule layout.h ok
probe src/schedule checkpoint.h refused
probe src/schedule train.h refused
probe src/faults control.h ok
probe src/faults layout.h refused
probe src/cli sim.h ok
probe src/cli hf.h ok
probe src/cli train.h refused
probe src/cli stall.h refused
probe src/runtime train.h ok
probe src/runtime cli.h ok
probe src/runtime rt_impl.h ok    # its own
probe src/cli model_impl.h refused
probe src/io rt_impl.h refused
probe src/runtime commands.h refused
[ $fails -eq 0 ] && echo "every layer sees only what is below it" && exit 0
exit 1
