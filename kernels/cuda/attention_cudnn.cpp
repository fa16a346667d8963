// cuDNN's fused flash attention (attention_cudnn.h): one graph per direction, dtype and shape,
// built on first use (building is the slow part: tens of milliseconds) and kept for the
// context's life. Our layout goes to cuDNN as strides, no copies: a [b*s, heads*hd] row-major
// activation is the 4-d tensor [b, heads, s, hd] with strides [s*heads*hd, hd, heads*hd, 1].
//
// Document masks go to cuDNN as ragged (THD) sequences: each document of the micro-batch is one
// sequence of a batch of documents, found in memory by ragged offsets (its first token times the
// row width), with its length in seq_len_q/kv (padding mask) and causal inside. The tokens are
// already packed documents, so no copy either. The graph's batch and longest sequence are
// rounded up to powers of two (the padding sequences have length 0), so a graph serves every
// micro-batch whose documents fit, and the lengths and offsets are tensors, not graph
// constants. cuDNN writes a ragged softmax stats tensor token-major ([tokens, heads]).
#include "attention_cudnn.h"

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <tuple>
#include <unordered_map>
#include <vector>

namespace fe = cudnn_frontend;

namespace {

enum Uid : int64_t { Q = 1, K, V, O, STATS, DO, DQ, DK, DV, SCALE, SEQ_LEN, SEQ_LEN_KV, OFF_QO, OFF_KV, OFF_STATS };

// dtype, backward?, deterministic? (backward only; true for the forward), b, s, nh, nkv, hd,
// tokens: 0 for whole sequences; with documents b and s
// are the padded batch of documents and the longest one, tokens the micro-batch's b*s
using Key = std::tuple<int, bool, bool, int, int, int, int, int, int64_t>;

// The documents of one registered qlo (cudnn_attn_docs): host lengths and first tokens, and
// per head shape the device tensors the ragged graphs read.
struct Ragged {
    int32_t *len = nullptr;                        // [nb] int32
    int64_t *off_qo = nullptr, *off_kv = nullptr;  // [nb + 1] elements of Q/O and K/V rows (one block)
    int64_t *off_stats = nullptr;                  // [nb + 1] elements of the token-major stats (the same)
};
struct Docs {
    int b = 0, s = 0;             // the shape it was registered with
    std::string why;              // non-empty: not documents cuDNN can take (why)
    std::vector<int32_t> start;   // first token of each document in the packed b*s tokens
    int maxlen = 0, nb = 0, smax = 0; // longest document; graph batch and sequence (padded)
    uint64_t serial = 0;          // registration order, for eviction
    std::map<std::tuple<int, int, int>, Ragged> dev; // by (nh, nkv, hd)
};

struct Entry {
    std::shared_ptr<fe::graph::Graph> graph; // null: cuDNN has no plan (why holds its reason)
    std::string why;
};

std::vector<int64_t> dims(int64_t b, int64_t heads, int64_t s, int64_t hd) { return {b, heads, s, hd}; }
std::vector<int64_t> strides(int64_t heads, int64_t s, int64_t hd) { return {s * heads * hd, hd, heads * hd, 1}; }

} // namespace

struct wp_cudnn_attn {
    cudnnHandle_t handle = nullptr;
    cudaStream_t stream = nullptr;
    void *workspace = nullptr;
    size_t workspace_bytes = 0;
    std::map<Key, Entry> graphs;
    std::map<const int32_t *, Docs> docs; // by the qlo buffer they describe
    uint64_t serial = 0;
    size_t docs_bytes = 0; // device memory of the docs' tensors
};

// Enough registered buffers for every micro-batch a pipeline keeps in flight; the oldest goes
// first (a qlo evicted and used again is refused, and our kernels run it).
static const size_t MAX_DOCS = 256;

static int say(char *why, size_t whylen, int rc, const std::string &msg) {
    if (whylen) std::snprintf(why, whylen, "%s", msg.c_str());
    return rc;
}

extern "C" const char *cudnn_attn_version(void) {
    static char v[32];
    size_t n = cudnnGetVersion(); // 91900 for 9.19.0
    std::snprintf(v, sizeof v, "%zu.%zu.%zu", n / 10000, n / 100 % 100, n % 100);
    return v;
}

extern "C" wp_cudnn_attn *cudnn_attn_create(cudaStream_t stream, char *why, size_t whylen) {
    wp_cudnn_attn *a = new (std::nothrow) wp_cudnn_attn;
    if (!a) {
        say(why, whylen, -1, "cudnn: out of host memory");
        return nullptr;
    }
    cudnnStatus_t st = cudnnCreate(&a->handle);
    if (st == CUDNN_STATUS_SUCCESS) st = cudnnSetStream(a->handle, stream);
    if (st != CUDNN_STATUS_SUCCESS) {
        say(why, whylen, -1, std::string("cudnn: cudnnCreate failed: ") + cudnnGetErrorString(st));
        if (a->handle) (void)cudnnDestroy(a->handle);
        delete a;
        return nullptr;
    }
    a->stream = stream;
    return a;
}

extern "C" size_t cudnn_attn_workspace(const wp_cudnn_attn *a) { return a ? a->workspace_bytes + a->docs_bytes : 0; }

static void free_ragged(wp_cudnn_attn *a, Docs &d) {
    // stream-ordered: attention calls queued before still read them; teardown unchecked
    for (auto &kv : d.dev) {
        Ragged &r = kv.second;
        (void)cudaFreeAsync(r.len, a->stream);
        (void)cudaFreeAsync(r.off_qo, a->stream); // off_kv and off_stats lie in the same block
        a->docs_bytes -= (size_t)d.nb * sizeof(int32_t) + 3 * ((size_t)d.nb + 1) * sizeof(int64_t);
    }
    d.dev.clear();
}

extern "C" void cudnn_attn_destroy(wp_cudnn_attn *a) {
    if (!a) return;
    // teardown has no one to report to: results deliberately unchecked
    if (a->stream) (void)cudaStreamSynchronize(a->stream);
    if (a->workspace) (void)cudaFree(a->workspace);
    for (auto &kv : a->docs) free_ragged(a, kv.second);
    if (a->stream) (void)cudaStreamSynchronize(a->stream);
    a->docs.clear();
    a->graphs.clear();
    if (a->handle) (void)cudnnDestroy(a->handle);
    delete a;
}

// The graph for key, built now if new. 0: ready; 1: no plan (cached, e.why); -1: failure.
static int graph_for(wp_cudnn_attn *a, const Key &key, Entry **out, char *why, size_t whylen) {
    auto it = a->graphs.find(key);
    if (it != a->graphs.end()) {
        *out = &it->second;
        return it->second.graph ? 0 : say(why, whylen, 1, it->second.why);
    }
    auto [dt, backward, deterministic, b, s, nh, nkv, hd, tokens] = key;
    const bool ragged = tokens > 0;
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(dt == WP_F16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto index = [&](const char *name, Uid uid, int64_t n, fe::DataType_t t) {
        return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim({n, 1, 1, 1})
                             .set_stride({1, 1, 1, 1}).set_data_type(t));
    };
    std::shared_ptr<fe::graph::Tensor_attributes> off_qo, off_kv, off_stats, len_q, len_kv;
    if (ragged) {
        off_qo = index("offsets_qo", OFF_QO, (int64_t)b + 1, fe::DataType_t::INT64);
        off_kv = index("offsets_kv", OFF_KV, (int64_t)b + 1, fe::DataType_t::INT64);
        off_stats = index("offsets_stats", OFF_STATS, (int64_t)b + 1, fe::DataType_t::INT64);
        len_q = index("seq_len_q", SEQ_LEN, b, fe::DataType_t::INT32);
        len_kv = index("seq_len_kv", SEQ_LEN_KV, b, fe::DataType_t::INT32);
    }
    // a row tensor: with documents, found through its offsets (its batch stride is unused)
    auto row = [&](std::shared_ptr<fe::graph::Tensor_attributes> t, int heads) {
        t->set_dim(dims(b, heads, s, hd)).set_stride(strides(heads, s, hd));
        if (ragged) t->set_ragged_offset(heads == nh ? off_qo : off_kv);
        return t;
    };
    auto tensor = [&](const char *name, Uid uid, int heads) {
        return row(g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid)), heads);
    };
    auto q = tensor("Q", Q, nh), k = tensor("K", K, nkv), v = tensor("V", V, nkv);
    auto scale = g->tensor(fe::graph::Tensor_attributes().set_name("scale").set_uid(SCALE).set_dim({1, 1, 1, 1})
                               .set_stride({1, 1, 1, 1}).set_is_pass_by_value(true)
                               .set_data_type(fe::DataType_t::FLOAT));
    // whole sequences: our lse layout [b, nh, s]; documents: cuDNN's ragged stats, token-major
    std::vector<int64_t> stats_dim = {b, nh, s, 1};
    std::vector<int64_t> stats_stride = ragged ? std::vector<int64_t>{(int64_t)nh * s, 1, nh, 1}
                                               : std::vector<int64_t>{(int64_t)nh * s, s, 1, 1};
    auto stats_layout = [&](std::shared_ptr<fe::graph::Tensor_attributes> t) {
        t->set_data_type(fe::DataType_t::FLOAT).set_dim(stats_dim).set_stride(stats_stride);
        if (ragged) t->set_ragged_offset(off_stats);
    };
    if (!backward) {
        auto opts = fe::graph::SDPA_attributes().set_name("attention_fwd").set_generate_stats(true)
                        .set_causal_mask(true).set_attn_scale(scale);
        if (ragged)
            opts.set_padding_mask(true).set_seq_len_q(len_q).set_seq_len_kv(len_kv).set_max_total_seq_len_q(tokens)
                .set_max_total_seq_len_kv(tokens);
        auto [o, stats] = g->sdpa(q, k, v, opts);
        row(o, nh)->set_output(true).set_uid(O);
        stats->set_output(true).set_uid(STATS);
        stats_layout(stats);
    } else {
        auto o = tensor("O", O, nh), dout = tensor("dO", DO, nh);
        auto stats = g->tensor(fe::graph::Tensor_attributes().set_name("stats").set_uid(STATS));
        stats_layout(stats);
        // deterministic unless --deterministic false: runs promise repeatable gradients by default;
        // the other algorithm sums dK/dV across query tiles in whatever order they finish
        auto opts = fe::graph::SDPA_backward_attributes().set_name("attention_bwd").set_causal_mask(true)
                        .set_attn_scale(scale).set_deterministic_algorithm(deterministic);
        if (ragged)
            opts.set_padding_mask(true).set_seq_len_q(len_q).set_seq_len_kv(len_kv).set_max_total_seq_len_q(tokens)
                .set_max_total_seq_len_kv(tokens);
        auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, stats, opts);
        row(dq, nh)->set_output(true).set_uid(DQ);
        row(dk, nkv)->set_output(true).set_uid(DK);
        row(dv, nkv)->set_output(true).set_uid(DV);
    }
    Entry e;
    fe::error_t st = g->validate();
    if (st.is_good()) st = g->build_operation_graph(a->handle);
    if (st.is_good()) st = g->create_execution_plans({fe::HeurMode_t::A});
    if (st.is_good()) st = g->check_support(a->handle);
    if (st.is_good()) st = g->build_plans(a->handle);
    if (st.is_good()) {
        e.graph = g;
    } else {
        // cuDNN says "not supported" in its own words; every build failure is a fallback case
        e.why = "cuDNN " + std::string(cudnn_attn_version()) + " has no fused attention plan for " +
                (backward ? "the backward" : "the forward") +
                (ragged ? " over ragged documents (--doc-mask; cuDNN 9 with ragged offsets on sm_90+, or sm_80+ "
                          "from 9.18.1) at " + std::to_string(b) + " documents of up to"
                        : std::string(" at b=") + std::to_string(b)) +
                " s=" + std::to_string(s) + " heads=" + std::to_string(nh) + "/" + std::to_string(nkv) +
                " hd=" + std::to_string(hd) + ": " + st.get_message();
    }
    auto ins = a->graphs.emplace(key, std::move(e));
    *out = &ins.first->second;
    return (*out)->graph ? 0 : say(why, whylen, 1, (*out)->why);
}

static int run(wp_cudnn_attn *a, const Key &key, std::unordered_map<int64_t, void *> &pack, char *why,
               size_t whylen) {
    try {
        Entry *e = nullptr;
        int rc = graph_for(a, key, &e, why, whylen);
        if (rc) return rc;
        int64_t need = 0;
        fe::error_t st = e->graph->get_workspace_size(need);
        if (!st.is_good()) return say(why, whylen, -1, "cudnn: get_workspace_size: " + st.get_message());
        if ((size_t)need > a->workspace_bytes) {
            // not inside a CUDA graph's capture (kernels/replay.h): the stream-ordered malloc would
            // be the graph's own, gone with a recording thrown away; the span then runs eagerly
            cudaStreamCaptureStatus cap = cudaStreamCaptureStatusNone;
            if (cudaStreamIsCapturing(a->stream, &cap) == cudaSuccess && cap != cudaStreamCaptureStatusNone)
                return say(why, whylen, -1, "cudnn workspace: would grow inside a CUDA graph's capture");
            // stream-ordered, as the backend's scratch: queued work finishes with the old buffer
            if (a->workspace && cudaFreeAsync(a->workspace, a->stream) != cudaSuccess)
                return say(why, whylen, -1, "cudnn workspace: cudaFreeAsync failed");
            a->workspace = nullptr;
            a->workspace_bytes = 0;
            cudaError_t ce = cudaMallocAsync(&a->workspace, (size_t)need, a->stream);
            if (ce != cudaSuccess)
                return say(why, whylen, -1, std::string("cudnn workspace: cudaMallocAsync: ") + cudaGetErrorString(ce));
            a->workspace_bytes = (size_t)need;
        }
        st = e->graph->execute(a->handle, pack, a->workspace);
        if (!st.is_good()) return say(why, whylen, -1, "cudnn: execute: " + st.get_message());
        cudaError_t ce = cudaGetLastError();
        if (ce != cudaSuccess) return say(why, whylen, -1, std::string("cudnn: launch: ") + cudaGetErrorString(ce));
        return 0;
    } catch (const std::exception &ex) {
        return say(why, whylen, -1, std::string("cudnn: ") + ex.what());
    }
}

static int pow2_at_least(int n) {
    int p = 1;
    while (p < n) p *= 2;
    return p;
}

extern "C" int cudnn_attn_docs(wp_cudnn_attn *a, const int32_t *qlo, const int32_t *lo, int b, int s, char *why,
                               size_t whylen) {
    try {
        auto it = a->docs.find(qlo);
        if (it == a->docs.end()) {
            if (a->docs.size() >= MAX_DOCS) {
                auto old = a->docs.begin();
                for (auto j = a->docs.begin(); j != a->docs.end(); ++j)
                    if (j->second.serial < old->second.serial) old = j;
                free_ragged(a, old->second);
                a->docs.erase(old);
            }
            it = a->docs.emplace(qlo, Docs()).first;
        }
        Docs &d = it->second;
        free_ragged(a, d); // stream-ordered: calls queued before still read the old layout
        d.b = b, d.s = s, d.why.clear(), d.start.clear(), d.maxlen = 0, d.serial = ++a->serial;
        // each query sees from its document's first token (lo == t starts one) or from its
        // predecessor's; a sequence starts with one. Anything else (a Seq1F1B segment that
        // continues a document, a window) is no set of whole documents.
        for (int bi = 0; bi < b && d.why.empty(); bi++)
            for (int t = 0; t < s; t++) {
                size_t at = (size_t)bi * s + t;
                int32_t v = lo[at];
                if (v == t) {
                    d.start.push_back((int32_t)at);
                } else if (t == 0 || v != lo[at - 1]) {
                    d.why = "document masks that are not whole documents from the sequence's start (a Seq1F1B "
                            "segment that continues one)";
                    break;
                }
            }
        if (!d.why.empty()) return 0;
        const size_t n = d.start.size(), T = (size_t)b * s;
        for (size_t i = 0; i < n; i++)
            d.maxlen = std::max(d.maxlen, (int)((i + 1 < n ? (size_t)d.start[i + 1] : T) - d.start[i]));
        d.nb = pow2_at_least((int)n);
        d.smax = std::min(pow2_at_least(d.maxlen), s);
        return 0;
    } catch (const std::exception &ex) {
        return say(why, whylen, -1, std::string("cudnn documents: ") + ex.what());
    }
}

// The documents' device tensors for this head shape, uploaded now if new. 0; 1 (why: not
// registered, or not documents); -1 on a failure.
static int ragged_for(wp_cudnn_attn *a, const int32_t *qlo, int b, int s, int nh, int nkv, int hd, Docs **dout,
                      Ragged **out, char *why, size_t whylen) {
    auto it = a->docs.find(qlo);
    if (it == a->docs.end() || it->second.b != b || it->second.s != s)
        return say(why, whylen, 1, "document masks whose documents were not handed to the backend "
                                   "(kern_attention_docs) for this shape");
    Docs &d = it->second;
    if (!d.why.empty()) return say(why, whylen, 1, d.why);
    *dout = &d;
    auto key = std::make_tuple(nh, nkv, hd);
    auto r = d.dev.find(key);
    if (r != d.dev.end()) {
        *out = &r->second;
        return 0;
    }
    // padding documents have length 0 and start at the end of the tokens
    const size_t n = d.start.size(), nb = (size_t)d.nb, T = (size_t)b * s;
    std::vector<int32_t> len(nb, 0);
    std::vector<int64_t> off(3 * (nb + 1));
    for (size_t i = 0; i <= nb; i++) {
        int64_t tok = i < n ? d.start[i] : (int64_t)T;
        if (i < n) len[i] = (int32_t)((i + 1 < n ? (size_t)d.start[i + 1] : T) - d.start[i]);
        off[i] = tok * nh * hd;
        off[nb + 1 + i] = tok * nkv * hd;
        off[2 * (nb + 1) + i] = tok * nh;
    }
    Ragged g;
    size_t lb = nb * sizeof(int32_t), ob = (nb + 1) * sizeof(int64_t);
    cudaError_t ce = cudaMallocAsync((void **)&g.len, lb, a->stream);
    if (ce == cudaSuccess) ce = cudaMallocAsync((void **)&g.off_qo, 3 * ob, a->stream);
    if (ce != cudaSuccess) {
        if (g.len) (void)cudaFreeAsync(g.len, a->stream);
        return say(why, whylen, -1, std::string("cudnn documents: cudaMallocAsync: ") + cudaGetErrorString(ce));
    }
    g.off_kv = g.off_qo + nb + 1;
    g.off_stats = g.off_qo + 2 * (nb + 1);
    // from pageable memory an async copy stages the source before it returns: the vectors may go
    ce = cudaMemcpyAsync(g.len, len.data(), lb, cudaMemcpyHostToDevice, a->stream);
    if (ce == cudaSuccess) ce = cudaMemcpyAsync(g.off_qo, off.data(), 3 * ob, cudaMemcpyHostToDevice, a->stream);
    if (ce != cudaSuccess) {
        (void)cudaFreeAsync(g.len, a->stream);
        (void)cudaFreeAsync(g.off_qo, a->stream);
        return say(why, whylen, -1, std::string("cudnn documents: cudaMemcpyAsync: ") + cudaGetErrorString(ce));
    }
    a->docs_bytes += lb + 3 * ob;
    *out = &d.dev.emplace(key, g).first->second;
    return 0;
}

// Whole sequences (qlo NULL), or qlo's registered documents as cuDNN's ragged sequences: the
// lengths and offsets join the pack and the graph is keyed on the padded batch of documents.
static int run_docs(wp_cudnn_attn *a, wp_dtype t, bool backward, bool deterministic, const int32_t *qlo, int b, int s,
                    int nh, int nkv, int hd, std::unordered_map<int64_t, void *> &pack, char *why, size_t whylen) {
    if (!qlo) return run(a, Key{(int)t, backward, deterministic, b, s, nh, nkv, hd, 0}, pack, why, whylen);
    try {
        Docs *d = nullptr;
        Ragged *r = nullptr;
        int rc = ragged_for(a, qlo, b, s, nh, nkv, hd, &d, &r, why, whylen);
        if (rc) return rc;
        pack.insert({{SEQ_LEN, r->len}, {SEQ_LEN_KV, r->len}, {OFF_QO, r->off_qo}, {OFF_KV, r->off_kv},
                     {OFF_STATS, r->off_stats}});
        return run(a, Key{(int)t, backward, deterministic, d->nb, d->smax, nh, nkv, hd, (int64_t)b * s}, pack, why,
                   whylen);
    } catch (const std::exception &ex) {
        return say(why, whylen, -1, std::string("cudnn: ") + ex.what());
    }
}

extern "C" int cudnn_attn_fwd(wp_cudnn_attn *a, wp_dtype t, void *o, float *lse, const void *q, const void *k,
                              const void *v, const int32_t *qlo, int b, int s, int nh, int nkv, int hd, char *why,
                              size_t whylen) {
    if (t != WP_F16 && t != WP_BF16) return say(why, whylen, 1, "cuDNN's fused attention takes fp16 or bf16 only");
    float scale = 1.0f / std::sqrt((float)hd);
    std::unordered_map<int64_t, void *> pack = {{Q, const_cast<void *>(q)}, {K, const_cast<void *>(k)},
                                                {V, const_cast<void *>(v)}, {O, o}, {STATS, lse}, {SCALE, &scale}};
    return run_docs(a, t, false, true, qlo, b, s, nh, nkv, hd, pack, why, whylen);
}

extern "C" int cudnn_attn_bwd(wp_cudnn_attn *a, wp_dtype t, bool deterministic, void *dq, void *dk, void *dv, const void *dout,
                              const void *q, const void *k, const void *v, const void *o, const float *lse,
                              const int32_t *qlo, int b, int s, int nh, int nkv, int hd, char *why, size_t whylen) {
    if (t != WP_F16 && t != WP_BF16) return say(why, whylen, 1, "cuDNN's fused attention takes fp16 or bf16 only");
    float scale = 1.0f / std::sqrt((float)hd);
    std::unordered_map<int64_t, void *> pack = {
        {Q, const_cast<void *>(q)},   {K, const_cast<void *>(k)},       {V, const_cast<void *>(v)},
        {O, const_cast<void *>(o)},   {DO, const_cast<void *>(dout)},   {STATS, const_cast<float *>(lse)},
        {DQ, dq},                     {DK, dk},                         {DV, dv},
        {SCALE, &scale}};
    return run_docs(a, t, true, deterministic, qlo, b, s, nh, nkv, hd, pack, why, whylen);
}
