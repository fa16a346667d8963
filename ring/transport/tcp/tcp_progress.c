/* The tcp transport's progress thread: accepts and checks incoming connections, cuts posted
 * sends into frames (paced when the link is emulated), writes them, reads frames straight
 * into receive buffers and checks their crc. It holds the transport's mutex except while it
 * sleeps in ppoll, so every state change is seen whole by the executor's thread. */
#include <errno.h>
#include <math.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "tcp_impl.h"

#define READ_BUDGET (1u << 20) /* bytes read from one socket before looking at the others */

/* ---- sending ---- */

static int window_frames(const tcp_tp *T, const tcp_peer *P) {
    int w = 2 * T->net.tcp_streams;
    if (P->link.latency_s > 0) {
        if (P->link.bytes_per_s > 0) w += (int)ceil(P->link.latency_s * P->link.bytes_per_s / (double)T->net.frame_bytes) + 1;
        else w += 4096;
    }
    return w;
}

/* The next send with data to cut, channels taking turns (so channels share the link). The
 * turn passes only when a frame is really cut (take = true), never on a mere look. */
static wp_request *next_source(tcp_peer *P, bool take) {
    for (int k = 0; k < WP_MAX_CHANNELS; k++) {
        int c = (P->rr_chan + k) % WP_MAX_CHANNELS;
        wp_request *s = P->sends[c].head;
        if (s && tcp_req_of(s)->cts) {
            if (take) P->rr_chan = (c + 1) % WP_MAX_CHANNELS;
            return s;
        }
    }
    return NULL;
}

static void push_data(tcp_stream *st, tcp_out *o) {
    if (st->data_tail) st->data_tail->next = o;
    else st->data_head = o;
    st->data_tail = o;
}

/* Cut one frame for P if its window and its link allow (*cut); returns when to look again
 * (INFINITY: nothing to cut, window full, or just cut: then the caller asks again). One at a time
 * so that the peers sharing this process's NIC take turns (build_poll). */
static double schedule_peer(tcp_tp *T, tcp_peer *P, double now, bool *cut) {
    size_t fb = T->net.frame_bytes;
    bool paced = wp_link_paced(&P->link);
    *cut = false;
    if (P->frames_queued < window_frames(T, P)) {
        if (!next_source(P, false)) return INFINITY;
        if (paced && wp_link_ready_at(&P->link, fb) > now) return wp_link_ready_at(&P->link, fb);
        wp_request *s = next_source(P, true);
        tcp_out *o = calloc(1, sizeof *o);
        if (!o) {
            tp_fail_locked(&T->base, -1, "rank %d: out of memory sending %s", T->base.rank, s->label);
            return INFINITY;
        }
        size_t len = s->bytes - s->scheduled < fb ? s->bytes - s->scheduled : fb;
        wire_frame f = {.type = F_DATA, .channel = (uint8_t)s->channel, .length = (uint32_t)len, .seq = s->seq,
                        .a = s->scheduled, .b = s->bytes};
        wire_frame_seal(&f, s->buf + s->scheduled);
        wire_frame_encode(&f, o->hdr);
        o->payload = s->buf + s->scheduled;
        o->len = len;
        o->req = s;
        o->release = paced ? wp_link_reserve(&P->link, now, len) : 0;
        push_data(&P->streams[P->rr_stream], o);
        P->rr_stream = (P->rr_stream + 1) % T->net.tcp_streams;
        s->scheduled += len;
        s->frames_out++;
        P->frames_queued++;
        if (s->scheduled == s->bytes) {
            s->all_scheduled = true;
            tp_queue_remove(&P->sends[s->channel], s);
        }
        *cut = true;
    }
    return INFINITY;
}

static void frame_written(tcp_tp *T, tcp_stream *st, tcp_out *o) {
    T->base.stats.overhead_sent += WIRE_FRAME_BYTES + (o->req ? 0 : o->len);
    wp_request *s = o->req;
    if (s) {
        st->peer->frames_queued--;
        s->frames_out--;
        tp_progress_locked(s, o->len);
        if (s->all_scheduled && s->frames_out == 0) {
            st->peer->pending_sends--;
            tp_complete_locked(s);
        }
    }
    tcp_free_out(o);
}

/* The frame to write next: a control frame at a frame boundary, else a released data frame. */
static tcp_out *next_out(tcp_stream *st, double now, bool data_allowed) {
    tcp_out *o = NULL;
    if (st->ctl_head) {
        o = st->ctl_head;
        st->ctl_head = o->next;
        if (!st->ctl_head) st->ctl_tail = NULL;
    } else if (data_allowed && st->data_head && st->data_head->release <= now) {
        o = st->data_head;
        st->data_head = o->next;
        if (!st->data_head) st->data_tail = NULL;
    }
    if (o) o->next = NULL;
    return o;
}

static void stream_error(tcp_tp *T, tcp_stream *st, int err);

static void stream_write(tcp_tp *T, tcp_stream *st, double now) {
    bool data_allowed = !T->fail.failed;
    for (;;) {
        if (!st->cur && !(st->cur = next_out(st, now, data_allowed))) return;
        tcp_out *o = st->cur;
        struct iovec iov[2];
        int n = 0;
        if (o->written < WIRE_FRAME_BYTES)
            iov[n++] = (struct iovec){.iov_base = o->hdr + o->written, .iov_len = WIRE_FRAME_BYTES - o->written};
        size_t pay_done = o->written > WIRE_FRAME_BYTES ? o->written - WIRE_FRAME_BYTES : 0;
        if (o->len > pay_done)
            iov[n++] = (struct iovec){.iov_base = (void *)(o->payload + pay_done), .iov_len = o->len - pay_done};
        ssize_t w = n ? sendmsg(st->fd, &(struct msghdr){.msg_iov = iov, .msg_iovlen = (size_t)n}, MSG_NOSIGNAL | MSG_DONTWAIT) : 0;
        if (w < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR) return;
            stream_error(T, st, errno);
            return;
        }
        o->written += (size_t)w;
        if (o->written < WIRE_FRAME_BYTES + o->len) return;
        st->cur = NULL;
        frame_written(T, st, o);
    }
}

/* ---- receiving ---- */

static void close_peer(tcp_tp *T, tcp_peer *P) {
    for (int i = 0; i < T->net.tcp_streams; i++) {
        tcp_stream *st = &P->streams[i];
        if (st->fd >= 0) close(st->fd);
        st->fd = -1;
    }
    P->connected = false;
    P->closing = true;
    P->closed = true;
}

static void fail_closed(tcp_tp *T, tcp_peer *P, int err) {
    if (err == 0 || err == EPIPE) tp_fail_locked(&T->base, P->rank, "closed the connection");
    else if (err == ECONNRESET) tp_fail_locked(&T->base, P->rank, "reset the connection");
    else tp_fail_locked(&T->base, P->rank, "connection failed: %s", strerror(err));
}

/* A stream ended (err 0: an orderly end of file). A peer that finished closes all its
 * streams, and frames still travelling on the others must be read first: only when every
 * stream has ended is a receive still pending a failure. A cut frame, an error, or a send
 * that can no longer be delivered is a failure at once; otherwise the peer simply finished. */
static void stream_error(tcp_tp *T, tcp_stream *st, int err) {
    tcp_peer *P = st->peer;
    bool mid_frame = st->hdr_got > 0 || st->cur != NULL;
    if (T->fail.failed) {
        close_peer(T, P);
        return;
    }
    bool pending = P->pending_sends > 0 || P->pending_recvs > 0;
    if (mid_frame || P->pending_sends > 0 || (err != 0 && pending)) fail_closed(T, P, err);
    if (mid_frame || P->pending_sends > 0 || err != 0) {
        close_peer(T, P);
        return;
    }
    close(st->fd);
    st->fd = -1;
    P->closing = true;
    for (int i = 0; i < T->net.tcp_streams; i++)
        if (P->streams[i].fd >= 0) return;
    if (P->pending_recvs > 0) fail_closed(T, P, 0);
    close_peer(T, P);
}

static void protocol_error(tcp_tp *T, tcp_stream *st, const char *what) {
    tp_fail_locked(&T->base, st->peer->rank, "%s", what);
    close_peer(T, st->peer);
}

static wp_request *find_recv(tcp_peer *P, int channel, uint64_t seq) {
    for (wp_request *r = P->recvs[channel].head; r; r = r->next)
        if (r->seq == seq) return r;
    return NULL;
}

/* Check a decoded header and point st->dst at where its payload goes. */
static int begin_payload(tcp_tp *T, tcp_stream *st) {
    wire_frame *f = &st->f;
    char what[200];
    st->rreq = NULL;
    if (f->type == F_DATA) {
        wp_request *r = f->channel < WP_MAX_CHANNELS ? find_recv(st->peer, f->channel, f->seq) : NULL;
        if (!r || f->length > T->net.frame_bytes || f->b != r->bytes || f->a > r->bytes ||
            f->length > r->bytes - f->a || r->moved + f->length > r->bytes) {
            snprintf(what, sizeof what, "sent a data frame nobody asked for (channel %u, message %llu, %u bytes at %llu)",
                     f->channel, (unsigned long long)f->seq, f->length, (unsigned long long)f->a);
            protocol_error(T, st, what);
            return -1;
        }
        st->rreq = r;
        st->dst = r->buf + f->a;
    } else if ((f->type == F_CTS || f->type == F_ABORT) && f->length <= TCP_SMALL_PAYLOAD &&
               (f->type != F_CTS || (f->channel < WP_MAX_CHANNELS && f->length < WP_LABEL_MAX))) {
        st->dst = st->small;
    } else {
        snprintf(what, sizeof what, "sent an unexpected %s frame (type %u, %u bytes)", wire_frame_type_name(f->type),
                 f->type, f->length);
        protocol_error(T, st, what);
        return -1;
    }
    st->in_payload = true;
    st->pay_got = 0;
    return 0;
}

static void end_frame(tcp_tp *T, tcp_stream *st) {
    wire_frame *f = &st->f;
    tcp_peer *P = st->peer;
    st->hdr_got = 0;
    st->in_payload = false;
    if (st->crc != f->crc) {
        char what[200];
        snprintf(what, sizeof what, "sent a %s frame with a bad checksum (channel %u, message %llu%s%s)",
                 wire_frame_type_name(f->type), f->channel, (unsigned long long)f->seq, st->rreq ? ", " : "",
                 st->rreq ? st->rreq->label : "");
        protocol_error(T, st, what);
        return;
    }
    T->base.stats.overhead_recv += WIRE_FRAME_BYTES + (f->type == F_DATA ? 0 : f->length);
    if (f->type == F_DATA) {
        wp_request *r = st->rreq;
        tp_progress_locked(r, f->length);
        if (r->moved == r->bytes) {
            tp_queue_remove(&P->recvs[r->channel], r);
            P->pending_recvs--;
            tp_complete_locked(r);
        }
    } else if (f->type == F_CTS) {
        st->small[f->length] = 0;
        tcp_got_cts(T, P, f->channel, f->seq, f->a, st->small);
    } else {
        st->small[f->length] = 0;
        if (!T->base.fail->failed) T->base.fail->hearsay = true;
        tp_fail_locked(&T->base, P->rank, "aborted: %s", st->small);
    }
}

/* Read what the socket has (up to a budget), frame by frame. */
static void stream_read(tcp_tp *T, tcp_stream *st) {
    size_t budget = READ_BUDGET;
    while (budget > 0 && st->fd >= 0 && !T->fail.failed) {
        ssize_t n;
        if (!st->in_payload) {
            n = recv(st->fd, st->hdr + st->hdr_got, WIRE_FRAME_BYTES - st->hdr_got, MSG_DONTWAIT);
        } else {
            size_t want = st->f.length - st->pay_got;
            n = recv(st->fd, st->dst + st->pay_got, want < budget ? want : budget, MSG_DONTWAIT);
        }
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            stream_error(T, st, n == 0 ? 0 : errno);
            return;
        }
        if (n < 0) return;
        budget -= (size_t)n < budget ? (size_t)n : budget;
        if (!st->in_payload) {
            st->hdr_got += (size_t)n;
            if (st->hdr_got < WIRE_FRAME_BYTES) continue;
            char why[160], what[200];
            if (wire_frame_decode(st->hdr, &st->f, &st->crc, why, sizeof why) != 0) {
                snprintf(what, sizeof what, "sent a bad frame: %s", why);
                protocol_error(T, st, what);
                return;
            }
            if (begin_payload(T, st) != 0) return;
        } else {
            st->crc = wire_crc(st->crc, st->dst + st->pay_got, (size_t)n);
            st->pay_got += (size_t)n;
        }
        if (st->pay_got == st->f.length) end_frame(T, st);
    }
}

/* ---- accepting ---- */

static void reply_and_register(tcp_tp *T, hs_pending *p, const wire_hs *h) {
    tcp_peer *P = &T->peers[h->rank];
    tcp_stream *st = &P->streams[h->stream];
    wire_hs ack = {.version = WIRE_VERSION, .kind = HS_DATA_ACK, .rank = (uint32_t)T->base.rank,
                   .world = (uint32_t)T->base.world, .stream = h->stream, .nstreams = h->nstreams,
                   .frame_bytes = h->frame_bytes};
    snprintf(ack.job, sizeof ack.job, "%s", T->job);
    snprintf(ack.secret, sizeof ack.secret, "%s", T->secret);
    uint8_t buf[WIRE_HS_BYTES];
    char why[160];
    wire_hs_encode(&ack, buf);
    if (st->fd >= 0 || P->closed || (int)h->rank >= T->base.rank) {
        hs_reject(p, T->base.rank, st->fd >= 0 ? "stream already connected" : "unexpected connection direction",
                  &T->base.stats.rejected);
        return;
    }
    if (sock_write_all(p->fd, buf, sizeof buf, wp_now() + 1.0, why, sizeof why) != 0) {
        hs_reject(p, T->base.rank, why, &T->base.stats.rejected);
        return;
    }
    T->base.stats.overhead_sent += WIRE_HS_BYTES;
    T->base.stats.overhead_recv += WIRE_HS_BYTES;
    tcp_stream_up(T, P, h->stream, p->fd);
    p->fd = -1;
}

static void progress_handshake(tcp_tp *T, hs_pending *p, double now) {
    char why[200];
    int rc = hs_read_some(p, why, sizeof why);
    if (rc == 0 && now < p->deadline) return;
    if (rc == 0) snprintf(why, sizeof why, "no complete handshake in time (%zu of %d bytes)", p->got, WIRE_HS_BYTES);
    if (rc <= 0) {
        hs_reject(p, T->base.rank, why, &T->base.stats.rejected);
        return;
    }
    hs_expect e = {.kind = HS_DATA, .world = T->base.world, .job = T->job, .secret = T->secret,
                   .frame_bytes = (uint32_t)T->net.frame_bytes, .nstreams = T->net.tcp_streams};
    wire_hs h;
    if (hs_check(p->buf, &e, &h, why, sizeof why) != 0) {
        hs_reject(p, T->base.rank, why, &T->base.stats.rejected);
        return;
    }
    reply_and_register(T, p, &h);
}

static void drop_finished_handshakes(tcp_tp *T) {
    int k = 0;
    for (int i = 0; i < T->npending; i++)
        if (T->pending[i].fd >= 0) T->pending[k++] = T->pending[i];
    T->npending = k;
}

/* ---- the loop ---- */

typedef struct poll_set {
    struct pollfd *fds;
    tcp_stream **streams; /* per fd: its stream, or NULL */
    int n, cap;
} poll_set;

static int poll_add(poll_set *ps, int fd, short events, tcp_stream *st) {
    if (ps->n == ps->cap) {
        int cap = ps->cap ? 2 * ps->cap : 64;
        struct pollfd *f = realloc(ps->fds, (size_t)cap * sizeof *f);
        if (!f) return -1;
        ps->fds = f;
        tcp_stream **s = realloc(ps->streams, (size_t)cap * sizeof *s);
        if (!s) return -1;
        ps->streams = s;
        ps->cap = cap;
    }
    ps->fds[ps->n] = (struct pollfd){.fd = fd, .events = events};
    ps->streams[ps->n++] = st;
    return 0;
}

/* Whether st has a frame it may write now; else the time its next data frame is released. */
static bool wants_write(const tcp_stream *st, double now, bool failed, double *next) {
    if (st->cur || st->ctl_head) return true;
    if (failed || !st->data_head) return false;
    if (st->data_head->release <= now) return true;
    if (st->data_head->release < *next) *next = st->data_head->release;
    return false;
}

/* Build the poll set; returns the time the loop must wake up by. */
static double build_poll(tcp_tp *T, poll_set *ps, double now) {
    double next = now + 1.0;
    bool failed = T->fail.failed;
    ps->n = 0;
    int rc = poll_add(ps, T->wake_fd, POLLIN, NULL);
    if (!failed) rc |= poll_add(ps, T->listen_fd, POLLIN, NULL);
    for (int i = 0; i < T->npending; i++) {
        rc |= poll_add(ps, T->pending[i].fd, POLLIN, NULL);
        if (T->pending[i].deadline < next) next = T->pending[i].deadline;
    }
    /* peers take turns frame by frame, the first one rotating, as they may share one NIC */
    for (bool any = !failed; any;) {
        any = false;
        for (int k = 0; k < T->base.world; k++) {
            tcp_peer *P = &T->peers[(T->rr_peer + k) % T->base.world];
            bool cut = false;
            double t = P->connected ? schedule_peer(T, P, now, &cut) : INFINITY;
            any = any || cut;
            if (t < next) next = t;
        }
    }
    T->rr_peer = (T->rr_peer + 1) % T->base.world;
    for (int p = 0; p < T->base.world; p++) {
        tcp_peer *P = &T->peers[p];
        for (int i = 0; i < T->net.tcp_streams; i++) {
            tcp_stream *st = &P->streams[i];
            if (st->fd < 0 || (failed && st->broken)) continue;
            short ev = failed ? 0 : POLLIN;
            if (wants_write(st, now, failed, &next)) ev |= POLLOUT;
            if (ev) rc |= poll_add(ps, st->fd, ev, st);
        }
    }
    if (rc != 0) tp_fail_locked(&T->base, -1, "rank %d: out of memory in the progress thread", T->base.rank);
    return next;
}

static void drain_wake(tcp_tp *T) {
    uint64_t v;
    while (read(T->wake_fd, &v, sizeof v) > 0) {
    }
}

static void handle_events(tcp_tp *T, poll_set *ps, double now) {
    for (int k = 0; k < ps->n; k++) {
        struct pollfd *pf = &ps->fds[k];
        tcp_stream *st = ps->streams[k];
        if (!pf->revents) continue;
        if (pf->fd == T->wake_fd && !st) {
            drain_wake(T);
        } else if (pf->fd == T->listen_fd && !st) {
            hs_accept_all(T->listen_fd, T->pending, &T->npending, fmin(T->net.connect_timeout, HS_TIMEOUT_MAX),
                          &T->base.stats.rejected, T->base.rank);
        } else if (st) {
            if (st->fd != pf->fd) continue; /* closed meanwhile */
            if ((pf->revents & (POLLIN | POLLHUP | POLLERR)) && !T->fail.failed) stream_read(T, st);
            if (st->fd == pf->fd && (pf->revents & POLLOUT)) stream_write(T, st, now);
        }
    }
    for (int i = 0; i < T->npending; i++) progress_handshake(T, &T->pending[i], now);
    drop_finished_handshakes(T);
}

/* After a failure: once the abort frames are out (or their time is up), shut every socket so
 * peers see the end at once. */
static void finish_failure(tcp_tp *T, double now) {
    if (T->shut) return;
    bool flushing = false;
    for (int p = 0; p < T->base.world; p++)
        for (int i = 0; i < T->net.tcp_streams; i++) {
            tcp_stream *st = &T->peers[p].streams[i];
            if (st->fd >= 0 && !st->broken && (st->cur || st->ctl_head)) flushing = true;
        }
    if (flushing && now < T->flush_deadline) return;
    for (int p = 0; p < T->base.world; p++)
        for (int i = 0; i < T->net.tcp_streams; i++)
            if (T->peers[p].streams[i].fd >= 0) shutdown(T->peers[p].streams[i].fd, SHUT_RDWR);
    T->shut = true;
}

void *tcp_progress_main(void *arg) {
    tcp_tp *T = arg;
    poll_set ps = {0};
    pthread_mutex_lock(&T->sync.mu);
    while (!T->stop) {
        double now = wp_now();
        double next = build_poll(T, &ps, now);
        struct timespec ts = wp_timespec(next > now ? next - now : 0);
        pthread_mutex_unlock(&T->sync.mu);
        int rc = ppoll(ps.fds, (nfds_t)ps.n, &ts, NULL);
        pthread_mutex_lock(&T->sync.mu);
        if (rc < 0 && errno != EINTR) {
            tp_fail_locked(&T->base, -1, "rank %d: poll failed: %s", T->base.rank, strerror(errno));
            continue;
        }
        now = wp_now();
        if (rc > 0) handle_events(T, &ps, now);
        else for (int i = 0; i < T->npending; i++) progress_handshake(T, &T->pending[i], now);
        drop_finished_handshakes(T);
        if (T->fail.failed) finish_failure(T, now);
    }
    pthread_mutex_unlock(&T->sync.mu);
    free(ps.fds);
    free(ps.streams);
    return NULL;
}
