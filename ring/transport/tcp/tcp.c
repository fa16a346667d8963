/* The tcp transport: creation, posting, connecting, failing and closing (see tcp.h). The
 * progress thread that moves the bytes is in tcp_progress.c. */
#include "tcp_impl.h"
#include "ring_warn.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

void tcp_wake(tcp_tp *T) {
    uint64_t one = 1;
    /* A full counter (EAGAIN) already means "wake up". */
    if (write(T->wake_fd, &one, sizeof one) < 0 && errno != EAGAIN) return;
}

void tcp_free_out(tcp_out *o) {
    free(o->own);
    free(o);
}

/* "rank 3 (10.0.0.2:4000)", with the ranks that share its host when there are others ("rank 3
 * (10.0.0.2:4000, host of ranks 2, 3)"): a host that dies takes them all, and the peer noticed
 * first should not hide the others. */
static void peer_name(wp_transport *t, int peer, char *buf, size_t buflen) {
    tcp_tp *T = tcp_of(t);
    if (!(peer >= 0 && peer < t->world && T->peers[peer].addr[0])) {
        snprintf(buf, buflen, "rank %d", peer);
        return;
    }
    char host[SOCK_ADDR_MAX], other[SOCK_ADDR_MAX], why[128], list[64] = "";
    int port, n = 0;
    size_t used = 0;
    if (sock_split_addr(T->peers[peer].addr, host, sizeof host, &port, why, sizeof why) == 0)
        for (int q = 0; q < t->world; q++)
            if (T->peers[q].addr[0] && sock_split_addr(T->peers[q].addr, other, sizeof other, &port, why, sizeof why) == 0 &&
                strcmp(host, other) == 0) {
                if (used + 16 < sizeof list)
                    used += (size_t)snprintf(list + used, sizeof list - used, "%s%d", n ? ", " : "", q);
                else if (used + 4 < sizeof list)
                    used += (size_t)snprintf(list + used, sizeof list - used, "...");
                n++;
            }
    if (n > 1)
        snprintf(buf, buflen, "rank %d (%s, host of ranks %s)", peer, T->peers[peer].addr, list);
    else
        snprintf(buf, buflen, "rank %d (%s)", peer, T->peers[peer].addr);
}

/* The first stream a control frame can go out on: connected and not cut mid-frame. */
static tcp_stream *ctl_stream(tcp_tp *T, tcp_peer *P) {
    for (int i = 0; i < T->net.tcp_streams; i++)
        if (P->streams[i].fd >= 0 && !P->streams[i].broken) return &P->streams[i];
    return NULL;
}

wp_result tcp_queue_ctl(tcp_tp *T, tcp_peer *P, int type, int channel, uint64_t seq, uint64_t a, const char *payload,
                        size_t len) {
    tcp_stream *st = ctl_stream(T, P);
    if (!st) return WP_FAILED;
    tcp_out *o = calloc(1, sizeof *o);
    if (!o || (len && !(o->own = malloc(len)))) {
        free(o);
        return WP_FAILED;
    }
    if (len) memcpy(o->own, payload, len);
    wire_frame f = {.type = (uint8_t)type, .channel = (uint8_t)channel, .length = (uint32_t)len, .seq = seq, .a = a};
    wire_frame_seal(&f, o->own);
    wire_frame_encode(&f, o->hdr);
    o->payload = o->own;
    o->len = len;
    if (st->ctl_tail) st->ctl_tail->next = o;
    else st->ctl_head = o;
    st->ctl_tail = o;
    tcp_wake(T);
    return WP_OK;
}

static wp_result send_cts(tcp_tp *T, tcp_peer *P, wp_request *r) {
    tcp_req_of(r)->cts = true;
    if (tcp_queue_ctl(T, P, F_CTS, r->channel, r->seq, r->bytes, r->label, strlen(r->label)) != 0) {
        tp_fail_locked(&T->base, -1, "rank %d: cannot queue a clear-to-send for %s", T->base.rank, r->label);
        return WP_FAILED;
    }
    return WP_OK;
}

void tcp_stream_up(tcp_tp *T, tcp_peer *P, int index, int fd) {
    P->streams[index].fd = fd;
    if (++P->nconnected < T->net.tcp_streams) return;
    P->connected = true;
    for (int c = 0; c < WP_MAX_CHANNELS; c++)
        for (wp_request *r = P->recvs[c].head; r; r = r->next)
            if (!tcp_req_of(r)->cts && send_cts(T, P, r) != 0) return;
    pthread_cond_broadcast(&T->sync.cv);
    tcp_wake(T);
}

/* The receiver posted message seq of `bytes`: the send may go once sizes agree. */
static void cts_matches(tcp_tp *T, wp_request *s, uint64_t bytes, const char *label) {
    if (s->bytes != bytes) {
        tp_fail_locked(&T->base, -1, "rank %d sends %s (%zu bytes) on channel %d but rank %d expects %s (%llu bytes)",
                       T->base.rank, s->label, s->bytes, s->channel, s->peer, label, (unsigned long long)bytes);
        return;
    }
    tcp_req_of(s)->cts = true;
    s->progress_at = wp_now();
    tcp_wake(T);
}

void tcp_got_cts(tcp_tp *T, tcp_peer *P, int channel, uint64_t seq, uint64_t bytes, const char *label) {
    for (wp_request *s = P->sends[channel].head; s; s = s->next)
        if (s->seq == seq) {
            cts_matches(T, s, bytes, label);
            return;
        }
    tcp_cts *c = calloc(1, sizeof *c);
    if (!c) {
        tp_fail_locked(&T->base, -1, "rank %d: out of memory for a clear-to-send", T->base.rank);
        return;
    }
    c->seq = seq;
    c->bytes = bytes;
    snprintf(c->label, sizeof c->label, "%s", label);
    if (P->cts_tail[channel]) P->cts_tail[channel]->next = c;
    else P->cts_head[channel] = c;
    P->cts_tail[channel] = c;
}

/* A send just posted: its clear-to-send may already be here (the receiver posted first). */
static void take_early_cts(tcp_tp *T, tcp_peer *P, wp_request *s) {
    tcp_cts *c = P->cts_head[s->channel];
    if (!c || c->seq != s->seq) return;
    P->cts_head[s->channel] = c->next;
    if (!c->next) P->cts_tail[s->channel] = NULL;
    cts_matches(T, s, c->bytes, c->label);
    free(c);
}

static wp_result tcp_post(wp_transport *t, wp_request *r, char *err, size_t errlen) {
    tcp_tp *T = tcp_of(t);
    if (r->peer == t->rank) {
        tp_post_self_locked(t, &T->self, r);
        return WP_OK;
    }
    tcp_peer *P = &T->peers[r->peer];
    if (P->closed || P->closing) {
        char name[128];
        peer_name(t, r->peer, name, sizeof name);
        snprintf(err, errlen, "%s closed the connection before rank %d posted %s", name, t->rank, r->label);
        tp_fail_locked(t, r->peer, "closed the connection");
        return WP_FAILED;
    }
    int c = r->channel;
    if (r->kind == TP_SEND) P->pending_sends++;
    else P->pending_recvs++;
    if (r->kind == TP_SEND) {
        r->seq = P->send_seq[c]++;
        tp_queue_push(&P->sends[c], r);
        take_early_cts(T, P, r);
    } else {
        r->seq = P->recv_seq[c]++;
        tp_queue_push(&P->recvs[c], r);
        if (P->connected) send_cts(T, P, r);
    }
    return WP_OK;
}

/* ---- connecting: the lower rank opens the streams, the higher rank's thread accepts ---- */

static wp_result handshake_out(tcp_tp *T, tcp_peer *P, int index, int fd, double deadline, char *why, size_t whylen) {
    wire_hs h = {.version = WIRE_VERSION, .kind = HS_DATA, .rank = (uint32_t)T->base.rank,
                 .world = (uint32_t)T->base.world, .stream = (uint16_t)index,
                 .nstreams = (uint16_t)T->net.tcp_streams, .frame_bytes = (uint32_t)T->net.frame_bytes};
    snprintf(h.job, sizeof h.job, "%s", T->job);
    snprintf(h.secret, sizeof h.secret, "%s", T->secret);
    uint8_t buf[WIRE_HS_BYTES];
    wire_hs_encode(&h, buf);
    if (sock_write_all(fd, buf, sizeof buf, deadline, why, whylen) != 0 ||
        sock_read_all(fd, buf, sizeof buf, deadline, why, whylen) != 0)
        return WP_FAILED;
    wire_hs reply;
    hs_expect e = {.kind = HS_DATA_ACK, .world = T->base.world, .job = T->job, .secret = T->secret};
    if (hs_check(buf, &e, &reply, why, whylen) != 0) return WP_FAILED;
    if ((int)reply.rank != P->rank) {
        snprintf(why, whylen, "answered as rank %u", reply.rank);
        return WP_FAILED;
    }
    return WP_OK;
}

static bool failed_now(tcp_tp *T) {
    pthread_mutex_lock(&T->sync.mu);
    bool failed = T->fail.failed;
    pthread_mutex_unlock(&T->sync.mu);
    return failed;
}

/* Connect in short attempts, so that a failure of the job (an abort) ends the retries. */
static int connect_stream(tcp_tp *T, const char *host, int port, double deadline, char *why, size_t whylen) {
    for (;;) {
        double now = wp_now(), step = now + 0.25 < deadline ? now + 0.25 : deadline;
        int fd = sock_connect(host, port, step, why, whylen);
        if (fd >= 0 || step >= deadline) return fd;
        if (failed_now(T)) {
            snprintf(why, whylen, "the transport failed meanwhile");
            return -1;
        }
    }
}

static wp_result open_streams(tcp_tp *T, tcp_peer *P, char *err, size_t errlen) {
    char host[SOCK_ADDR_MAX], why[256];
    int port, K = T->net.tcp_streams, fds[64];
    if (sock_split_addr(P->addr, host, sizeof host, &port, why, sizeof why) != 0) {
        snprintf(err, errlen, "rank %d: bad address of rank %d: %s", T->base.rank, P->rank, why);
        return WP_FAILED;
    }
    double deadline = wp_now() + T->net.connect_timeout;
    for (int i = 0; i < K; i++) {
        fds[i] = connect_stream(T, host, port, deadline, why, sizeof why);
        if (fds[i] < 0 || handshake_out(T, P, i, fds[i], deadline, why, sizeof why) != 0) {
            for (int j = 0; j <= i; j++)
                if (fds[j] >= 0) close(fds[j]);
            snprintf(err, errlen, "rank %d cannot connect to rank %d (%s): %s", T->base.rank, P->rank, P->addr, why);
            return WP_FAILED;
        }
    }
    pthread_mutex_lock(&T->sync.mu);
    T->base.stats.overhead_sent += (uint64_t)K * WIRE_HS_BYTES;
    T->base.stats.overhead_recv += (uint64_t)K * WIRE_HS_BYTES;
    for (int i = 0; i < K; i++) {
        if (T->fail.failed) close(fds[i]);
        else tcp_stream_up(T, P, i, fds[i]);
    }
    pthread_mutex_unlock(&T->sync.mu);
    return WP_OK;
}

/* Wait for the peer (a lower rank) to open its streams to us. */
static wp_result await_streams(tcp_tp *T, tcp_peer *P, char *err, size_t errlen) {
    double deadline = wp_now() + T->net.connect_timeout;
    wp_result rc = WP_OK;
    pthread_mutex_lock(&T->sync.mu);
    while (!P->connected && !T->fail.failed) {
        if (wp_now() >= deadline) {
            snprintf(err, errlen, "rank %d (%s) did not connect to rank %d within %g s", P->rank, P->addr,
                     T->base.rank, T->net.connect_timeout);
            tp_fail_locked(&T->base, P->rank, "did not connect within %g s", T->net.connect_timeout);
            rc = WP_FAILED;
            break;
        }
        wp_sync_wait_until(&T->sync, deadline);
    }
    if (rc == 0 && T->fail.failed) {
        snprintf(err, errlen, "rank %d: transport failed while connecting to rank %d: %s", T->base.rank, P->rank,
                 T->fail.what);
        rc = WP_FAILED;
    }
    pthread_mutex_unlock(&T->sync.mu);
    return rc;
}

static wp_result tcp_connect(wp_transport *t, int peer, bool wait, char *err, size_t errlen) {
    tcp_tp *T = tcp_of(t);
    tcp_peer *P = &T->peers[peer];
    pthread_mutex_lock(&T->sync.mu);
    bool peers_set = T->peers_set, opener = t->rank < peer;
    bool skip = P->connected || P->connecting || P->closed || T->fail.failed;
    if (!skip && opener) P->connecting = true;
    pthread_mutex_unlock(&T->sync.mu);
    if (!peers_set) {
        snprintf(err, errlen, "rank %d: the addresses of the other ranks are not known yet (no rendezvous)", t->rank);
        return WP_FAILED;
    }
    if (skip) return WP_OK;
    if (!opener) return wait ? await_streams(T, P, err, errlen) : WP_OK;
    wp_result rc = open_streams(T, P, err, errlen);
    pthread_mutex_lock(&T->sync.mu);
    P->connecting = false;
    if (rc != 0) tp_fail_locked(t, peer, "could not be reached");
    pthread_mutex_unlock(&T->sync.mu);
    return rc;
}

/* The transport failed (sync held): drop queued data frames (their buffers may be gone once
 * the waiters return) and tell every connected peer except the culprit. */
static void tcp_failed(wp_transport *t) {
    tcp_tp *T = tcp_of(t);
    char reason[sizeof T->fail.what + 160];
    if (T->fail.peer >= 0) {
        char name[128];
        peer_name(t, T->fail.peer, name, sizeof name);
        snprintf(reason, sizeof reason, "%s %s", name, T->fail.what);
    } else {
        snprintf(reason, sizeof reason, "%s", T->fail.what);
    }
    for (int p = 0; p < t->world; p++) {
        if (p == t->rank) continue;
        tcp_peer *P = &T->peers[p];
        for (int i = 0; i < T->net.tcp_streams; i++) {
            tcp_stream *st = &P->streams[i];
            while (st->data_head) {
                tcp_out *o = st->data_head;
                st->data_head = o->next;
                if (o != st->cur) tcp_free_out(o);
            }
            st->data_tail = NULL;
            if (st->cur && st->cur->req) {
                st->broken = true;
                tcp_free_out(st->cur);
                st->cur = NULL;
            }
        }
        size_t len = strlen(reason) < TCP_SMALL_PAYLOAD ? strlen(reason) : TCP_SMALL_PAYLOAD;
        if (p != T->fail.peer && P->connected) tcp_queue_ctl(T, P, F_ABORT, 0, 0, 0, reason, len);
    }
    T->flush_deadline = wp_now() + 1.0;
    tcp_wake(T);
}

static void free_peer(tcp_tp *T, tcp_peer *P) {
    for (int i = 0; P->streams && i < T->net.tcp_streams; i++) {
        tcp_stream *st = &P->streams[i];
        tcp_out *lists[2] = {st->ctl_head, st->data_head};
        for (int k = 0; k < 2; k++)
            while (lists[k]) {
                tcp_out *o = lists[k];
                lists[k] = o->next;
                if (o != st->cur) tcp_free_out(o);
            }
        if (st->cur) tcp_free_out(st->cur);
        if (st->fd >= 0) close(st->fd);
    }
    for (int c = 0; c < WP_MAX_CHANNELS; c++)
        while (P->cts_head[c]) {
            tcp_cts *x = P->cts_head[c];
            P->cts_head[c] = x->next;
            free(x);
        }
    free(P->streams);
}

/* Orderly end of a socket: our FIN after everything we wrote, then read what is left so the
 * kernel has no unread data that would turn our close into a reset. */
static void shut_stream(int fd) {
    char sink[4096];
    shutdown(fd, SHUT_WR);
    while (recv(fd, sink, sizeof sink, MSG_DONTWAIT) > 0) {
    }
}

static void tcp_close(wp_transport *t) {
    tcp_tp *T = tcp_of(t);
    pthread_mutex_lock(&T->sync.mu);
    T->stop = true;
    tcp_wake(T);
    pthread_mutex_unlock(&T->sync.mu);
    if (T->thread_started) pthread_join(T->thread, NULL);
    for (int p = 0; T->peers && p < t->world; p++) {
        for (int i = 0; T->peers[p].streams && i < T->net.tcp_streams; i++)
            if (T->peers[p].streams[i].fd >= 0) shut_stream(T->peers[p].streams[i].fd);
        free_peer(T, &T->peers[p]);
    }
    for (int i = 0; i < T->npending; i++) close(T->pending[i].fd);
    if (T->listen_fd >= 0) close(T->listen_fd);
    if (T->wake_fd >= 0) close(T->wake_fd);
    tp_free_requests(t);
    free(T->peers);
    wp_sync_destroy(&T->sync);
    free(T);
}

static const tp_ops tcp_ops = {
    .kind = "tcp",
    .connect = tcp_connect,
    .post = tcp_post,
    .failed = tcp_failed,
    .peer_name = peer_name,
    .close = tcp_close,
    .request_bytes = sizeof(tcp_req),
};

/* ---- creation ---- */

static wp_result alloc_peers(tcp_tp *T, char *err, size_t errlen) {
    int world = T->base.world, K = T->net.tcp_streams;
    T->peers = calloc((size_t)world, sizeof *T->peers);
    if (!T->peers) goto oom;
    /* One egress NIC per process: over tcp a rank cannot share a bucket with the other processes
     * of its node nor with the receiver's ingress, so this is the node's NIC only with one rank
     * per node (G > 1 processes: shape the host interface instead, docs/transports.md). */
    wp_link_init(&T->nic_out, T->net.link_bandwidth, 0);
    int per = T->net.ranks_per_node;
    if (T->base.rank == 0 && per > 1 && world > per && T->net.link_bandwidth > 0)
        ring_warn("over tcp each of a node's %d ranks paces its own egress at --link-bandwidth (one process cannot share "
                  "a budget with the others): the node gets up to %d times its NIC; for one shared NIC per host, shape "
                  "the host's interface (scripts/netns_hosts.sh -r) and give no --link-bandwidth",
                  per, per);
    for (int p = 0; p < world; p++) {
        tcp_peer *P = &T->peers[p];
        P->rank = p;
        P->streams = calloc((size_t)K, sizeof *P->streams);
        if (!P->streams) goto oom;
        for (int i = 0; i < K; i++) {
            P->streams[i].fd = -1;
            P->streams[i].index = i;
            P->streams[i].peer = P;
        }
        double bw, lat;
        tp_net_link(&T->net, T->base.rank, p, &bw, &lat);
        bool nic = tp_net_nic(&T->net, world, T->base.rank, p);
        wp_link_init(&P->link, nic ? 0 : bw, lat);
        if (nic) P->link.nic[0] = &T->nic_out;
    }
    return WP_OK;
oom:
    snprintf(err, errlen, "rank %d: out of memory for %d peers", T->base.rank, world);
    return WP_FAILED;
}

static wp_result check_args(const wp_net_opts *net, int rank, int world, const char *job_id, const char *secret,
                            char *err, size_t errlen) {
    if (world < 1 || rank < 0 || rank >= world) {
        snprintf(err, errlen, "tcp transport: rank %d of a world of %d", rank, world);
        return WP_FAILED;
    }
    if (net->tcp_streams < 1 || net->tcp_streams > 64) {
        snprintf(err, errlen, "tcp transport: %d streams per peer (1 to 64)", net->tcp_streams);
        return WP_FAILED;
    }
    if (strlen(job_id) >= WIRE_NAME_MAX || strlen(secret) >= WIRE_NAME_MAX) {
        snprintf(err, errlen, "tcp transport: the job id and the secret must be shorter than %d bytes", WIRE_NAME_MAX);
        return WP_FAILED;
    }
    if (net->frame_bytes == 0 || net->frame_bytes > (1u << 30)) {
        snprintf(err, errlen, "tcp transport: frame size %zu (1 byte to 1 GiB)", net->frame_bytes);
        return WP_FAILED;
    }
    return WP_OK;
}

wp_result tcp_create(const wp_net_opts *net, int rank, int world, const char *job_id, const char *secret,
                     wp_transport **out, char *err, size_t errlen) {
    *out = NULL;
    WP_TRY(check_args(net, rank, world, job_id, secret, err, errlen));
    tcp_tp *T = calloc(1, sizeof *T);
    if (!T || wp_sync_init(&T->sync) != 0) {
        free(T);
        snprintf(err, errlen, "rank %d: cannot create the tcp transport", rank);
        return WP_FAILED;
    }
    tp_init(&T->base, &tcp_ops, rank, world, &T->sync, &T->fail);
    T->fail.peer = -1;
    T->net = *net;
    snprintf(T->job, sizeof T->job, "%s", job_id);
    snprintf(T->secret, sizeof T->secret, "%s", secret);
    T->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    T->listen_fd = -1;
    wp_result rc = T->wake_fd < 0 ? WP_FAILED : alloc_peers(T, err, errlen);
    if (T->wake_fd < 0) snprintf(err, errlen, "rank %d: eventfd: %s", rank, strerror(errno));
    if (rc == 0) {
        char why[256];
        T->listen_fd = sock_listen(net->bind, 0, why, sizeof why);
        if (T->listen_fd < 0) {
            snprintf(err, errlen, "rank %d: %s (--bind)", rank, why);
            rc = WP_FAILED;
        } else {
            sock_local_addr(T->listen_fd, T->listen_addr, sizeof T->listen_addr);
        }
    }
    if (rc == 0) {
        if (pthread_create(&T->thread, NULL, tcp_progress_main, T) != 0) {
            snprintf(err, errlen, "rank %d: cannot start the progress thread", rank);
            rc = WP_FAILED;
        } else {
            T->thread_started = true;
        }
    }
    if (rc != 0) {
        tcp_close(&T->base);
        return WP_FAILED;
    }
    *out = &T->base;
    return WP_OK;
}

const char *tcp_listen_addr(wp_transport *t) { return tcp_of(t)->listen_addr; }

wp_result tcp_set_peers(wp_transport *t, char *const *addrs, char *err, size_t errlen) {
    tcp_tp *T = tcp_of(t);
    char host[SOCK_ADDR_MAX], why[128];
    int port;
    for (int p = 0; p < t->world; p++)
        if (strlen(addrs[p]) >= SOCK_ADDR_MAX || sock_split_addr(addrs[p], host, sizeof host, &port, why, sizeof why)) {
            snprintf(err, errlen, "rank %d: bad address '%.80s' for rank %d", t->rank, addrs[p], p);
            return WP_FAILED;
        }
    pthread_mutex_lock(&T->sync.mu);
    for (int p = 0; p < t->world; p++) snprintf(T->peers[p].addr, sizeof T->peers[p].addr, "%s", addrs[p]);
    T->peers_set = true;
    pthread_mutex_unlock(&T->sync.mu);
    return WP_OK;
}

const char *tcp_peer_addr(wp_transport *t, int peer) {
    return peer >= 0 && peer < t->world ? tcp_of(t)->peers[peer].addr : "";
}
