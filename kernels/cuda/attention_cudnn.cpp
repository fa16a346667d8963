// cuDNN's fused flash attention (attention_cudnn.h): one graph per direction, dtype and shape,
// built on first use (building is the slow part: tens of milliseconds) and kept for the
// context's life. Our layout goes to cuDNN as strides, no copies: a [b*s, heads*hd] row-major
// activation is the 4-d tensor [b, heads, s, hd] with strides [s*heads*hd, hd, heads*hd, 1].
#include "attention_cudnn.h"

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <new>
#include <string>
#include <tuple>
#include <unordered_map>

namespace fe = cudnn_frontend;

namespace {

enum Uid : int64_t { Q = 1, K, V, O, STATS, DO, DQ, DK, DV, SCALE };

// dtype, backward?, b, s, nh, nkv, hd
using Key = std::tuple<int, bool, int, int, int, int, int>;

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
};

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

extern "C" size_t cudnn_attn_workspace(const wp_cudnn_attn *a) { return a ? a->workspace_bytes : 0; }

extern "C" void cudnn_attn_destroy(wp_cudnn_attn *a) {
    if (!a) return;
    // teardown has no one to report to: results deliberately unchecked
    if (a->stream) (void)cudaStreamSynchronize(a->stream);
    if (a->workspace) (void)cudaFree(a->workspace);
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
    auto [dt, backward, b, s, nh, nkv, hd] = key;
    auto g = std::make_shared<fe::graph::Graph>();
    g->set_io_data_type(dt == WP_F16 ? fe::DataType_t::HALF : fe::DataType_t::BFLOAT16)
        .set_intermediate_data_type(fe::DataType_t::FLOAT)
        .set_compute_data_type(fe::DataType_t::FLOAT);
    auto tensor = [&](const char *name, Uid uid, int heads) {
        return g->tensor(fe::graph::Tensor_attributes().set_name(name).set_uid(uid).set_dim(dims(b, heads, s, hd))
                             .set_stride(strides(heads, s, hd)));
    };
    auto q = tensor("Q", Q, nh), k = tensor("K", K, nkv), v = tensor("V", V, nkv);
    auto scale = g->tensor(fe::graph::Tensor_attributes().set_name("scale").set_uid(SCALE).set_dim({1, 1, 1, 1})
                               .set_stride({1, 1, 1, 1}).set_is_pass_by_value(true)
                               .set_data_type(fe::DataType_t::FLOAT));
    std::vector<int64_t> stats_dim = {b, nh, s, 1}, stats_stride = {(int64_t)nh * s, s, 1, 1};
    if (!backward) {
        auto opts = fe::graph::SDPA_attributes().set_name("attention_fwd").set_generate_stats(true)
                        .set_causal_mask(true).set_attn_scale(scale);
        auto [o, stats] = g->sdpa(q, k, v, opts);
        o->set_output(true).set_uid(O).set_dim(dims(b, nh, s, hd)).set_stride(strides(nh, s, hd));
        stats->set_output(true).set_uid(STATS).set_data_type(fe::DataType_t::FLOAT).set_dim(stats_dim)
            .set_stride(stats_stride);
    } else {
        auto o = tensor("O", O, nh), dout = tensor("dO", DO, nh);
        auto stats = g->tensor(fe::graph::Tensor_attributes().set_name("stats").set_uid(STATS).set_dim(stats_dim)
                                   .set_stride(stats_stride).set_data_type(fe::DataType_t::FLOAT));
        // deterministic: our backward promises repeatable gradients (kernels.h), and so do runs
        auto opts = fe::graph::SDPA_backward_attributes().set_name("attention_bwd").set_causal_mask(true)
                        .set_attn_scale(scale).set_deterministic_algorithm(true);
        auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, dout, stats, opts);
        dq->set_output(true).set_uid(DQ).set_dim(dims(b, nh, s, hd)).set_stride(strides(nh, s, hd));
        dk->set_output(true).set_uid(DK).set_dim(dims(b, nkv, s, hd)).set_stride(strides(nkv, s, hd));
        dv->set_output(true).set_uid(DV).set_dim(dims(b, nkv, s, hd)).set_stride(strides(nkv, s, hd));
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
                (backward ? "the backward" : "the forward") + " at b=" + std::to_string(b) +
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

extern "C" int cudnn_attn_fwd(wp_cudnn_attn *a, wp_dtype t, void *o, float *lse, const void *q, const void *k,
                              const void *v, int b, int s, int nh, int nkv, int hd, char *why, size_t whylen) {
    if (t != WP_F16 && t != WP_BF16) return say(why, whylen, 1, "cuDNN's fused attention takes fp16 or bf16 only");
    float scale = 1.0f / std::sqrt((float)hd);
    std::unordered_map<int64_t, void *> pack = {{Q, const_cast<void *>(q)}, {K, const_cast<void *>(k)},
                                                {V, const_cast<void *>(v)}, {O, o}, {STATS, lse}, {SCALE, &scale}};
    return run(a, Key{(int)t, false, b, s, nh, nkv, hd}, pack, why, whylen);
}

extern "C" int cudnn_attn_bwd(wp_cudnn_attn *a, wp_dtype t, void *dq, void *dk, void *dv, const void *dout,
                              const void *q, const void *k, const void *v, const void *o, const float *lse, int b,
                              int s, int nh, int nkv, int hd, char *why, size_t whylen) {
    if (t != WP_F16 && t != WP_BF16) return say(why, whylen, 1, "cuDNN's fused attention takes fp16 or bf16 only");
    float scale = 1.0f / std::sqrt((float)hd);
    std::unordered_map<int64_t, void *> pack = {
        {Q, const_cast<void *>(q)},   {K, const_cast<void *>(k)},       {V, const_cast<void *>(v)},
        {O, const_cast<void *>(o)},   {DO, const_cast<void *>(dout)},   {STATS, const_cast<float *>(lse)},
        {DQ, dq},                     {DK, dk},                         {DV, dv},
        {SCALE, &scale}};
    return run(a, Key{(int)t, true, b, s, nh, nkv, hd}, pack, why, whylen);
}
