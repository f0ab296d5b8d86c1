/* Fakes graphs: built by capture or node by node, instantiated, updated, launched. */
#include "fake_cuda_internal.h"

/* ---- graphs ----------------------------------------------------------------------------
 * Built by capture (a chain) or by the cuGraphAdd*Node entries (kernel nodes of kernels whose
 * parameters are all 8 bytes, 1D or pitched memcpy, 4-byte memset, host, empty, child graph,
 * event record nodes), each with its dependencies. cuGraphInstantiateWithFlags copies the
 * graph (child graphs too), so later changes to the template do not reach the executable
 * graph; cuGraphExecKernelNodeSetParams_v2 and cuGraphExecUpdate_v2 change the executable
 * graph only. cuGraphLaunch runs the nodes in a topological order, at once;
 * fake_cuda_graph_launches() counts the launches that ran. A graph instantiated with
 * CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH (4) launches from the host as any other.
 * A captured launch by a library kernel's handle (fake_inject.c) becomes a node holding the
 * context's function of that kernel, the kernel in `kern` of cuGraphKernelNodeGetParams_v2
 * (fake_cuda_node_params_kern(0): left null, as a driver that does not fill it). */

static int graph_launches;

int fake_cuda_graph_launches(void) {
    return __atomic_load_n(&graph_launches, __ATOMIC_SEQ_CST);
}

/* Whether cuGraphKernelNodeGetParams_v2 fills `kern` (default 1; 0 as a driver that leaves it
 * null). */
static int node_params_kern = 1;

void fake_cuda_node_params_kern(int on) {
    __atomic_store_n(&node_params_kern, on, __ATOMIC_SEQ_CST);
}

CUresult cuGraphCreate(void** g, unsigned flags) {
    (void)flags;
    *g = calloc(1, sizeof(struct graph));
    return OK;
}

static CUresult add_node_to(void** out, struct graph* g, void** deps, size_t ndeps, int type,
                            struct node** made) {
    if (!g || g->n >= MAX_NODES || ndeps > MAX_DEPS) {
        return E_INVALID_VALUE;
    }
    struct node* n = calloc(1, sizeof *n);
    n->type = type;
    n->ndeps = (int)ndeps;
    for (size_t i = 0; i < ndeps; ++i) {
        n->deps[i] = deps[i];
    }
    g->nodes[g->n++] = n;
    *out = n;
    *made = n;
    return OK;
}

static void set_kernel(struct node* n, const FakeKernelNodeParams* p) {
    n->f = p->func;
    n->kern = p->kern;
    n->gx = p->gx;
    n->bx = p->bx;
    n->nparams = (int)param_count(((struct function*)p->func)->name);
    for (int i = 0; i < n->nparams && i < 8; ++i) {
        n->vals[i] = *(u64*)p->kernelParams[i];
    }
}

CUresult cuGraphAddKernelNode_v2(void** out, void* g, void** deps, size_t nd,
                                 const FakeKernelNodeParams* p) {
    struct node* n;
    CUresult r = add_node_to(out, g, deps, nd, NT_KERNEL, &n);
    if (r == OK) {
        set_kernel(n, p);
    }
    return r;
}

u64 src_of(const FakeMemcpy3D* c) {
    return c->srcMemoryType == 1 ? (u64)(uintptr_t)c->srcHost : c->srcDevice;
}

u64 dst_of(const FakeMemcpy3D* c) {
    return c->dstMemoryType == 1 ? (u64)(uintptr_t)c->dstHost : c->dstDevice;
}

CUresult cuGraphAddMemcpyNode(void** out, void* g, void** deps, size_t nd, const FakeMemcpy3D* c,
                              void* ctx) {
    (void)ctx;
    if (c->Height > 1 || c->Depth > 1 || c->srcXInBytes || c->dstXInBytes) {
        return E_INVALID_VALUE; /* 1D only */
    }
    struct node* n;
    CUresult r = add_node_to(out, g, deps, nd, NT_MEMCPY, &n);
    if (r == OK) {
        n->is_copy = 1;
        n->src = src_of(c);
        n->dst = dst_of(c);
        n->n = c->WidthInBytes;
    }
    return r;
}

CUresult cuGraphAddMemsetNode(void** out, void* g, void** deps, size_t nd,
                              const FakeMemsetParams* p, void* ctx) {
    (void)ctx;
    if (p->elementSize != 4 || p->height != 1) {
        return E_INVALID_VALUE;
    }
    struct node* n;
    CUresult r = add_node_to(out, g, deps, nd, NT_MEMSET, &n);
    if (r == OK) {
        n->dst = p->dst;
        n->n = p->width;
        n->mvalue = p->value;
        n->esize = 4;
    }
    return r;
}

CUresult cuGraphAddHostNode(void** out, void* g, void** deps, size_t nd, const FakeHostParams* p) {
    struct node* n;
    CUresult r = add_node_to(out, g, deps, nd, NT_HOST, &n);
    if (r == OK) {
        n->host_fn = p->fn;
        n->host_data = p->userData;
    }
    return r;
}

CUresult cuGraphAddEmptyNode(void** out, void* g, void** deps, size_t nd) {
    struct node* n;
    return add_node_to(out, g, deps, nd, NT_EMPTY, &n);
}

CUresult cuGraphAddEventRecordNode(void** out, void* g, void** deps, size_t nd, void* ev) {
    struct node* n;
    CUresult r = add_node_to(out, g, deps, nd, NT_EVENT_RECORD, &n);
    if (r == OK) {
        n->event = ev;
    }
    return r;
}

/* A node type the interception cannot unroll (what a conditional node is to it). */
CUresult fake_cuda_add_conditional_node(void** out, void* g, void** deps, size_t nd) {
    struct node* n;
    return add_node_to(out, g, deps, nd, NT_CONDITIONAL, &n);
}

static struct graph* clone_graph(const struct graph* g, int exec);

CUresult cuGraphAddChildGraphNode(void** out, void* g, void** deps, size_t nd, void* child) {
    if (!child) {
        return E_INVALID_VALUE;
    }
    struct node* n;
    CUresult r = add_node_to(out, g, deps, nd, NT_GRAPH, &n);
    if (r == OK) {
        n->child = clone_graph(child, 0); /* the driver clones the child graph */
    }
    return r;
}

static struct graph* clone_graph(const struct graph* g, int exec) {
    struct graph* c = calloc(1, sizeof *c);
    c->n = g->n;
    for (int i = 0; i < g->n; ++i) {
        c->nodes[i] = malloc(sizeof(struct node));
        *c->nodes[i] = *g->nodes[i];
        c->nodes[i]->origin = exec ? g->nodes[i] : NULL;
        if (g->nodes[i]->child) {
            c->nodes[i]->child = clone_graph(g->nodes[i]->child, exec);
        }
    }
    for (int i = 0; i < c->n; ++i) {
        for (int d = 0; d < c->nodes[i]->ndeps; ++d) {
            for (int j = 0; j < g->n; ++j) {
                if (c->nodes[i]->deps[d] == g->nodes[j]) {
                    c->nodes[i]->deps[d] = c->nodes[j];
                }
            }
        }
    }
    return c;
}

CUresult cuGraphGetNodes(void* g, void** nodes, size_t* count) {
    struct graph* gr = g;
    if (!nodes) {
        *count = (size_t)gr->n;
        return OK;
    }
    size_t n = *count < (size_t)gr->n ? *count : (size_t)gr->n;
    for (size_t i = 0; i < n; ++i) {
        nodes[i] = gr->nodes[i];
    }
    *count = n;
    return OK;
}

CUresult cuGraphNodeGetType(void* n, int* type) {
    *type = ((struct node*)n)->type;
    return OK;
}

CUresult cuGraphNodeGetDependencies(void* n, void** deps, size_t* count) {
    struct node* nd = n;
    if (!deps) {
        *count = (size_t)nd->ndeps;
        return OK;
    }
    size_t k = *count < (size_t)nd->ndeps ? *count : (size_t)nd->ndeps;
    for (size_t i = 0; i < k; ++i) {
        deps[i] = nd->deps[i];
    }
    *count = k;
    return OK;
}

CUresult cuGraphKernelNodeGetParams_v2(void* n, FakeKernelNodeParams* p) {
    struct node* nd = n;
    if (nd->type != NT_KERNEL) {
        return E_INVALID_VALUE;
    }
    /* The driver's own copy of the arguments, valid while the node is unchanged. */
    static __thread void* ptrs[8];
    memset(p, 0, sizeof *p);
    for (int i = 0; i < 8; ++i) {
        ptrs[i] = &nd->vals[i];
    }
    p->func = nd->f;
    p->kern = __atomic_load_n(&node_params_kern, __ATOMIC_SEQ_CST) ? nd->kern : NULL;
    p->gx = nd->gx;
    p->gy = p->gz = p->by = p->bz = 1;
    p->bx = nd->bx;
    p->kernelParams = ptrs;
    return OK;
}

CUresult cuGraphMemcpyNodeGetParams(void* n, FakeMemcpy3D* c) {
    struct node* nd = n;
    if (nd->type != NT_MEMCPY) {
        return E_INVALID_VALUE;
    }
    memset(c, 0, sizeof *c);
    c->srcMemoryType = 4;
    c->dstMemoryType = 4;
    c->srcDevice = nd->src;
    c->dstDevice = nd->dst;
    c->WidthInBytes = nd->n;
    c->Height = 1;
    c->Depth = 1;
    return OK;
}

CUresult cuGraphMemsetNodeGetParams(void* n, FakeMemsetParams* p) {
    struct node* nd = n;
    if (nd->type != NT_MEMSET) {
        return E_INVALID_VALUE;
    }
    p->dst = nd->dst;
    p->pitch = 0;
    p->value = nd->mvalue;
    p->elementSize = nd->esize;
    p->width = nd->n;
    p->height = 1;
    return OK;
}

CUresult cuGraphHostNodeGetParams(void* n, FakeHostParams* p) {
    struct node* nd = n;
    if (nd->type != NT_HOST) {
        return E_INVALID_VALUE;
    }
    p->fn = nd->host_fn;
    p->userData = nd->host_data;
    return OK;
}

CUresult cuGraphChildGraphNodeGetGraph(void* n, void** g) {
    struct node* nd = n;
    if (nd->type != NT_GRAPH) {
        return E_INVALID_VALUE;
    }
    *g = nd->child;
    return OK;
}

CUresult cuGraphEventRecordNodeGetEvent(void* n, void** ev) {
    *ev = ((struct node*)n)->event;
    return OK;
}

CUresult cuGraphInstantiateWithFlags(void** exec, void* graph, u64 flags) {
    if (!graph) {
        return E_INVALID_VALUE;
    }
    struct graph* e = clone_graph(graph, 1);
    e->flags = flags;
    *exec = e;
    return OK;
}

static struct node* exec_node(struct graph* e, void* template_node) {
    for (int i = 0; i < e->n; ++i) {
        if (e->nodes[i]->origin == template_node) {
            return e->nodes[i];
        }
    }
    return NULL;
}

CUresult cuGraphExecKernelNodeSetParams_v2(void* exec, void* node, const FakeKernelNodeParams* p) {
    struct node* n = exec_node(exec, node);
    if (!n || n->type != NT_KERNEL) {
        return E_INVALID_VALUE;
    }
    set_kernel(n, p);
    return OK;
}

CUresult cuGraphNodeSetEnabled(void* exec, void* node, unsigned on) {
    struct node* n = exec_node(exec, node);
    if (!n) {
        return E_INVALID_VALUE;
    }
    n->disabled = !on;
    return OK;
}

/* The parameters of every node of `g` into the executable graph `e` (same topology). */
CUresult cuGraphExecUpdate_v2(void* exec, void* graph, void* info) {
    (void)info;
    struct graph* e = exec;
    struct graph* g = graph;
    if (e->n != g->n) {
        return E_INVALID_VALUE; /* CUDA_ERROR_GRAPH_EXEC_UPDATE_FAILURE in the real driver */
    }
    for (int i = 0; i < g->n; ++i) {
        if (g->nodes[i]->type != e->nodes[i]->type) {
            return E_INVALID_VALUE;
        }
    }
    for (int i = 0; i < g->n; ++i) {
        struct node* d = e->nodes[i];
        struct node* s = g->nodes[i];
        struct node* origin = d->origin;
        struct node* deps[MAX_DEPS];
        int ndeps = d->ndeps;
        memcpy(deps, d->deps, sizeof deps);
        struct graph* child = d->child;
        *d = *s;
        d->origin = origin;
        d->ndeps = ndeps;
        memcpy(d->deps, deps, sizeof deps);
        d->child = s->child ? clone_graph(s->child, 1) : child;
    }
    return OK;
}

static CUresult run_graph(struct graph* g, void* s) {
    int done[MAX_NODES] = {0};
    int left = g->n;
    while (left > 0) {
        int progressed = 0;
        for (int i = 0; i < g->n; ++i) {
            if (done[i]) {
                continue;
            }
            struct node* nd = g->nodes[i];
            int ready = 1;
            for (int d = 0; d < nd->ndeps; ++d) {
                for (int j = 0; j < g->n; ++j) {
                    if (g->nodes[j] == nd->deps[d] && !done[j]) {
                        ready = 0;
                    }
                }
            }
            if (!ready) {
                continue;
            }
            done[i] = 1;
            left--;
            progressed = 1;
            if (nd->disabled) {
                continue;
            }
            CUresult r = OK;
            switch (nd->type) {
            case NT_KERNEL: {
                void* params[8];
                for (int j = 0; j < 8; ++j) {
                    params[j] = &nd->vals[j];
                }
                r = run_kernel(nd->f, nd->gx, nd->bx, s, params);
                break;
            }
            case NT_MEMCPY:
                memmove((void*)(uintptr_t)nd->dst, (const void*)(uintptr_t)nd->src, nd->n);
                break;
            case NT_MEMSET:
                for (u64 k = 0; k < nd->n; ++k) {
                    ((unsigned*)(uintptr_t)nd->dst)[k] = nd->mvalue;
                }
                break;
            case NT_HOST:
                nd->host_fn(nd->host_data);
                break;
            case NT_GRAPH:
                r = run_graph(nd->child, s);
                break;
            case NT_EVENT_RECORD:
                r = cuEventRecord(nd->event, s);
                break;
            default:
                break;
            }
            if (r != OK) {
                return r;
            }
        }
        if (!progressed) {
            return E_INVALID_VALUE; /* a cycle */
        }
    }
    return OK;
}

CUresult cuGraphLaunch(void* exec, void* s) {
    struct graph* g = exec;
    CUresult r = submit_to(S(s));
    if (r != OK) {
        return r == CAPTURED ? E_CAPTURE_UNSUPPORTED : r;
    }
    r = run_graph(g, s);
    if (r == OK) {
        __atomic_add_fetch(&graph_launches, 1, __ATOMIC_SEQ_CST);
    }
    return r;
}

CUresult cuGraphExecDestroy(void* exec) {
    (void)exec; /* leaked: a test may still compare against its nodes */
    return OK;
}

CUresult cuGraphDestroy(void* graph) {
    (void)graph; /* leaked: executable graphs keep pointers to its nodes as their origin */
    return OK;
}
