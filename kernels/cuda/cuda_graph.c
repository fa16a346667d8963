/* CUDA backend: replays as CUDA graphs (replay.h). The context's stream is captured in thread-
 * local mode, so that the ring's transfer thread, which works on a sibling context's stream
 * meanwhile, neither joins the capture nor trips it; the graph is instantiated once per key and
 * launched on the same stream. cuBLAS runs in it on the workspace we gave it (it allocates
 * nothing then); scratch cannot grow inside a capture (cu_scratch), nor can anything sync. */
#include <stdio.h>

#include "cuda_impl.h"

static int graph_fail(char *why, size_t whylen, const char *call, cudaError_t e) {
    snprintf(why, whylen, "cuda: %s: %s", call, cudaGetErrorString(e));
    return -1;
}

int cu_graph_begin(wp_kern *k, char *why, size_t whylen) {
    wp_cuda *c = cu_ctx(k);
    if (!c) return -1;
    cudaError_t e = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeThreadLocal);
    return e == cudaSuccess ? 0 : graph_fail(why, whylen, "cudaStreamBeginCapture", e);
}

int cu_graph_end(wp_kern *k, void **graph, char *why, size_t whylen) {
    wp_cuda *c = k->impl;
    *graph = NULL;
    cudaGraph_t g = NULL;
    /* ends the capture whatever happened inside it (an invalidated capture returns an error) */
    cudaError_t e = cudaStreamEndCapture(c->stream, &g);
    (void)cudaGetLastError(); /* a capture error is the recording's, reported through why */
    if (e != cudaSuccess) {
        if (g) (void)cudaGraphDestroy(g);
        return graph_fail(why, whylen, "cudaStreamEndCapture", e);
    }
    if (!g) {
        snprintf(why, whylen, "cuda: cudaStreamEndCapture returned no graph");
        return -1;
    }
    cudaGraphExec_t x = NULL;
    e = cudaGraphInstantiateWithFlags(&x, g, 0);
    (void)cudaGraphDestroy(g); /* the executable graph keeps what it needs */
    if (e != cudaSuccess) {
        (void)cudaGetLastError();
        return graph_fail(why, whylen, "cudaGraphInstantiateWithFlags", e);
    }
    *graph = x;
    return 0;
}

void cu_graph_launch(wp_kern *k, void *graph) {
    wp_cuda *c = cu_ctx(k);
    if (!c) return;
    CU_CHECK(k, cudaGraphLaunch((cudaGraphExec_t)graph, c->stream));
}

/* Teardown has no one to report to: not checked. The stream is drained first, since a launch of
 * this graph may still be queued. */
void cu_graph_free(wp_kern *k, void *graph) {
    wp_cuda *c = k->impl;
    if (!graph) return;
    (void)cudaSetDevice(c->device);
    (void)cudaStreamSynchronize(c->stream);
    (void)cudaGraphExecDestroy((cudaGraphExec_t)graph);
}
