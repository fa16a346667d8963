/* Pure pieces of ring/: the wire format (round trips, and every corruption refused without
 * reading out of bounds), the link pacing arithmetic (in virtual time), address parsing, and
 * rank discovery from launcher variables (torchrun, Slurm, Open MPI; missing or malformed
 * variables named), the OOM verdict on fake counts, and the launcher's notice of a lost rank. */
#include <math.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bootstrap.h"
#include "flags_check.h"
#include "launch.h"
#include "link_model.h"
#include "notice.h"
#include "oom.h"
#include "peer_hosts.h"
#include "sha256.h"
#include "ring_harness.h"
#include "sock.h"
#include "wire.h"

static void test_handshake(void) {
    wire_hs h = {.version = WIRE_VERSION, .kind = HS_DATA, .rank = 3, .world = 8, .stream = 2, .nstreams = 4,
                 .frame_bytes = 1 << 20, .flags_hash = 0xdeadbeef01234567u};
    snprintf(h.job, sizeof h.job, "job-17");
    snprintf(h.secret, sizeof h.secret, "0123456789abcdef");
    snprintf(h.addr, sizeof h.addr, "[::1]:4000");
    uint8_t buf[WIRE_HS_BYTES], bad[WIRE_HS_BYTES];
    wire_hs_encode(&h, buf);
    wire_hs back;
    char why[200];
    CHECK(wire_hs_decode(buf, &back, why, sizeof why) == 0, "round trip: %s", why);
    CHECK(memcmp(&h, &back, sizeof h) == 0, "handshake fields differ after a round trip");
    /* every single-bit flip is refused */
    for (size_t i = 0; i < sizeof buf; i++)
        for (int b = 0; b < 8; b++) {
            memcpy(bad, buf, sizeof buf);
            bad[i] ^= (uint8_t)(1u << b);
            CHECK(wire_hs_decode(bad, &back, why, sizeof why) != 0, "flipped bit %d of byte %zu accepted", b, i);
        }
    /* random buffers are refused (and never crash) */
    for (uint64_t s = 0; s < 2000; s++) {
        rh_fill(bad, sizeof bad, s);
        if (s % 2) memcpy(bad, buf, 8); /* a right magic does not help */
        CHECK(wire_hs_decode(bad, &back, why, sizeof why) != 0, "random handshake %llu accepted", (unsigned long long)s);
    }
    CHECK(wire_secret_equal("abc", "abc") && !wire_secret_equal("abc", "abd") && !wire_secret_equal("abc", "abcd") &&
              !wire_secret_equal("", "a"),
          "secret comparison");
    printf("ok: handshake (%d bytes): round trip, %zu bit flips and 2000 random buffers refused\n", WIRE_HS_BYTES,
           sizeof buf * 8);
}

static void test_frames(void) {
    uint8_t payload[1000], hdr[WIRE_FRAME_BYTES];
    rh_fill(payload, sizeof payload, 1);
    wire_frame f = {.type = F_DATA, .channel = 3, .length = sizeof payload, .seq = 1ull << 40, .a = 12345, .b = 999999};
    wire_frame_seal(&f, payload);
    wire_frame_encode(&f, hdr);
    wire_frame back;
    uint32_t crc;
    char why[200];
    CHECK(wire_frame_decode(hdr, &back, &crc, why, sizeof why) == 0, "%s", why);
    CHECK(back.type == f.type && back.channel == f.channel && back.length == f.length && back.seq == f.seq &&
              back.a == f.a && back.b == f.b && back.crc == f.crc,
          "frame header fields differ after a round trip");
    CHECK(wire_crc(crc, payload, sizeof payload) == back.crc, "checksum of an intact frame");
    /* a flipped bit in the header or the payload changes the checksum (or the magic) */
    for (size_t i = 0; i < WIRE_FRAME_BYTES + sizeof payload; i++) {
        uint8_t h2[WIRE_FRAME_BYTES], p2[sizeof payload];
        memcpy(h2, hdr, sizeof hdr);
        memcpy(p2, payload, sizeof payload);
        if (i < WIRE_FRAME_BYTES) h2[i] ^= 0x10;
        else p2[i - WIRE_FRAME_BYTES] ^= 0x10;
        if (wire_frame_decode(h2, &back, &crc, why, sizeof why) != 0) continue;
        CHECK(wire_crc(crc, p2, back.length <= sizeof p2 ? back.length : sizeof p2) != back.crc,
              "a flipped bit at byte %zu went unnoticed", i);
    }
    printf("ok: frames (%d-byte header): round trip, every flipped bit detected\n", WIRE_FRAME_BYTES);
}

static void test_pace(void) {
    wp_link l;
    wp_link_init(&l, 1e6, 0.01); /* 1 MB/s, 10 ms */
    CHECK(wp_link_paced(&l), "paced");
    /* back-to-back frames leave one after the other, each arrives latency later */
    double t1 = wp_link_reserve(&l, 100.0, 500000), t2 = wp_link_reserve(&l, 100.0, 500000);
    CHECK_NEAR(t1, 100.51, 1e-9, "first arrival");
    CHECK_NEAR(t2, 101.01, 1e-9, "second arrival");
    /* the link is booked one frame ahead: ready again when the last frame starts leaving */
    CHECK_NEAR(wp_link_ready_at(&l, 500000), 100.5, 1e-9, "ready at");
    /* an idle link does not bank credit: a frame offered later starts then */
    double t3 = wp_link_reserve(&l, 200.0, 1000);
    CHECK_NEAR(t3, 200.0 + 0.001 + 0.01, 1e-9, "after idle");
    /* X bytes in frames: X / bandwidth + latency */
    wp_link_init(&l, 125e6, 0.02); /* 1 Gbit/s */
    double last = 0;
    size_t X = 64u << 20, F = 1u << 20;
    for (size_t off = 0; off < X; off += F) last = wp_link_reserve(&l, 0.0, F);
    CHECK_NEAR(last, (double)X / 125e6 + 0.02, 1e-9, "64 MiB at 1 Gbit/s");
    wp_link_init(&l, 0, 0);
    CHECK(!wp_link_paced(&l) && wp_link_reserve(&l, 5.0, 1 << 30) == 5.0, "unpaced link");
    wp_net_opts n;
    tp_net_defaults(&n);
    n.ranks_per_node = 2;
    n.link_bandwidth = 1;
    n.node_link_bandwidth = 2;
    double bw, lat;
    tp_net_link(&n, 0, 1, &bw, &lat);
    CHECK(bw == 2, "inside a node");
    tp_net_link(&n, 1, 2, &bw, &lat);
    CHECK(bw == 1, "between nodes");
    /* NICs: only between nodes, only with more ranks than a node holds, only with a bandwidth */
    CHECK(tp_net_nic(&n, 4, 1, 2) && tp_net_nic(&n, 4, 3, 0) && !tp_net_nic(&n, 4, 0, 1) && !tp_net_nic(&n, 2, 0, 1),
          "which hops cross NICs");
    n.ranks_per_node = 0;
    CHECK(!tp_net_nic(&n, 4, 1, 2), "no NIC without ranks per node");
    /* two pairs leaving one node (A: 0 -> 2, B: 1 -> 3) share its egress NIC of 1 MB/s: frames
     * of 0.1 MB offered alternately at time 0 leave one after the other, so 5 frames each (1 MB
     * in all) take 1 s, not 0.5 s; a pair's frame waits for the NIC and for the destination's
     * ingress alike; each still arrives its own latency after its last byte */
    wp_link nic[3], A, B;
    for (int i = 0; i < 3; i++) wp_link_init(&nic[i], 1e6, 0);
    wp_link_init(&A, 0, 0.01);
    wp_link_init(&B, 0, 0.02);
    A.nic[0] = B.nic[0] = &nic[0], A.nic[1] = &nic[1], B.nic[1] = &nic[2];
    CHECK(wp_link_paced(&A) && wp_link_ready_at(&A, 100000) <= 0, "NIC-paced link");
    double a = 0, b = 0;
    for (int k = 0; k < 5; k++) a = wp_link_reserve(&A, 0, 100000), b = wp_link_reserve(&B, 0, 100000);
    CHECK_NEAR(a, 0.9 + 0.01, 1e-9, "A's last frame through the shared NIC");
    CHECK_NEAR(b, 1.0 + 0.02, 1e-9, "B's last frame through the shared NIC");
    CHECK_NEAR(wp_link_ready_at(&A, 100000), 0.9, 1e-9, "ready once the NIC's last frame starts");
    /* an ingress NIC busy until 3 s holds back a frame whose egress is free */
    nic[1].free_at = 3;
    CHECK_NEAR(wp_link_reserve(&A, 2, 100000), 3.1 + 0.01, 1e-9, "waits for the ingress NIC");
    printf("ok: pacing arithmetic\n");
}

static void test_addresses(void) {
    char host[64], why[128];
    int port;
    CHECK(sock_split_addr("127.0.0.1:29500", host, sizeof host, &port, why, sizeof why) == 0 &&
              strcmp(host, "127.0.0.1") == 0 && port == 29500, "ipv4");
    CHECK(sock_split_addr("[fe80::1]:80", host, sizeof host, &port, why, sizeof why) == 0 && strcmp(host, "fe80::1") == 0 &&
              port == 80, "ipv6");
    CHECK(sock_split_addr("node7:1", host, sizeof host, &port, why, sizeof why) == 0 && strcmp(host, "node7") == 0, "name");
    /* the interface that routes to an address: loopback for loopback (the routing table's
     * answer, read back from a connected UDP socket); a name that does not resolve fails */
    char route[64];
    CHECK(sock_route_addr("127.0.0.1", 29500, route, sizeof route, why, sizeof why) == 0 && strcmp(route, "127.0.0.1") == 0,
          "route to 127.0.0.1: %s %s", route, why);
    CHECK(sock_route_addr("127.0.0.9", 1, route, sizeof route, why, sizeof why) == 0 && strcmp(route, "127.0.0.1") == 0,
          "route to 127.0.0.9: %s %s", route, why);
    CHECK(sock_route_addr("no-such-host.invalid", 1, route, sizeof route, why, sizeof why) != 0 && strstr(why, "resolve"),
          "an unresolvable name: %s", why);
    const char *bad[] = {"nohost", ":80", "h:", "h:70000", "h:-1", "h:8x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        CHECK(sock_split_addr(bad[i], host, sizeof host, &port, why, sizeof why) != 0, "'%s' accepted", bad[i]);
    struct {
        const char *list, *first;
    } slurm[] = {{"node1", "node1"}, {"gpu[03-05,9],cpu1", "gpu03"}, {"a-b[7]", "a-b7"}, {"x1,x2", "x1"}, {"n[12,3]", "n12"}};
    for (size_t i = 0; i < sizeof slurm / sizeof slurm[0]; i++)
        CHECK(boot_slurm_first_host(slurm[i].list, host, sizeof host) == 0 && strcmp(host, slurm[i].first) == 0,
              "nodelist %s -> %s", slurm[i].list, host);
    CHECK(boot_slurm_first_host("[1-2]", host, sizeof host) != 0 && boot_slurm_first_host("n[x]", host, sizeof host) != 0,
          "bad node lists accepted");
    printf("ok: addresses and Slurm node lists\n");
}

/* A fake environment: "NAME=value" strings. */
static const char *fake_get(const char *name, void *ctx) {
    for (const char **v = ctx; *v; v++) {
        size_t n = strlen(name);
        if (strncmp(*v, name, n) == 0 && (*v)[n] == '=') return *v + n + 1;
    }
    return NULL;
}

static int boot(const char **env, wp_boot_info *bi, char *err) { return boot_from_env(bi, fake_get, env, err, 256); }

static void test_boot(void) {
    wp_boot_info bi;
    char err[256];
    const char *none[] = {"HOME=/root", NULL};
    CHECK(boot(none, &bi, err) == 1, "no launcher variables should mean 'not launched'");
    const char *torch[] = {"RANK=3", "WORLD_SIZE=8", "LOCAL_RANK=1", "MASTER_ADDR=10.0.0.1", "MASTER_PORT=29500",
                           "WEIPIPE_SECRET=s3cret", "WEIPIPE_JOB_ID=j1", NULL};
    CHECK(boot(torch, &bi, err) == 0 && bi.rank == 3 && bi.world == 8 && bi.local_rank == 1 &&
              strcmp(bi.master_addr, "10.0.0.1") == 0 && bi.master_port == 29500 && strcmp(bi.job_id, "j1") == 0 &&
              strcmp(bi.launcher, "torchrun") == 0,
          "torchrun: %s", err);
    const char *slurm[] = {"SLURM_PROCID=5", "SLURM_NTASKS=16", "SLURM_LOCALID=1", "SLURM_JOB_ID=123456", "SLURM_STEP_ID=2",
                           "SLURM_JOB_NODELIST=gpu[07-08]", "WEIPIPE_SECRET=x", NULL};
    CHECK(boot(slurm, &bi, err) == 0 && bi.rank == 5 && bi.world == 16 && strcmp(bi.master_addr, "gpu07") == 0 &&
              bi.master_port == 20000 + (123456 % 20000 * 131 + 2) % 20000 && strcmp(bi.job_id, "123456.2") == 0,
          "slurm: %s (%s:%d)", err, bi.master_addr, bi.master_port);
    /* two steps of one job at once (srun ... & twice), the second on other nodes of the
     * allocation: its own first node (SLURM_STEP_NODELIST) and its own port */
    const char *step3[] = {"SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_JOB_ID=123456", "SLURM_STEP_ID=3",
                           "SLURM_JOB_NODELIST=gpu[07-10]", "SLURM_STEP_NODELIST=gpu[09-10]", NULL};
    wp_boot_info b3;
    CHECK(boot(step3, &b3, err) == 0 && strcmp(b3.master_addr, "gpu09") == 0 && b3.master_port != bi.master_port &&
              b3.master_port >= 20000 && b3.master_port < 40000,
          "slurm step 3: %s (%s:%d against step 2's %d)", err, b3.master_addr, b3.master_port, bi.master_port);
    /* the rendezvous port: torchrun's agent store holds MASTER_PORT (static rendezvous) -> +1;
     * "False" (c10d) or another launcher -> MASTER_PORT; WEIPIPE_PORT over everything */
    const char *agent[] = {"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=29500", "TORCHELASTIC_RUN_ID=r",
                           "TORCHELASTIC_USE_AGENT_STORE=True", NULL};
    CHECK(boot(agent, &bi, err) == 0 && bi.master_port == 29501 && strstr(bi.port_from, "MASTER_PORT+1"),
          "agent store: port %d (%s) %s", bi.master_port, bi.port_from, err);
    const char *c10d[] = {"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=29500", "TORCHELASTIC_RUN_ID=r",
                          "TORCHELASTIC_USE_AGENT_STORE=False", NULL};
    CHECK(boot(c10d, &bi, err) == 0 && bi.master_port == 29500, "no agent store: port %d %s", bi.master_port, err);
    const char *over[] = {"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=29500", "TORCHELASTIC_RUN_ID=r",
                          "TORCHELASTIC_USE_AGENT_STORE=True", "WEIPIPE_PORT=31000", NULL};
    CHECK(boot(over, &bi, err) == 0 && bi.master_port == 31000 && strcmp(bi.port_from, "WEIPIPE_PORT") == 0,
          "WEIPIPE_PORT: port %d %s", bi.master_port, err);
    const char *slurm_over[] = {"SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_JOB_ID=77", "SLURM_STEP_ID=0",
                                "SLURM_JOB_NODELIST=n1", "WEIPIPE_PORT=31001", NULL};
    CHECK(boot(slurm_over, &bi, err) == 0 && bi.master_port == 31001, "slurm WEIPIPE_PORT: port %d %s", bi.master_port, err);
    const char *top[] = {"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=65535", "TORCHELASTIC_RUN_ID=r",
                         "TORCHELASTIC_USE_AGENT_STORE=True", NULL};
    CHECK(boot(top, &bi, err) == 2 && strstr(err, "WEIPIPE_PORT"), "MASTER_PORT 65535 + 1: %s", err);
    const char *badp[] = {"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=1", "TORCHELASTIC_RUN_ID=r",
                          "WEIPIPE_PORT=0", NULL};
    CHECK(boot(badp, &bi, err) == 2 && strstr(err, "WEIPIPE_PORT"), "WEIPIPE_PORT=0: %s", err);
    /* an sbatch batch script: SLURM_PROCID=0 without a step id is no launched rank; SLURM_STEPID
     * (the older name) alone marks a step too */
    const char *batch[] = {"SLURM_PROCID=0", "SLURM_NTASKS=16", "SLURM_LOCALID=0", "SLURM_JOB_ID=123456",
                           "SLURM_JOB_NODELIST=gpu[07-08]", "SLURM_NODEID=0", NULL};
    int bw;
    const char *bl;
    CHECK(boot(batch, &bi, err) == 1 && boot_world_from_env(&bw, &bl, fake_get, batch, err, 256) == 1,
          "a batch script's environment taken for a job step");
    const char *oldstep[] = {"SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_JOB_ID=9", "SLURM_STEPID=4",
                             "SLURM_JOB_NODELIST=n1", NULL};
    CHECK(boot(oldstep, &bi, err) == 0 && bi.rank == 1, "SLURM_STEPID alone: %s", err);
    const char *ompi[] = {"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=4", "MASTER_ADDR=h", "MASTER_PORT=1",
                          "WEIPIPE_SECRET=x", "WEIPIPE_JOB_ID=m", NULL};
    CHECK(boot(ompi, &bi, err) == 0 && bi.rank == 1 && bi.world == 4 && strcmp(bi.launcher, "openmpi") == 0, "ompi: %s", err);
    /* without WEIPIPE_SECRET: not authenticated, and the job id is the launcher's */
    struct {
        const char *env[10];
        const char *job, *from;
    } ids[] = {
        {{"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=1", "TORCHELASTIC_RUN_ID=tr7"}, "tr7", "TORCHELASTIC_RUN_ID"},
        {{"RANK=1", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=1", "TORCHELASTIC_RUN_ID=tr7", "WEIPIPE_JOB_ID=w"}, "w",
         "WEIPIPE_JOB_ID"},
        {{"SLURM_PROCID=1", "SLURM_NTASKS=2", "SLURM_JOB_ID=77", "SLURM_STEP_ID=3", "SLURM_JOB_NODELIST=n1"}, "77.3",
         "SLURM_JOB_ID.SLURM_STEP_ID"},
        {{"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=1", "PMIX_NAMESPACE=865075201",
          "OMPI_MCA_ess_base_jobid=9"}, "865075201", "PMIX_NAMESPACE"},
        {{"OMPI_COMM_WORLD_RANK=1", "OMPI_COMM_WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=1", "OMPI_MCA_ess_base_jobid=9"},
         "9", "OMPI_MCA_ess_base_jobid"},
    };
    for (size_t i = 0; i < sizeof ids / sizeof ids[0]; i++)
        CHECK(boot(ids[i].env, &bi, err) == 0 && bi.secret[0] == 0 && strcmp(bi.job_id, ids[i].job) == 0 &&
                  strcmp(bi.job_id_from, ids[i].from) == 0,
              "job id case %zu: '%s' from %s (%s), expected '%s' from %s", i, bi.job_id, bi.job_id_from, err,
              ids[i].job, ids[i].from);
    /* each missing or malformed variable is named */
    struct {
        const char *env[8];
        const char *names;
    } bad[] = {
        {{"RANK=0", "MASTER_ADDR=h", "MASTER_PORT=1", "WEIPIPE_SECRET=x", "WEIPIPE_JOB_ID=j"}, "WORLD_SIZE"},
        {{"RANK=0", "WORLD_SIZE=2", "MASTER_PORT=1", "WEIPIPE_SECRET=x", "WEIPIPE_JOB_ID=j"}, "MASTER_ADDR"},
        {{"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=h", "WEIPIPE_SECRET=x", "WEIPIPE_JOB_ID=j"}, "MASTER_PORT"},
        {{"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=99999", "WEIPIPE_SECRET=x", "WEIPIPE_JOB_ID=j"}, "MASTER_PORT"},
        {{"RANK=2", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=1", "WEIPIPE_SECRET=x", "WEIPIPE_JOB_ID=j"}, "world size"},
        {{"RANK=x", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=1", "WEIPIPE_SECRET=x", "WEIPIPE_JOB_ID=j"}, "RANK"},
        {{"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=1", "WEIPIPE_JOB_ID=j",
          "WEIPIPE_SECRET=0123456789012345678901234567890123456789012345678901234567890123"}, "WEIPIPE_SECRET"},
        {{"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=1", "WEIPIPE_SECRET=x"}, "WEIPIPE_JOB_ID"},
        {{"RANK=0", "WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=1"}, "TORCHELASTIC_RUN_ID"},
        {{"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=2", "MASTER_ADDR=h", "MASTER_PORT=1"}, "PMIX_NAMESPACE"},
        {{"SLURM_PROCID=0", "SLURM_STEP_ID=0", "SLURM_NTASKS=2", "SLURM_JOB_ID=5", "WEIPIPE_SECRET=x"}, "SLURM_JOB_NODELIST"},
        {{"SLURM_PROCID=0", "SLURM_STEP_ID=0", "SLURM_NTASKS=2", "SLURM_JOB_NODELIST=n1", "WEIPIPE_SECRET=x"}, "SLURM_JOB_ID"},
        {{"OMPI_COMM_WORLD_RANK=0", "MASTER_ADDR=h", "MASTER_PORT=1", "WEIPIPE_SECRET=x", "WEIPIPE_JOB_ID=j"}, "OMPI_COMM_WORLD_SIZE"},
    };
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        err[0] = 0;
        CHECK(boot(bad[i].env, &bi, err) == 2 && strstr(err, bad[i].names) && !strchr(err, '\n'),
              "case %zu: expected an error naming %s, got '%s'", i, bad[i].names, err);
    }
    /* the world size alone, before any rendezvous (no MASTER_* or job id needed yet) */
    int world = 0;
    const char *launcher = NULL;
    const char *w_torch[] = {"RANK=1", "WORLD_SIZE=6", NULL}, *w_slurm[] = {"SLURM_PROCID=1", "SLURM_NTASKS=5", "SLURM_STEP_ID=0", NULL},
               *w_ompi[] = {"OMPI_COMM_WORLD_RANK=0", "OMPI_COMM_WORLD_SIZE=3", "SLURM_PROCID=0", "SLURM_STEP_ID=0", NULL},
               *w_bad[] = {"RANK=0", "WORLD_SIZE=0", NULL};
    CHECK(boot_world_from_env(&world, &launcher, fake_get, w_torch, err, 256) == 0 && world == 6 &&
              strcmp(launcher, "torchrun") == 0, "world from WORLD_SIZE: %d %s", world, err);
    CHECK(boot_world_from_env(&world, &launcher, fake_get, w_slurm, err, 256) == 0 && world == 5 &&
              strcmp(launcher, "slurm") == 0, "world from SLURM_NTASKS: %d %s", world, err);
    CHECK(boot_world_from_env(&world, &launcher, fake_get, w_ompi, err, 256) == 0 && world == 3 &&
              strcmp(launcher, "openmpi") == 0, "mpirun's ranks inside a Slurm step: %d %s", world, err);
    CHECK(boot_world_from_env(&world, &launcher, fake_get, none, err, 256) == 1, "not launched");
    CHECK(boot_world_from_env(&world, &launcher, fake_get, w_bad, err, 256) == 2 && strstr(err, "WORLD_SIZE"), "%s", err);
    printf("ok: rank discovery (torchrun, Slurm, Open MPI), world sizes before the rendezvous, a batch script is no rank, and %zu named errors\n",
           sizeof bad / sizeof bad[0]);
}

static void test_threads(void) {
    struct {
        const char *env[8];
        int flag, in_process;
        long cores;
        int want;
        const char *from;
    } c[] = {
        {{"OMP_NUM_THREADS=4", "SLURM_CPUS_PER_TASK=6"}, 3, 1, 32, 3, "--threads"},
        {{"OMP_NUM_THREADS=4", "SLURM_CPUS_PER_TASK=6"}, 0, 1, 32, 4, "OMP_NUM_THREADS"},
        {{"OMP_NUM_THREADS=8,2"}, 0, 1, 32, 8, "OMP_NUM_THREADS"},
        {{"OMP_NUM_THREADS=0", "SLURM_CPUS_PER_TASK=6"}, 0, 1, 32, 6, "SLURM_CPUS_PER_TASK"},
        {{"OMP_NUM_THREADS=x", "SLURM_CPUS_PER_TASK=6"}, 0, 1, 32, 6, "SLURM_CPUS_PER_TASK"},
        /* torchrun: 16 ranks, 4 on this host: 32 / 4, never 32 / 16 */
        {{"RANK=5", "WORLD_SIZE=16", "LOCAL_WORLD_SIZE=4"}, 0, 1, 32, 8, "32 cores / 4 ranks on this host"},
        /* srun step of 12 tasks laid out 4,4,2,2: node 2 has 2 of them, node 1 has 4 */
        {{"SLURM_PROCID=9", "SLURM_STEP_ID=0", "SLURM_NTASKS=12", "SLURM_STEP_TASKS_PER_NODE=4(x2),2,2", "SLURM_NODEID=2"},
         0, 1, 32, 16, "32 cores / 2 ranks on this host"},
        {{"SLURM_PROCID=5", "SLURM_STEP_ID=0", "SLURM_NTASKS=12", "SLURM_STEP_TASKS_PER_NODE=4(x2),2,2", "SLURM_NODEID=1"},
         0, 1, 32, 8, "32 cores / 4 ranks on this host"},
        {{"SLURM_PROCID=5", "SLURM_STEP_ID=0", "SLURM_NTASKS=64", "SLURM_NTASKS_PER_NODE=8"}, 0, 1, 32, 4,
         "32 cores / 8 ranks on this host"},
        {{"OMPI_COMM_WORLD_RANK=3", "OMPI_COMM_WORLD_SIZE=8", "OMPI_COMM_WORLD_LOCAL_SIZE=2"}, 0, 1, 16, 8,
         "16 cores / 2 ranks on this host"},
        /* weipipe's launcher: LOCAL_WORLD_SIZE is the ranks it started here */
        {{"RANK=1", "WORLD_SIZE=3", "LOCAL_WORLD_SIZE=3"}, 0, 1, 12, 4, "12 cores / 3 ranks on this host"},
        /* not launched: the threads of this process (--transport local), or one rank */
        {{NULL}, 0, 4, 16, 4, "16 cores / 4 ranks on this host"},
        {{NULL}, 0, 1, 16, 16, "16 cores / 1 rank on this host"},
        {{"SLURM_PROCID=0", "SLURM_NTASKS=4"}, 0, 1, 16, 16, "16 cores / 1 rank on this host"}, /* batch script */
        {{"RANK=0", "WORLD_SIZE=8"}, 0, 1, 16, 1, "the launcher does not say"},
        {{NULL}, 0, 4, 2, 1, "2 cores / 4 ranks on this host"},
    };
    for (size_t i = 0; i < sizeof c / sizeof c[0]; i++) {
        char from[128] = "";
        int got = boot_threads_per_rank(c[i].flag, c[i].in_process, c[i].cores, fake_get, c[i].env, from, sizeof from);
        CHECK(got == c[i].want && strncmp(from, c[i].from, strlen(c[i].from)) == 0,
              "threads case %zu: %d (%s), expected %d (%s)", i, got, from, c[i].want, c[i].from);
    }
    printf("ok: threads per rank: %zu cases (flag, OMP_NUM_THREADS, SLURM_CPUS_PER_TASK, cores / ranks on this host)\n",
           sizeof c / sizeof c[0]);
}

static void hex(const uint8_t *b, int n, char *out) {
    for (int i = 0; i < n; i++) snprintf(out + 2 * i, 3, "%02x", b[i]);
}

/* SHA-256 and HMAC-SHA-256 against FIPS 180-4's and RFC 4231's vectors (checked again with
 * Python's hashlib and hmac), and the rendezvous' flags hashes against Python's
 *   hmac.new(b"job-17\0s3cret", b"weipipe job flags\0" + b"lr=0.001\nsteps=100\n", sha256)
 *   hmac.new(b"job-17\0s3cret", b"weipipe job flag\0" + b"lr=0.001", sha256) (and "steps=100")
 * (the first 8 bytes, big-endian). Then which flags fc_differ names, and fc_values. */
static void test_flags_check(void) {
    static const struct { const char *msg; long repeat; const char *want; } sha[] = {
        {"abc", 1, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad"},
        {"", 1, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
        {"abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq", 1,
         "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1"},
        {"a", 1000000, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0"},
    };
    uint8_t d[SHA256_BYTES];
    char got[2 * SHA256_BYTES + 1];
    for (size_t i = 0; i < sizeof sha / sizeof *sha; i++) {
        sha256_ctx c;
        sha256_init(&c);
        for (long r = 0; r < sha[i].repeat; r++) sha256_update(&c, sha[i].msg, strlen(sha[i].msg));
        sha256_final(&c, d);
        hex(d, SHA256_BYTES, got);
        CHECK(strcmp(got, sha[i].want) == 0, "sha256 of '%s' x %ld: %s, want %s", sha[i].msg, sha[i].repeat, got, sha[i].want);
    }
    uint8_t key1[20], key6[131];
    memset(key1, 0x0b, sizeof key1);
    memset(key6, 0xaa, sizeof key6);
    static const char *data6 = "Test Using Larger Than Block-Size Key - Hash Key First";
    const struct { const void *key; size_t keylen; const char *msg, *want; } mac[] = {
        {key1, sizeof key1, "Hi There", "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
        {"Jefe", 4, "what do ya want for nothing?", "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
        {key6, sizeof key6, NULL, "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
    };
    for (size_t i = 0; i < sizeof mac / sizeof *mac; i++) {
        const char *m = mac[i].msg ? mac[i].msg : data6;
        const void *parts[2] = {m, m + 3}; /* split in two: the parts are concatenated */
        size_t lens[2] = {3, strlen(m) - 3};
        hmac_sha256(mac[i].key, mac[i].keylen, parts, lens, 2, d);
        hex(d, SHA256_BYTES, got);
        CHECK(strcmp(got, mac[i].want) == 0, "hmac-sha256 case %zu: %s, want %s", i, got, mac[i].want);
    }
    const char *flags = "lr=0.001\nsteps=100\n";
    CHECK(fc_hash(flags, "job-17", "s3cret") == 0xd5e27e14f3781c7aull, "fc_hash: %016llx",
          (unsigned long long)fc_hash(flags, "job-17", "s3cret"));
    CHECK(fc_hash(NULL, "job-17", "s3cret") == 0, "no flags must hash to 0 (not compared)");
    CHECK(fc_hash(flags, "job-18", "s3cret") != fc_hash(flags, "job-17", "s3cret") &&
              fc_hash(flags, "job-17", "") != fc_hash(flags, "job-17", "s3cret"),
          "the flags hash must depend on the job id and the secret");
    char *list = fc_list(flags, "job-17", "s3cret");
    CHECK(list && strcmp(list, "lr=f2354c2f11eeb96e\nsteps=2c731cd018ecdf6f\n") == 0, "fc_list: %s", list ? list : "(null)");
    CHECK(!strstr(list, "0.001") && !strstr(list, "100"), "the per-flag list holds a value: %s", list);
    char names[200], values[200];
    fc_differ(flags, "job-17", "s3cret", list, names, sizeof names);
    CHECK(names[0] == 0, "equal flags differ: '%s'", names);
    char *other = fc_list("lr=0.002\nsteps=100\nseed=3\n", "job-17", "s3cret");
    fc_differ(flags, "job-17", "s3cret", other, names, sizeof names);
    CHECK(strcmp(names, "--lr, --seed") == 0, "fc_differ named '%s', want '--lr, --seed'", names);
    fc_values(flags, names, values, sizeof values);
    CHECK(strcmp(values, "--lr '0.001', --seed (none)") == 0, "fc_values: '%s'", values);
    free(list);
    free(other);
    printf("ok: sha256 (4 FIPS vectors), hmac-sha256 (3 RFC 4231 cases), flags hashes as Python's hmac, flags named not valued\n");
}

static int collect_host(const char *host, void *ctx) {
    char *out = ctx;
    size_t used = strlen(out);
    snprintf(out + used, 1024 - used, "%s%s", used ? " " : "", host);
    return 0;
}

/* Slurm's host lists expanded as scontrol show hostnames does (by hand: each range keeps the
 * width of its lower bound), malformed ones refused; addresses matched as sock_peer_addr
 * writes them. */
static void test_peer_hosts(void) {
    static const char *cases[][2] = {
        {"gpu[03-05,9],cpu1", "gpu03 gpu04 gpu05 gpu9 cpu1"},
        {"rack[1-2]-n[01-02]", "rack1-n01 rack1-n02 rack2-n01 rack2-n02"},
        {"host1", "host1"},
        {"a,b[7],c", "a b7 c"},
        {"n[098-101]", "n098 n099 n100 n101"},
        {"gpu[03-", NULL}, {"gpu[5-3]", NULL}, {"gpu[]", NULL}, {"", NULL}, {"a,,b", NULL}, {"n[1-x]", NULL},
        {"n[0-99999999]", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char out[1024] = "";
        int rc = ph_expand(cases[i][0], collect_host, out);
        if (cases[i][1])
            CHECK(rc == 0 && strcmp(out, cases[i][1]) == 0, "'%s' expanded to '%s' (rc %d), want '%s'", cases[i][0], out,
                  rc, cases[i][1]);
        else
            CHECK(rc != 0, "'%s' was accepted as a host list ('%s')", cases[i][0], out);
    }
    ph_set set;
    char err[256];
    CHECK(ph_resolve("127.0.0.1,::1", "WEIPIPE_PEERS", &set, err, sizeof err) == 0, "%s", err);
    CHECK(ph_allowed(&set, "127.0.0.1:4000") && ph_allowed(&set, "[::1]:4000") && ph_allowed(&set, "[::ffff:127.0.0.1]:9") &&
              !ph_allowed(&set, "127.0.0.2:4000") && !ph_allowed(&set, "[::2]:1") && !ph_allowed(&set, "?"),
          "ph_allowed");
    ph_free(&set);
    CHECK(ph_resolve("no-such-host.invalid", "WEIPIPE_PEERS", &set, err, sizeof err) == 2 &&
              strstr(err, "'no-such-host.invalid' does not resolve"), "an unknown host: %s", err);
    /* Near 65536 hosts, some listed twice: the set is made sorted and distinct once (a search per
     * address took 15 s: issue 42), so the structure is what is checked, not a time. On the old
     * code the set kept the list's order ("10.1.0.10" after "10.1.0.9"). */
    CHECK(ph_resolve("10.1.[0-255].[0-254],10.1.0.[0-9],127.0.0.1", "WEIPIPE_PEERS", &set, err, sizeof err) == 0, "%s", err);
    bool sorted = true;
    for (size_t i = 1; i < set.n; i++) sorted = sorted && strcmp(set.addr[i - 1], set.addr[i]) < 0;
    CHECK(set.n == 256 * 255 + 1 && sorted, "65291 listed hosts: %zu addresses, %s", set.n,
          sorted ? "sorted" : "not a sorted set");
    CHECK(ph_allowed(&set, "10.1.200.7:1") && ph_allowed(&set, "10.1.0.9:1") && ph_allowed(&set, "127.0.0.1:2") &&
              !ph_allowed(&set, "10.1.3.255:1") && !ph_allowed(&set, "10.1.256.0:1"),
          "ph_allowed in the large set");
    ph_free(&set);
    printf("ok: host lists: 5 expanded as Slurm does, 7 malformed refused; addresses matched (v4, v6, v4-mapped); "
           "65291 listed, 65281 distinct, a sorted set\n");
}

/* oom_verdict: each verdict from the counts, and its evidence in words. */
static void test_oom_verdict(void) {
    char ev[160];
    const wp_oom_counts none = {-1, -1};
    CHECK(oom_verdict(none, none, ev, sizeof ev) == WP_OOM_UNKNOWN && !ev[0], "no counts: unknown, no words (%s)", ev);
    CHECK(oom_verdict((wp_oom_counts){0, 5}, (wp_oom_counts){1, 6}, ev, sizeof ev) == WP_OOM_YES &&
              strstr(ev, "this cgroup's oom_kill count went from 0 to 1"), "cgroup rose: %s", ev);
    CHECK(oom_verdict((wp_oom_counts){-1, 5}, (wp_oom_counts){-1, 5}, ev, sizeof ev) == WP_OOM_NO &&
              strstr(ev, "stayed at 5"), "host count still: not the OOM killer: %s", ev);
    CHECK(oom_verdict((wp_oom_counts){2, 5}, (wp_oom_counts){2, 5}, ev, sizeof ev) == WP_OOM_NO, "both still: %s", ev);
    /* the host's count rose but not this cgroup's: an OOM kill, maybe of another process */
    CHECK(oom_verdict((wp_oom_counts){2, 5}, (wp_oom_counts){2, 7}, ev, sizeof ev) == WP_OOM_LIKELY &&
              strstr(ev, "went from 5 to 7"), "host rose: %s", ev);
    CHECK(oom_verdict((wp_oom_counts){-1, -1}, (wp_oom_counts){-1, 3}, ev, sizeof ev) == WP_OOM_UNKNOWN,
          "no count before: unknown (%s)", ev);
}

/* The notice socket: nothing while nothing was written; a line split across writes is read once
 * complete; a malformed line is no notice; once told, the fd is no longer offered for polling;
 * not watching: never told. */
static void test_notice(void) {
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
    char out[200] = "poison";
    notice_adopt(sv[1]);
    CHECK(notice_fd() == sv[1] && !notice_lost(out, sizeof out), "told before anything was written");
    CHECK(write(sv[0], "banana\n", 7) == 7, "write");
    CHECK(!notice_lost(out, sizeof out), "a malformed line was taken as a notice: %s", out);
    CHECK(write(sv[0], "3 killed by sig", 15) == 15, "write");
    CHECK(!notice_lost(out, sizeof out), "half a line was taken as a notice: %s", out);
    CHECK(write(sv[0], "nal 9, Killed\n", 14) == 14, "write");
    notice_watch(false);
    CHECK(!notice_lost(out, sizeof out) && notice_fd() == -1, "told while not watching");
    notice_watch(true);
    CHECK(notice_lost(out, sizeof out) && !strcmp(out, "rank 3 ended (killed by signal 9, Killed), the launcher says"),
          "the notice reads '%s'", out);
    CHECK(notice_fd() == -1 && notice_lost(NULL, 0), "once told: no fd to poll, still told");
    notice_watch(false);
    close(sv[0]);
}

/* The launcher's job id carries 16 random hex digits (issue 42: "local-PID-TIME" alone could
 * be guessed): two ids made in the same second by the same process differ there. */
static void test_job_id(void) {
    char a[96], b[96], err[128], want[64];
    CHECK(launch_job_id(a, sizeof a, err, sizeof err) == 0 && launch_job_id(b, sizeof b, err, sizeof err) == 0, "%s", err);
    snprintf(want, sizeof want, "local-%d-", (int)getpid());
    const char *ra = strrchr(a, '-'), *rb = strrchr(b, '-');
    CHECK(strncmp(a, want, strlen(want)) == 0 && ra && rb && strlen(ra + 1) == 16 && strspn(ra + 1, "0123456789abcdef") == 16 &&
              strcmp(ra, rb) != 0 && strlen(a) < WIRE_NAME_MAX,
          "job ids '%s' and '%s': want %s<time>-<16 random hex digits>, different, under %d bytes", a, b, want, WIRE_NAME_MAX);
    printf("ok: launcher job ids carry a random part (%s, %s)\n", a, b);
}

int main(void) {
    test_job_id();
    test_oom_verdict();
    test_notice();
    test_peer_hosts();
    test_handshake();
    test_flags_check();
    test_frames();
    test_pace();
    test_addresses();
    test_boot();
    test_threads();
    return 0;
}
