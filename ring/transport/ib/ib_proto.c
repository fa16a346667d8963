/* The RDMA protocol: staging buffers, chunks, credits, completions (see ib_proto.h). */
#include "ib_proto.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define IBP_MAGIC 0x57504942u /* "WPIB" */
#define IBP_INFO_VERSION 1u
#define IBP_CHUNK_MAGIC 0x4b4e4843u

enum { WR_DATA_MID = 1, WR_DATA_LAST = 2, WR_CREDIT = 3, WR_RECV = 4 };

static uint64_t wr_id(int kind, int channel, int buf) {
    return (uint64_t)kind << 32 | (uint64_t)channel << 8 | (uint64_t)buf;
}
static int wr_kind(uint64_t id) { return (int)(id >> 32); }
static int wr_chan(uint64_t id) { return (int)(id >> 8 & 0xff); }
static int wr_buf(uint64_t id) { return (int)(id & 0xff); }

/* The chunk header, at the start of each staging buffer (little-endian fields). */
typedef struct chunk_hdr {
    uint32_t magic, len;
    uint64_t seq, total, offset;
    char label[WP_LABEL_MAX];
} chunk_hdr;
_Static_assert(sizeof(chunk_hdr) <= IBP_HDR_BYTES, "chunk header fits its reserved bytes");

void ibp_cfg_defaults(ibp_cfg *c) {
    c->slot_bytes = (512u << 10) - IBP_HDR_BYTES; /* header + payload: exactly 4 work requests */
    c->wr_bytes = 128u << 10;
    c->timeout = 60;
}

static size_t wrs_per_chunk(const ibp_cfg *c) { return (IBP_HDR_BYTES + c->slot_bytes + c->wr_bytes - 1) / c->wr_bytes; }

/* Data writes of every buffer in flight, plus credits (two per buffer: a credit's own
 * completion may come after the next one was posted). */
static size_t sq_needed(const ibp_cfg *c) {
    return WP_MAX_CHANNELS * IBP_SLOTS * (wrs_per_chunk(c) + 2);
}

wp_result ibp_cfg_check(const ibp_cfg *c, char *err, size_t errlen) {
    if (c->slot_bytes < 1 || c->slot_bytes > (1u << 30)) {
        snprintf(err, errlen, "RDMA staging buffer of %zu bytes (1 byte to 1 GiB)", c->slot_bytes);
        return WP_FAILED;
    }
    if (c->wr_bytes < 1 || c->wr_bytes > IBP_HDR_BYTES + c->slot_bytes) {
        snprintf(err, errlen, "RDMA work request of %zu bytes (1 to %zu)", c->wr_bytes, IBP_HDR_BYTES + c->slot_bytes);
        return WP_FAILED;
    }
    if (sq_needed(c) > IBP_MAX_WRS) {
        snprintf(err, errlen, "RDMA buffers of %zu bytes cut into %zu-byte work requests need %zu send queue entries "
                 "per peer (at most %d): use larger work requests", c->slot_bytes, c->wr_bytes, sq_needed(c), IBP_MAX_WRS);
        return WP_FAILED;
    }
    if (!(c->timeout > 0)) {
        snprintf(err, errlen, "RDMA completion timeout %g s must be positive", c->timeout);
        return WP_FAILED;
    }
    return WP_OK;
}

/* ---- little-endian encoding of the connection info ---- */

static void put32(uint8_t *p, uint32_t v) {
    for (int i = 0; i < 4; i++) p[i] = (uint8_t)(v >> 8 * i);
}
static void put64(uint8_t *p, uint64_t v) {
    for (int i = 0; i < 8; i++) p[i] = (uint8_t)(v >> 8 * i);
}
static uint32_t get32(const uint8_t *p) {
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) v |= (uint32_t)p[i] << 8 * i;
    return v;
}
static uint64_t get64(const uint8_t *p) {
    uint64_t v = 0;
    for (int i = 0; i < 8; i++) v |= (uint64_t)p[i] << 8 * i;
    return v;
}

void ibp_info_encode(const ibp_link *L, uint8_t *out) {
    memset(out, 0, IBP_INFO_BYTES);
    put32(out, IBP_MAGIC);
    put32(out + 4, IBP_INFO_VERSION);
    put32(out + 8, L->local.qpn);
    put32(out + 12, L->local.psn);
    put32(out + 16, L->local.lid);
    out[20] = L->local.port;
    out[21] = L->local.mtu;
    out[22] = WP_MAX_CHANNELS;
    out[23] = IBP_SLOTS;
    memcpy(out + 24, L->local.gid, 16);
    put64(out + 40, (uint64_t)(uintptr_t)L->region);
    put32(out + 48, L->rkey);
    put64(out + 52, L->cfg.slot_bytes);
    put64(out + 60, L->stride);
    put32(out + 68, (uint32_t)L->t->rank);
}

/* ---- link set-up ---- */

static char *buf_at(ibp_link *L, bool send, int channel, int b) {
    return L->region + ((size_t)(send ? WP_MAX_CHANNELS * IBP_SLOTS : 0) + (size_t)channel * IBP_SLOTS + (size_t)b) * L->stride;
}

wp_result ibp_link_init(ibp_link *L, wp_transport *t, const ib_ops *ops, ib_dev *dev, int peer, const ibp_cfg *cfg,
                        char *err, size_t errlen) {
    memset(L, 0, sizeof *L);
    L->t = t;
    L->ops = ops;
    L->dev = dev;
    L->peer = peer;
    L->cfg = *cfg;
    L->stride = (IBP_HDR_BYTES + cfg->slot_bytes + 63) & ~(size_t)63;
    L->region_bytes = 2 * WP_MAX_CHANNELS * IBP_SLOTS * L->stride;
    L->sq_depth = (int)sq_needed(cfg);
    void *mem = NULL;
    if (posix_memalign(&mem, 4096, L->region_bytes) != 0) {
        snprintf(err, errlen, "rank %d: out of memory for %zu bytes of RDMA buffers for rank %d", t->rank, L->region_bytes,
                 peer);
        return WP_FAILED;
    }
    memset(mem, 0, L->region_bytes);
    L->region = mem;
    char why[256];
    if (ops->reg_mr(dev, L->region, L->region_bytes, &L->mr, &L->rkey, why, sizeof why) != 0) {
        snprintf(err, errlen, "rank %d: cannot register %zu bytes of RDMA buffers for rank %d: %s", t->rank,
                 L->region_bytes, peer, why);
        ibp_link_free(L);
        return WP_FAILED;
    }
    if (ops->create_qp(dev, L, L->sq_depth, IBP_RQ_DEPTH, &L->qp, &L->local, why, sizeof why) != 0) {
        snprintf(err, errlen, "rank %d: cannot create a queue pair for rank %d: %s", t->rank, peer, why);
        ibp_link_free(L);
        return WP_FAILED;
    }
    for (int c = 0; c < WP_MAX_CHANNELS; c++)
        for (int b = 0; b < IBP_SLOTS; b++) L->ch[c].credit[b] = true;
    return WP_OK;
}

void ibp_link_free(ibp_link *L) {
    if (L->qp) L->ops->destroy_qp(L->qp);
    if (L->mr) L->ops->dereg_mr(L->mr);
    free(L->region);
    L->qp = NULL;
    L->mr = NULL;
    L->region = NULL;
}

static void pump(ibp_link *L, int channel);

wp_result ibp_link_connect(ibp_link *L, const uint8_t *info, char *err, size_t errlen) {
    int me = L->t->rank;
    if (get32(info) != IBP_MAGIC || get32(info + 4) != IBP_INFO_VERSION) {
        snprintf(err, errlen, "sent RDMA connection info of another format or version (%u)", get32(info + 4));
        return WP_FAILED;
    }
    if (info[22] != WP_MAX_CHANNELS || info[23] != IBP_SLOTS || get64(info + 52) != L->cfg.slot_bytes ||
        get64(info + 60) != L->stride) {
        snprintf(err, errlen, "uses RDMA buffers of %llu bytes x %u channels (rank %d: %zu x %d)",
                 (unsigned long long)get64(info + 52), info[22], me, L->cfg.slot_bytes, WP_MAX_CHANNELS);
        return WP_FAILED;
    }
    if ((int)get32(info + 68) != L->peer) {
        snprintf(err, errlen, "sent the RDMA connection info of rank %u", get32(info + 68));
        return WP_FAILED;
    }
    ib_addr remote = {.qpn = get32(info + 8), .psn = get32(info + 12), .lid = (uint16_t)get32(info + 16),
                      .port = info[20], .mtu = info[21]};
    memcpy(remote.gid, info + 24, 16);
    L->remote_base = get64(info + 40);
    L->remote_rkey = get32(info + 48);
    char why[256];
    if (L->ops->connect_qp(L->qp, &remote, why, sizeof why) != 0) {
        snprintf(err, errlen, "cannot be connected to (queue pair 0x%x): %s", remote.qpn, why);
        return WP_FAILED;
    }
    for (int i = 0; i < IBP_RQ_DEPTH; i++)
        if (L->ops->post_recv(L->qp, wr_id(WR_RECV, 0, 0), why, sizeof why) != 0) {
            snprintf(err, errlen, "cannot get receives posted: %s", why);
            return WP_FAILED;
        }
    return WP_OK;
}

void ibp_link_start(ibp_link *L) {
    L->connected = true;
    for (int c = 0; c < WP_MAX_CHANNELS; c++) pump(L, c);
}

/* ---- sending ---- */

static bool failed(ibp_link *L) { return L->t->fail->failed; }

static wp_result post_write(ibp_link *L, uint64_t id, const char *src, size_t len, uint64_t raddr, bool imm, uint32_t value) {
    char why[256];
    if (L->sq_used >= L->sq_depth) {
        tp_fail_locked(L->t, -1, "rank %d: RDMA send queue to rank %d overflowed (%d entries)", L->t->rank, L->peer,
                       L->sq_depth);
        return WP_FAILED;
    }
    if (L->ops->post_write(L->qp, id, L->mr, src, len, raddr, L->remote_rkey, imm, value, why, sizeof why) != 0) {
        tp_fail_locked(L->t, L->peer, "could not be written to: %s", why);
        return WP_FAILED;
    }
    L->sq_used++;
    return WP_OK;
}

/* Write header + payload of one chunk into the peer's buffer b, in work requests of at most
 * wr_bytes; the last one carries the immediate. */
static wp_result write_chunk(ibp_link *L, int c, int b, size_t len) {
    const char *src = buf_at(L, true, c, b);
    uint64_t raddr = L->remote_base + ((uint64_t)c * IBP_SLOTS + (uint64_t)b) * L->stride;
    size_t total = IBP_HDR_BYTES + len, off = 0;
    while (off < total) {
        size_t n = total - off < L->cfg.wr_bytes ? total - off : L->cfg.wr_bytes;
        bool last = off + n == total;
        WP_TRY(post_write(L, wr_id(last ? WR_DATA_LAST : WR_DATA_MID, c, b), src + off, n, raddr + off, last,
                          ibp_imm(false, c, b)));
        off += n;
    }
    return WP_OK;
}

/* Cut the next chunk of the head send into staging buffer b and write it. */
static wp_result start_chunk(ibp_link *L, int c, int b) {
    ibp_chan *C = &L->ch[c];
    wp_request *r = C->sends.head;
    size_t len = r->bytes - r->scheduled < L->cfg.slot_bytes ? r->bytes - r->scheduled : L->cfg.slot_bytes;
    char *dst = buf_at(L, true, c, b);
    chunk_hdr h = {.magic = IBP_CHUNK_MAGIC, .len = (uint32_t)len, .seq = r->seq, .total = r->bytes,
                   .offset = r->scheduled};
    snprintf(h.label, sizeof h.label, "%s", r->label);
    memcpy(dst, &h, sizeof h);
    if (len) memcpy(dst + IBP_HDR_BYTES, r->buf + r->scheduled, len);
    C->flight[b] = (ibp_flight){.req = r, .offset = r->scheduled, .len = len, .posted_at = wp_now()};
    C->credit[b] = false;
    C->send_next = (b + 1) % IBP_SLOTS;
    r->scheduled += len;
    r->frames_out++;
    L->t->stats.overhead_sent += IBP_HDR_BYTES;
    if (r->scheduled == r->bytes) {
        r->all_scheduled = true;
        tp_queue_pop(&C->sends);
    }
    return write_chunk(L, c, b, len);
}

/* Start chunks of the channel's sends while a buffer is free on both sides. */
static void pump(ibp_link *L, int c) {
    ibp_chan *C = &L->ch[c];
    while (L->connected && !failed(L) && C->sends.head) {
        int b = C->send_next;
        if (!C->credit[b] || C->flight[b].req) return;
        if (start_chunk(L, c, b) != 0) return;
    }
}

/* ---- receiving ---- */

static void send_credit(ibp_link *L, int c, int b) {
    post_write(L, wr_id(WR_CREDIT, c, b), L->region, 0, L->remote_base, true, ibp_imm(true, c, b));
}

/* The first buffer that arrived holds the next chunk of the head receive: check it, copy it. */
static wp_result take_chunk(ibp_link *L, int c, wp_request *r) {
    ibp_chan *C = &L->ch[c];
    int b = C->full[0];
    const char *src = buf_at(L, false, c, b);
    chunk_hdr h;
    memcpy(&h, src, sizeof h);
    h.label[WP_LABEL_MAX - 1] = 0;
    if (h.magic != IBP_CHUNK_MAGIC || h.seq != r->seq || h.offset != r->moved || h.len > L->cfg.slot_bytes) {
        tp_fail_locked(L->t, L->peer, "wrote a bad chunk on channel %d (message %llu at offset %llu; rank %d expected "
                       "message %llu at offset %zu of %s)", c, (unsigned long long)h.seq,
                       (unsigned long long)h.offset, L->t->rank, (unsigned long long)r->seq, r->moved, r->label);
        return WP_FAILED;
    }
    if (h.total != r->bytes || h.offset + h.len > h.total) {
        tp_fail_locked(L->t, -1, "rank %d sends %s (%llu bytes) on channel %d but rank %d expects %s (%zu bytes)",
                       L->peer, h.label, (unsigned long long)h.total, c, L->t->rank, r->label, r->bytes);
        return WP_FAILED;
    }
    if (h.len) memcpy(r->buf + h.offset, src + IBP_HDR_BYTES, h.len);
    L->t->stats.overhead_recv += IBP_HDR_BYTES;
    tp_progress_locked(r, h.len);
    memmove(C->full, C->full + 1, (size_t)(--C->nfull) * sizeof C->full[0]);
    send_credit(L, c, b);
    return WP_OK;
}

/* The peer's queue pair went away (one of our credits or receives failed): fine as long as
 * nothing more is expected from it (it closed after its last send), fatal otherwise. */
static void check_gone(ibp_link *L, const char *why) {
    if (!L->gone || failed(L)) return;
    for (int c = 0; c < WP_MAX_CHANNELS; c++) {
        ibp_chan *C = &L->ch[c];
        wp_request *r = C->sends.head ? C->sends.head : C->flight[0].req ? C->flight[0].req : C->flight[1].req;
        if (!r && C->recvs.head && C->nfull == 0) r = C->recvs.head;
        if (r) {
            tp_fail_locked(L->t, L->peer, "closed its RDMA connection (%s) while rank %d still had %s on channel %d "
                           "pending with it", why, L->t->rank, r->label, c);
            return;
        }
    }
}

/* Copy arrived chunks into the posted receives, in order. */
static void deliver(ibp_link *L, int c) {
    ibp_chan *C = &L->ch[c];
    while (!failed(L) && C->nfull > 0 && C->recvs.head) {
        wp_request *r = C->recvs.head;
        if (take_chunk(L, c, r) != 0) return;
        if (r->moved == r->bytes) {
            tp_queue_pop(&C->recvs);
            L->pending--;
            tp_complete_locked(r);
        }
    }
    check_gone(L, "its queue pair is gone");
}

void ibp_post(ibp_link *L, wp_request *r) {
    ibp_chan *C = &L->ch[r->channel];
    L->pending++;
    if (r->kind == TP_SEND) {
        r->seq = C->send_seq++;
        tp_queue_push(&C->sends, r);
        pump(L, r->channel);
    } else {
        r->seq = C->recv_seq++;
        tp_queue_push(&C->recvs, r);
        deliver(L, r->channel);
    }
}

/* ---- completions ---- */

static void chunk_confirmed(ibp_link *L, int c, int b) {
    ibp_chan *C = &L->ch[c];
    ibp_flight *f = &C->flight[b];
    wp_request *r = f->req;
    if (!r) {
        tp_fail_locked(L->t, -1, "rank %d: a write completion for channel %d buffer %d to rank %d that was not in flight",
                       L->t->rank, c, b, L->peer);
        return;
    }
    tp_progress_locked(r, f->len);
    r->frames_out--;
    f->req = NULL;
    if (r->all_scheduled && r->frames_out == 0) {
        L->pending--;
        tp_complete_locked(r);
    }
    pump(L, c);
}

static void got_imm(ibp_link *L, uint32_t imm) {
    int c = (int)(imm >> 1 & 7), b = (int)(imm & 1);
    ibp_chan *C = &L->ch[c];
    char why[256];
    if (L->ops->post_recv(L->qp, wr_id(WR_RECV, 0, 0), why, sizeof why) != 0) {
        tp_fail_locked(L->t, -1, "rank %d: cannot repost an RDMA receive for rank %d: %s", L->t->rank, L->peer, why);
        return;
    }
    if (imm >> 8 & 1) {
        if (C->credit[b]) {
            tp_fail_locked(L->t, L->peer, "returned a credit for channel %d buffer %d twice", c, b);
            return;
        }
        C->credit[b] = true;
        pump(L, c);
        return;
    }
    if (b != C->recv_next || C->nfull >= IBP_SLOTS) {
        tp_fail_locked(L->t, L->peer, "wrote into channel %d buffer %d out of turn (a write without a credit)", c, b);
        return;
    }
    C->full[C->nfull++] = b;
    C->recv_next = (b + 1) % IBP_SLOTS;
    deliver(L, c);
}

static const char *kind_name(int kind) {
    return kind == WR_RECV ? "receive" : kind == WR_CREDIT ? "credit write" : "data write";
}

void ibp_on_wc(ibp_link *L, const ib_wc *wc) {
    int kind = wr_kind(wc->wr_id);
    if (kind != WR_RECV) L->sq_used--;
    if (failed(L)) return;
    if (wc->status != 0) {
        if (kind == WR_CREDIT || kind == WR_RECV) {
            /* A peer that finished closes while our last credits are on their way (its sends
             * complete once the data is in our buffers, before we copy it out): not an
             * error unless we still need it. Chunks already here can still be taken. */
            L->gone = true;
            check_gone(L, L->ops->status_str(wc->status));
            return;
        }
        tp_fail_locked(L->t, L->peer, "failed an RDMA %s on channel %d: %s", kind_name(kind), wr_chan(wc->wr_id),
                       L->ops->status_str(wc->status));
        return;
    }
    if (L->gone) return;
    if (kind == WR_DATA_LAST) chunk_confirmed(L, wr_chan(wc->wr_id), wr_buf(wc->wr_id));
    else if (kind == WR_RECV) got_imm(L, wc->imm);
}

void ibp_check_timeouts(ibp_link *L, double now) {
    for (int c = 0; c < WP_MAX_CHANNELS && !failed(L); c++)
        for (int b = 0; b < IBP_SLOTS; b++) {
            ibp_flight *f = &L->ch[c].flight[b];
            if (f->req && now - f->posted_at > L->cfg.timeout) {
                tp_fail_locked(L->t, L->peer, "did not confirm the RDMA write of %s (bytes %zu..%zu) within %g s",
                               f->req->label, f->offset, f->offset + f->len, L->cfg.timeout);
                return;
            }
        }
}
