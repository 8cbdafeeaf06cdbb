"""The C helpers of a generated header: a graph from COO or CSR, and a plan per kernel.

`SHARED` is one set of `static inline` functions for every header of this
ABI version (guarded, so several headers can share a translation unit):
`gnnc_graph` builds the in-CSR by destination and the degrees from edges,
and the `gnnc__*` functions compute the plans a schedule asks for.
`kernel_helpers` writes, for one kernel, a `gnnc_K_plan` struct with one
field per graph or schedule argument (named as in `abi.kernel_arguments`),
and `gnnc_K_prepare` / `gnnc_K_run` / `gnnc_K_free`: the C counterpart of
what `runtime/module.py` passes a kernel. A plan only has to be valid, not
equal to the Python runtime's (see `SHARED`'s comments for what is computed).

`coo_entry` writes, for a kernel that has one (`has_coo_entry`), an
exported `gnnc_K__coo`: graph, plan, call and frees in one function, which
the linker compiles into the shared object beside the kernels, after the
kernels' header (`header.coo_entries`). The Python
runtime calls it for a graph it has not seen (a mini-batch block): one
foreign call where building a `gnnc.Graph`, its plans and a prepared call in
Python cost several times the kernel on a small block.
"""

from __future__ import annotations

from collections.abc import Sequence

from gnnc.ir import abi

#: Marks the shared helpers as defined; one per ABI version, so headers of one version share them.
HELPERS_GUARD = f"GNNC_HELPERS_ABI{abi.ABI_VERSION}"

#: C types of the kernels' float types.
C_TYPES = {"f32": "float", "f64": "double"}

SHARED = r"""/* ------------------------------------------------------------------ helpers
 *
 * Building a kernel's arguments from a graph, for C callers:
 *
 *     gnnc_graph g;
 *     gnnc_graph_from_coo(&g, num_src, num_dst, num_edges, src, dst);  // or gnnc_graph_from_csr
 *     gnnc_K_plan plan;
 *     gnnc_K_prepare(&plan, &g, num_threads, dims);   // dims in the kernel's dims order
 *     gnnc_K_run(&plan, inputs..., results...);       // as often as needed
 *     gnnc_K_free(&plan);
 *     gnnc_graph_free(&g);
 *
 * Every function returns GNNC_OK or an error code and, on error, leaves
 * nothing allocated. An edge's id is its position in src / dst (or in the
 * CSR's indices); edge tensors are indexed by it. A plan borrows its graph,
 * which must outlive it, and owns the workspace the kernel writes (scratch,
 * temps, acc_rows): one plan runs one call at a time. A plan is valid for
 * the graph, thread count and dims it was prepared with.
 */
#ifndef GNNC_HELPERS_GUARD
#define GNNC_HELPERS_GUARD

#define GNNC_OK 0
#define GNNC_ERROR_MEMORY 1   /* an allocation failed */
#define GNNC_ERROR_ARGUMENT 2 /* an id out of range, a malformed CSR, bad thread count or dims */

/* A graph: edges src[e] -> dst[e], grouped by destination. */
typedef struct gnnc_graph {
    int64_t num_src;     /* source ids: the rows of an input read at x[u] */
    int64_t num_dst;     /* destination ids: the rows of vertex results */
    int64_t num_edges;
    int64_t *src, *dst;  /* num_edges: the edges by id */
    int64_t *in_indptr;  /* num_dst + 1: v's in-edges are positions in_indptr[v] .. in_indptr[v + 1] */
    int64_t *in_src;     /* num_edges: the source of the in-edge at each position */
    int64_t *in_eid;     /* num_edges: its id (a destination's in-edges in increasing id) */
    int64_t *out_degree; /* num_src */
    int64_t num_relations; /* relation types (gnnc_graph_set_relations), 0 without */
    int64_t *edge_type;    /* num_edges: each edge's relation type by id, or NULL */
} gnnc_graph;

/* count elements of `size` bytes, zeroed; at least one, so that no pointer a kernel gets is NULL.
 * Under C11, aligned to a cache line as the Python runtime's arrays are: a worker's scratch row
 * that straddles lines costs its vector loads and stores a second line each. */
static inline void *gnnc__alloc(int64_t count, size_t size)
{
#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
    size_t n = count > 0 ? (size_t)count : 1u, bytes = n * size;
    void *block;
    if (size && n > (SIZE_MAX - CACHE_LINE_BYTES) / size)
        return NULL; /* as calloc: the size overflows */
    block = aligned_alloc(CACHE_LINE_BYTES, (bytes + CACHE_LINE_BYTES - 1) / CACHE_LINE_BYTES * CACHE_LINE_BYTES);
    if (block)
        memset(block, 0, bytes);
    return block;
#else
    return calloc(count > 0 ? (size_t)count : 1u, size);
#endif
}

static inline void gnnc_graph_free(gnnc_graph *g)
{
    free(g->src);
    free(g->dst);
    free(g->in_indptr);
    free(g->in_src);
    free(g->in_eid);
    free(g->out_degree);
    free(g->edge_type);
    memset(g, 0, sizeof *g);
}

/* Gives g's edges relation types (for kernels reading rel(e)): edge_type[e] in [0, num_relations)
 * for each edge id e, copied. num_relations may exceed the largest type + 1 (relations without
 * edges); a relation tensor's leading axis must be num_relations. */
static inline int gnnc_graph_set_relations(gnnc_graph *g, int64_t num_relations, const int64_t *edge_type)
{
    int64_t e, *types;
    if (num_relations < 0 || (num_relations == 0 && g->num_edges > 0))
        return GNNC_ERROR_ARGUMENT;
    for (e = 0; e < g->num_edges; e++)
        if (edge_type[e] < 0 || edge_type[e] >= num_relations)
            return GNNC_ERROR_ARGUMENT;
    types = (int64_t *)gnnc__alloc(g->num_edges, sizeof(int64_t));
    if (!types)
        return GNNC_ERROR_MEMORY;
    for (e = 0; e < g->num_edges; e++)
        types[e] = edge_type[e];
    free(g->edge_type);
    g->edge_type = types;
    g->num_relations = num_relations;
    return GNNC_OK;
}

/* The graph of num_edges edges src[e] -> dst[e]; ids must lie in [0, num_src) and [0, num_dst). */
static inline int gnnc_graph_from_coo(gnnc_graph *g, int64_t num_src, int64_t num_dst, int64_t num_edges,
                                      const int64_t *src, const int64_t *dst)
{
    int64_t e, v, *next, grouped = 1;
    memset(g, 0, sizeof *g);
    if (num_src < 0 || num_dst < 0 || num_edges < 0)
        return GNNC_ERROR_ARGUMENT;
    for (e = 0; e < num_edges; e++) {
        if (src[e] < 0 || src[e] >= num_src || dst[e] < 0 || dst[e] >= num_dst)
            return GNNC_ERROR_ARGUMENT;
        grouped &= e == 0 || dst[e] >= dst[e - 1];
    }
    g->num_src = num_src;
    g->num_dst = num_dst;
    g->num_edges = num_edges;
    g->src = (int64_t *)gnnc__alloc(num_edges, sizeof(int64_t));
    g->dst = (int64_t *)gnnc__alloc(num_edges, sizeof(int64_t));
    g->in_indptr = (int64_t *)gnnc__alloc(num_dst + 1, sizeof(int64_t));
    g->in_src = (int64_t *)gnnc__alloc(num_edges, sizeof(int64_t));
    g->in_eid = (int64_t *)gnnc__alloc(num_edges, sizeof(int64_t));
    g->out_degree = (int64_t *)gnnc__alloc(num_src, sizeof(int64_t));
    next = (int64_t *)gnnc__alloc(num_dst, sizeof(int64_t));
    if (!g->src || !g->dst || !g->in_indptr || !g->in_src || !g->in_eid || !g->out_degree || !next) {
        free(next);
        gnnc_graph_free(g);
        return GNNC_ERROR_MEMORY;
    }
    for (e = 0; e < num_edges; e++) {
        g->src[e] = src[e];
        g->dst[e] = dst[e];
        g->in_indptr[dst[e] + 1]++;
        g->out_degree[src[e]]++;
    }
    for (v = 0; v < num_dst; v++) {
        g->in_indptr[v + 1] += g->in_indptr[v];
        next[v] = g->in_indptr[v];
    }
    if (grouped) /* edges listed destination by destination (a sampler's): already in place */
        for (e = 0; e < num_edges; e++) {
            g->in_src[e] = src[e];
            g->in_eid[e] = e;
        }
    else /* a counting sort, stable: each destination's in-edges stay in id order */
        for (e = 0; e < num_edges; e++) {
            int64_t at = next[dst[e]]++;
            g->in_src[at] = src[e];
            g->in_eid[at] = e;
        }
    free(next);
    return GNNC_OK;
}

/* The graph of a CSR grouped by source (as gnnc.Graph.from_csr): indptr has num_src + 1
 * entries, source u's destinations are indices[indptr[u]] .. indices[indptr[u + 1] - 1], and
 * an edge's id is its position in indices. */
static inline int gnnc_graph_from_csr(gnnc_graph *g, int64_t num_src, int64_t num_dst, const int64_t *indptr,
                                      const int64_t *indices)
{
    int64_t u, e, *src;
    int status;
    memset(g, 0, sizeof *g);
    if (num_src < 0 || indptr[0] != 0)
        return GNNC_ERROR_ARGUMENT;
    for (u = 0; u < num_src; u++)
        if (indptr[u + 1] < indptr[u])
            return GNNC_ERROR_ARGUMENT;
    src = (int64_t *)gnnc__alloc(indptr[num_src], sizeof(int64_t));
    if (!src)
        return GNNC_ERROR_MEMORY;
    for (u = 0; u < num_src; u++)
        for (e = indptr[u]; e < indptr[u + 1]; e++)
            src[e] = u;
    status = gnnc_graph_from_coo(g, num_src, num_dst, indptr[num_src], src, indices);
    free(src);
    return status;
}

/* Blocks for `threads` workers taking them dynamically: 8 per worker, fewer where a block
 * would hold under 1024 units of work, at most one per item; none without items. */
static inline int64_t gnnc__block_count(int64_t items, int64_t work, int64_t threads)
{
    int64_t n = 8 * threads, by_work = (work + 1023) / 1024;
    if (items <= 0)
        return 0;
    if (by_work < n)
        n = by_work;
    if (items < n)
        n = items;
    return n < 1 ? 1 : n;
}

/* n + 1 boundaries splitting items 0 .. items into n runs of about equal count */
static inline void gnnc__even_bounds(int64_t items, int64_t n, int64_t *bounds)
{
    int64_t i;
    bounds[0] = 0;
    for (i = 1; i <= n; i++)
        bounds[i] = i * (items / n) + i * (items % n) / n;
}

/* n + 1 boundaries of items whose work prefix is prefix[0 .. items]: boundary i is the first
 * item whose work starts at or after i / n of the total (ascending; blocks may be empty) */
static inline void gnnc__work_bounds(const int64_t *prefix, int64_t items, int64_t n, int64_t *bounds)
{
    int64_t i, j = 0, total = prefix[items];
    bounds[0] = 0;
    for (i = 1; i < n; i++) {
        int64_t target = i * (total / n) + (i * (total % n) + n - 1) / n;
        while (j < items && prefix[j] < target)
            j++;
        bounds[i] = j;
    }
    if (n > 0)
        bounds[n] = items;
}

/* Destinations by in-degree, highest first, ties by id (Seastar's degree sorting). The kernel
 * takes any permutation: this one also stands for `reorder locality` and `reorder rcm`, whose
 * orders the Python runtime computes (MinHash, reverse Cuthill-McKee). */
static inline int gnnc__degree_order(const gnnc_graph *g, int64_t *order)
{
    int64_t v, d, top = 0, *start;
    for (v = 0; v < g->num_dst; v++) {
        d = g->in_indptr[v + 1] - g->in_indptr[v];
        top = d > top ? d : top;
    }
    start = (int64_t *)gnnc__alloc(top + 2, sizeof(int64_t));
    if (!start)
        return GNNC_ERROR_MEMORY;
    for (v = 0; v < g->num_dst; v++)
        start[top - (g->in_indptr[v + 1] - g->in_indptr[v]) + 1]++;
    for (d = 0; d <= top; d++)
        start[d + 1] += start[d];
    for (v = 0; v < g->num_dst; v++)
        order[start[top - (g->in_indptr[v + 1] - g->in_indptr[v])]++] = v;
    free(start);
    return GNNC_OK;
}

/* The in-CSR laid out by position in `order`: position i's in-edges (those of destination
 * order[i], in id order) are indptr[i] .. indptr[i + 1] of src / eid */
static inline void gnnc__ordered_csr(const gnnc_graph *g, const int64_t *order, int64_t *indptr, int64_t *src,
                                     int64_t *eid)
{
    int64_t i, k, at = 0;
    indptr[0] = 0;
    for (i = 0; i < g->num_dst; i++) {
        for (k = g->in_indptr[order[i]]; k < g->in_indptr[order[i] + 1]; k++, at++) {
            src[at] = g->in_src[k];
            eid[at] = g->in_eid[k];
        }
        indptr[i + 1] = at;
    }
}

/* n + 1 destination blocks over the positions of `order`, of about equal work: in-degree + 1
 * a position, or with `group neighbors G` (group_size > 0) the group count of a destination
 * with more than G in-edges (it merges one partial row per group) */
static inline int gnnc__dst_blocks(const gnnc_graph *g, const int64_t *order, int64_t group_size, int64_t n,
                                   int64_t *bounds)
{
    int64_t i, *prefix = (int64_t *)gnnc__alloc(g->num_dst + 1, sizeof(int64_t));
    if (!prefix)
        return GNNC_ERROR_MEMORY;
    for (i = 0; i < g->num_dst; i++) {
        int64_t d = g->in_indptr[order[i] + 1] - g->in_indptr[order[i]];
        if (group_size > 0 && d > group_size)
            d = (d + group_size - 1) / group_size;
        prefix[i + 1] = prefix[i] + d + 1;
    }
    gnnc__work_bounds(prefix, g->num_dst, n, bounds);
    free(prefix);
    return GNNC_OK;
}

/* FeatGraph's 1-D source partitions: the sources cut into k contiguous ranges of about equal
 * work (out-degree + 1); segment p of part_indptr (k x (V + 1)) is an in-CSR by destination of
 * the edges whose source is in range p, positions into part_src / part_eid, in id order */
static inline int gnnc__source_partitions(const gnnc_graph *g, int64_t k, int64_t *part_indptr, int64_t *part_src,
                                          int64_t *part_eid)
{
    int64_t u, v, p, e, row = g->num_dst + 1, n = k * row;
    int64_t *prefix = (int64_t *)gnnc__alloc(g->num_src + 1, sizeof(int64_t));
    int64_t *bounds = (int64_t *)gnnc__alloc(k + 1, sizeof(int64_t));
    int64_t *part = (int64_t *)gnnc__alloc(g->num_src, sizeof(int64_t));
    int64_t *next = (int64_t *)gnnc__alloc(n, sizeof(int64_t));
    if (!prefix || !bounds || !part || !next) {
        free(prefix);
        free(bounds);
        free(part);
        free(next);
        return GNNC_ERROR_MEMORY;
    }
    for (u = 0; u < g->num_src; u++)
        prefix[u + 1] = prefix[u] + g->out_degree[u] + 1;
    gnnc__work_bounds(prefix, g->num_src, k, bounds);
    for (p = 0; p < k; p++)
        for (u = bounds[p]; u < bounds[p + 1]; u++)
            part[u] = p;
    /* part_indptr[j]: the edges whose key p * (V + 1) + v is below j */
    memset(part_indptr, 0, (size_t)n * sizeof(int64_t));
    for (v = 0; v < g->num_dst; v++)
        for (e = g->in_indptr[v]; e < g->in_indptr[v + 1]; e++)
            part_indptr[part[g->in_src[e]] * row + v + 1]++;
    for (p = 1; p < n; p++)
        part_indptr[p] += part_indptr[p - 1];
    memcpy(next, part_indptr, (size_t)n * sizeof(int64_t));
    for (v = 0; v < g->num_dst; v++)
        for (e = g->in_indptr[v]; e < g->in_indptr[v + 1]; e++) {
            int64_t at = next[part[g->in_src[e]] * row + v]++;
            part_src[at] = g->in_src[e];
            part_eid[at] = g->in_eid[e];
        }
    free(prefix);
    free(bounds);
    free(part);
    free(next);
    return GNNC_OK;
}

/* The index of (x, y) along the Hilbert curve over an n x n grid, n a power of two (xy2d) */
static inline int64_t gnnc__hilbert_index(int64_t n, int64_t x, int64_t y)
{
    int64_t s, d = 0, rx, ry, t;
    for (s = n / 2; s > 0; s /= 2) {
        rx = (x & s) > 0;
        ry = (y & s) > 0;
        d += s * s * ((3 * rx) ^ ry);
        if (ry == 0) {
            if (rx == 1) {
                x = n - 1 - x;
                y = n - 1 - y;
            }
            t = x;
            x = y;
            y = t;
        }
    }
    return d;
}

static inline int gnnc__compare_pairs(const void *a, const void *b)
{
    const int64_t *p = (const int64_t *)a, *q = (const int64_t *)b;
    if (p[0] != q[0])
        return p[0] < q[0] ? -1 : 1;
    return (p[1] > q[1]) - (p[1] < q[1]);
}

/* FeatGraph's edge order: every edge as (src, dst, id) along a Hilbert curve over the
 * (src, dst) plane, edges at one point in id order */
static inline int gnnc__hilbert_edges(const gnnc_graph *g, int64_t *h_src, int64_t *h_dst, int64_t *h_eid)
{
    int64_t e, n = 2, *pairs = (int64_t *)gnnc__alloc(2 * g->num_edges, sizeof(int64_t));
    if (!pairs)
        return GNNC_ERROR_MEMORY;
    while (n < g->num_src || n < g->num_dst)
        n *= 2;
    for (e = 0; e < g->num_edges; e++) {
        pairs[2 * e] = gnnc__hilbert_index(n, g->src[e], g->dst[e]);
        pairs[2 * e + 1] = e;
    }
    if (g->num_edges)
        qsort(pairs, (size_t)g->num_edges, 2 * sizeof(int64_t), gnnc__compare_pairs);
    for (e = 0; e < g->num_edges; e++) {
        h_eid[e] = pairs[2 * e + 1];
        h_src[e] = g->src[h_eid[e]];
        h_dst[e] = g->dst[h_eid[e]];
    }
    free(pairs);
    return GNNC_OK;
}

/* Huang et al.'s neighbour grouping (`group neighbors G`): the in-edges of each destination
 * with more than G of them cut into groups of G consecutive in-CSR positions (the last one
 * shorter). Allocates and fills meta = {blocks of groups, n}, blocks (blocks + 1 even
 * boundaries of groups), dst (n: each group's destination), bounds (2n: its positions
 * [lo, hi)) and offsets (V + 1: destination v's groups, empty when v is not split). */
static inline int gnnc__neighbor_groups(const gnnc_graph *g, int64_t group_size, int64_t threads, int64_t **meta,
                                        int64_t **blocks, int64_t **dst, int64_t **bounds, int64_t **offsets)
{
    int64_t v, j, i = 0, edges = 0, n, n_blocks;
    *meta = *blocks = *dst = *bounds = NULL;
    *offsets = (int64_t *)gnnc__alloc(g->num_dst + 1, sizeof(int64_t));
    if (!*offsets)
        return GNNC_ERROR_MEMORY;
    for (v = 0; v < g->num_dst; v++) {
        int64_t d = g->in_indptr[v + 1] - g->in_indptr[v];
        (*offsets)[v + 1] = (*offsets)[v] + (d > group_size ? (d + group_size - 1) / group_size : 0);
        edges += d > group_size ? d : 0;
    }
    n = (*offsets)[g->num_dst];
    n_blocks = gnnc__block_count(n, edges, threads);
    *meta = (int64_t *)gnnc__alloc(2, sizeof(int64_t));
    *blocks = (int64_t *)gnnc__alloc(n_blocks + 1, sizeof(int64_t));
    *dst = (int64_t *)gnnc__alloc(n, sizeof(int64_t));
    *bounds = (int64_t *)gnnc__alloc(2 * n, sizeof(int64_t));
    if (!*meta || !*blocks || !*dst || !*bounds) {
        free(*meta);
        free(*blocks);
        free(*dst);
        free(*bounds);
        free(*offsets);
        *meta = *blocks = *dst = *bounds = *offsets = NULL;
        return GNNC_ERROR_MEMORY;
    }
    for (v = 0; v < g->num_dst; v++)
        for (j = 0; j < (*offsets)[v + 1] - (*offsets)[v]; j++, i++) {
            int64_t lo = g->in_indptr[v] + j * group_size, hi = lo + group_size;
            (*dst)[i] = v;
            (*bounds)[2 * i] = lo;
            (*bounds)[2 * i + 1] = hi < g->in_indptr[v + 1] ? hi : g->in_indptr[v + 1];
        }
    gnnc__even_bounds(n, n_blocks, *blocks);
    (*meta)[0] = n_blocks;
    (*meta)[1] = n;
    return GNNC_OK;
}

/* Per edge id, the edges sharing its (destination, relation) pair (deg_in) and its (source,
 * relation) pair (deg_out): each destination's, then each source's, edges counted by relation in
 * a num_relations array that is cleared again after the vertex. */
static inline int gnnc__relation_degrees(const gnnc_graph *g, int64_t *deg_in, int64_t *deg_out)
{
    int64_t v, u, k, *count = (int64_t *)gnnc__alloc(g->num_relations, sizeof(int64_t));
    int64_t *out_ptr = (int64_t *)gnnc__alloc(g->num_src + 1, sizeof(int64_t));
    int64_t *out_eid = (int64_t *)gnnc__alloc(g->num_edges, sizeof(int64_t));
    if (!count || !out_ptr || !out_eid) {
        free(count);
        free(out_ptr);
        free(out_eid);
        return GNNC_ERROR_MEMORY;
    }
    for (v = 0; v < g->num_dst; v++) {
        for (k = g->in_indptr[v]; k < g->in_indptr[v + 1]; k++)
            count[g->edge_type[g->in_eid[k]]]++;
        for (k = g->in_indptr[v]; k < g->in_indptr[v + 1]; k++)
            deg_in[g->in_eid[k]] = count[g->edge_type[g->in_eid[k]]];
        for (k = g->in_indptr[v]; k < g->in_indptr[v + 1]; k++)
            count[g->edge_type[g->in_eid[k]]] = 0;
    }
    /* the edges grouped by source (a counting sort), then the same */
    for (u = 0; u < g->num_src; u++)
        out_ptr[u + 1] = out_ptr[u] + g->out_degree[u];
    for (k = 0; k < g->num_edges; k++)
        out_eid[out_ptr[g->src[k]]++] = k;
    for (u = g->num_src; u > 0; u--)
        out_ptr[u] = out_ptr[u - 1];
    out_ptr[0] = 0;
    for (u = 0; u < g->num_src; u++) {
        for (k = out_ptr[u]; k < out_ptr[u + 1]; k++)
            count[g->edge_type[out_eid[k]]]++;
        for (k = out_ptr[u]; k < out_ptr[u + 1]; k++)
            deg_out[out_eid[k]] = count[g->edge_type[out_eid[k]]];
        for (k = out_ptr[u]; k < out_ptr[u + 1]; k++)
            count[g->edge_type[out_eid[k]]] = 0;
    }
    free(count);
    free(out_ptr);
    free(out_eid);
    return GNNC_OK;
}

/* The distinct (vertex, relation) pairs of the edges at one side (side_of_edge: g->src or g->dst,
 * n vertices that side), numbered relation by relation: pair_vertex / pair_rel (num_edges long at
 * most) and, per edge id, edge_pair; returns the number of pairs in *num_pairs. A relation's
 * edges are visited in id order, a vertex stamped with the relation it last got a pair in. */
static inline int gnnc__relation_pairs(const gnnc_graph *g, const int64_t *side_of_edge, int64_t n,
                                       int64_t *pair_vertex, int64_t *pair_rel, int64_t *edge_pair,
                                       int64_t *num_pairs)
{
    int64_t r, k, e, count = 0;
    int64_t *start = (int64_t *)gnnc__alloc(g->num_relations + 1, sizeof(int64_t));
    int64_t *by_rel = (int64_t *)gnnc__alloc(g->num_edges, sizeof(int64_t));
    int64_t *stamp = (int64_t *)gnnc__alloc(n, sizeof(int64_t));
    int64_t *id = (int64_t *)gnnc__alloc(n, sizeof(int64_t));
    if (!start || !by_rel || !stamp || !id) {
        free(start);
        free(by_rel);
        free(stamp);
        free(id);
        return GNNC_ERROR_MEMORY;
    }
    for (e = 0; e < g->num_edges; e++)
        start[g->edge_type[e] + 1]++;
    for (r = 0; r < g->num_relations; r++)
        start[r + 1] += start[r];
    for (e = 0; e < g->num_edges; e++)
        by_rel[start[g->edge_type[e]]++] = e;
    for (r = g->num_relations; r > 0; r--)
        start[r] = start[r - 1];
    start[0] = 0;
    for (r = 0; r < g->num_relations; r++)
        for (k = start[r]; k < start[r + 1]; k++) {
            int64_t w = side_of_edge[by_rel[k]];
            if (stamp[w] != r + 1) {
                stamp[w] = r + 1;
                id[w] = count;
                pair_vertex[count] = w;
                pair_rel[count] = r;
                count++;
            }
            edge_pair[by_rel[k]] = id[w];
        }
    *num_pairs = count;
    free(start);
    free(by_rel);
    free(stamp);
    free(id);
    return GNNC_OK;
}

/* Tiles of at most `rows` consecutive pairs of one relation (segment-matmul): tiles + 1 boundaries
 * of pairs in tiles (num_pairs + 1 long at most); returns the number of tiles, 0 without rows. */
static inline int64_t gnnc__pair_tiles(const int64_t *pair_rel, int64_t num_pairs, int64_t rows, int64_t *tiles)
{
    int64_t p, count = 0, start = 0;
    tiles[0] = 0;
    if (rows < 1)
        return 0;
    for (p = 1; p <= num_pairs; p++)
        if (p == num_pairs || pair_rel[p] != pair_rel[start] || p - start == rows) {
            tiles[++count] = p;
            start = p;
        }
    return count;
}

/* Elements of one worker's scratch slice: whole cache lines plus one (abi.scratch_slice_elements) */
static inline int64_t gnnc__scratch_slice(int64_t elements, int64_t item_size)
{
    int64_t line = CACHE_LINE_BYTES / item_size;
    return (elements + line - 1) / line * line + line;
}

#endif /* GNNC_HELPERS_GUARD */
""".replace("GNNC_HELPERS_GUARD", HELPERS_GUARD).replace("CACHE_LINE_BYTES", str(abi.CACHE_LINE_BYTES))


def _size_expression(shape: Sequence[abi.Dim], dims: Sequence[str]) -> str:
    """A C expression for the elements of a shape, its named dims read from p->dims."""
    factors = [str(d) if isinstance(d, int) else f"p->dims[{dims.index(d)}]" for d in shape]
    return " * ".join(factors) or "1"


def _sum_expression(shapes: Sequence[Sequence[abi.Dim]], dims: Sequence[str]) -> str:
    terms = [_size_expression(s, dims) for s in shapes]
    if len(terms) == 1:
        return terms[0]
    return " + ".join(f"({term})" for term in terms) or "0"


def kernel_helpers(kernel: dict, arguments: Sequence[abi.Argument], float_type: str) -> str:
    """The plan struct and prepare / run / free of one kernel (a metadata record), for its arguments."""
    name, symbol = kernel["name"], kernel["symbol"]
    record = abi.AbiRecord.from_dict(kernel["abi"])
    dims = record.dims
    t = float_type
    plan = f"gnnc_{name}_plan"
    own = [a for a in arguments if a.group not in (abi.Group.PARAMS, abi.Group.RESULTS) and a.pointer]
    borrowed = ("in_indptr", "in_src", "in_eid", "edge_rel")  # the graph's, or the ordered copies
    fields = ["    const gnnc_graph *graph; /* borrowed: it must outlive the plan */"]
    fields.append("    int64_t num_threads, num_blocks;")
    for a in own:
        if a.name == "dims":
            fields.append(f"    int64_t dims[{max(1, len(dims))}]; /* {', '.join(dims) or 'none'} */")
        elif a.name in borrowed:
            fields.append(f"    const int64_t *{a.name};")
        else:
            fields.append(f"    {a.c_type(t).removeprefix('const ')}{a.name};")
    if record.ordered_edges:
        fields.append("    int64_t *ordered_csr[3]; /* the in-CSR by position in dst_order */")
    lines = [
        f"/* A plan for {symbol}: its graph and schedule arguments, prepared once for a graph,",
        " * a thread count and dims (see the helpers above). */",
        f"typedef struct {plan} {{",
        *fields,
        f"}} {plan};",
        "",
        f"static inline void gnnc_{name}_free({plan} *p)",
        "{",
    ]
    for a in own:
        if a.name in borrowed or a.name == "dims":
            continue
        lines.append(f"    free(p->{a.name});")
    if record.ordered_edges:
        lines += ["    free(p->ordered_csr[0]);", "    free(p->ordered_csr[1]);", "    free(p->ordered_csr[2]);"]
    lines += ["    memset(p, 0, sizeof *p);", "}", ""]
    lines += _prepare(name, plan, record, arguments, t)
    params = [a for a in arguments if a.group in (abi.Group.PARAMS, abi.Group.RESULTS)]
    run_args = ", ".join(f"{a.c_type(t)}{a.name}" for a in params)
    lines += [
        f"/* Calls {symbol} on a prepared plan: inputs, then results, in declaration order. */",
        # the plan is `gnnc__plan`: a kernel's parameters take their own names (one may be `p`)
        f"static inline void gnnc_{name}_run(const {plan} *gnnc__plan{', ' if run_args else ''}{run_args})",
        "{",
    ]
    values = []
    for a in arguments:
        if a.group in (abi.Group.PARAMS, abi.Group.RESULTS):
            values.append(a.name)
        elif a.name == "num_vertices":
            values.append("gnnc__plan->graph->num_dst")
        elif a.name == "num_edges":
            values.append("gnnc__plan->graph->num_edges")
        else:
            values.append(f"gnnc__plan->{a.name}")
    lines.append(f"    {symbol}({', '.join(values)});")
    lines += ["}", ""]
    return "\n".join(lines)


def _prepare(name: str, plan: str, record: abi.AbiRecord, arguments: Sequence[abi.Argument], t: str) -> list[str]:
    dims = record.dims
    present = {a.name for a in arguments}
    temps = [a.name for a in arguments if a.group is abi.Group.TEMPS]
    lines = [
        f"/* Prepares p for {name} on graph g with num_threads workers and dims[{len(dims)}]"
        + (f" = {{{', '.join(dims)}}}" if dims else " (none: pass NULL)"),
        " * (each >= 0" + (", and equal to the sizes compiled in" if record.sizes else "") + "). */",
        f"static inline int gnnc_{name}_prepare({plan} *p, const gnnc_graph *g, int64_t num_threads,"
        " const int64_t *dims)",
        "{",
        "    int64_t V = g->num_dst, E = g->num_edges, ids = g->num_src > V ? g->num_src : V, i;",
        "    int status = GNNC_ERROR_MEMORY;",
        "    memset(p, 0, sizeof *p);",
        "    if (num_threads < 1)",
        "        return GNNC_ERROR_ARGUMENT;",
        "    p->graph = g;",
        "    p->num_threads = num_threads;",
    ]
    for i, d in enumerate(dims):
        check = f"dims[{i}] < 0"
        if record.sizes and d in record.sizes:
            check = f"dims[{i}] != {record.sizes[d]}"  # the native code reads and writes that many columns
        lines += [f"    if ({check})", "        return GNNC_ERROR_ARGUMENT;", f"    p->dims[{i}] = dims[{i}];"]
    if not dims:
        lines.append("    (void)dims;")

    def alloc(field: str, count: str, c_type: str = "int64_t") -> None:
        lines.extend(
            [
                f"    p->{field} = ({c_type} *)gnnc__alloc({count}, sizeof({c_type}));",
                f"    if (!p->{field})",
                "        goto fail;",
            ]
        )

    def call(expression: str) -> None:
        lines.extend(
            [f"    if ((status = {expression}) != GNNC_OK)", "        goto fail;", "    status = GNNC_ERROR_MEMORY;"]
        )

    # the destination order, and the in-CSR the sweeps walk
    alloc("dst_order", "V")
    if record.order == "identity":
        lines += ["    for (i = 0; i < V; i++)", "        p->dst_order[i] = i;"]
    else:
        call("gnnc__degree_order(g, p->dst_order)")
    if record.ordered_edges:
        alloc("ordered_csr[0]", "V + 1")
        alloc("ordered_csr[1]", "E")
        alloc("ordered_csr[2]", "E")
        lines += [
            "    gnnc__ordered_csr(g, p->dst_order, p->ordered_csr[0], p->ordered_csr[1], p->ordered_csr[2]);",
            "    p->in_indptr = p->ordered_csr[0];",
            "    p->in_src = p->ordered_csr[1];",
            "    p->in_eid = p->ordered_csr[2];",
        ]
    else:
        lines += ["    p->in_indptr = g->in_indptr;", "    p->in_src = g->in_src;", "    p->in_eid = g->in_eid;"]
    # blocks of positions: of the Hilbert edge list, or of destinations by work
    if record.edge_order is not None:
        lines.append("    p->num_blocks = E ? gnnc__block_count(V, E + V, num_threads) : 0;")
        alloc("dst_blocks", "p->num_blocks + 1")
        lines.append("    gnnc__even_bounds(E, p->num_blocks, p->dst_blocks);")
    else:
        lines.append("    p->num_blocks = gnnc__block_count(V, E + V, num_threads);")
        alloc("dst_blocks", "p->num_blocks + 1")
        call(f"gnnc__dst_blocks(g, p->dst_order, {record.groups or 0}, p->num_blocks, p->dst_blocks)")
    # degrees as floats, over every id either side may use
    alloc("deg_in", "ids", t)
    alloc("deg_out", "ids", t)
    lines += [
        "    for (i = 0; i < V; i++)",
        f"        p->deg_in[i] = ({t})(g->in_indptr[i + 1] - g->in_indptr[i]);",
        "    for (i = 0; i < g->num_src; i++)",
        f"        p->deg_out[i] = ({t})g->out_degree[i];",
    ]
    if record.relations or record.relation_degrees or record.pairs:
        lines += [
            "    if (!g->edge_type) { /* the kernel reads relation types: gnnc_graph_set_relations */",
            "        status = GNNC_ERROR_ARGUMENT;",
            "        goto fail;",
            "    }",
        ]
    # the (vertex, relation) pairs a kernel computes values of, relation by relation
    for side in record.pairs:
        edges, n = ("g->src", "g->num_src") if side == "src" else ("g->dst", "g->num_dst")
        alloc(f"{side}_pair_meta", "4")
        alloc(f"{side}_pair_vertex", "E")
        alloc(f"{side}_pair_rel", "E")
        alloc(f"{side}_edge_pair", "E")
        call(
            f"gnnc__relation_pairs(g, {edges}, {n}, p->{side}_pair_vertex, p->{side}_pair_rel, "
            f"p->{side}_edge_pair, &p->{side}_pair_meta[0])"
        )
        lines.append(
            f"    p->{side}_pair_meta[1] = gnnc__block_count(p->{side}_pair_meta[0], "
            f"8 * p->{side}_pair_meta[0], num_threads);"
        )
        alloc(f"{side}_pair_blocks", f"p->{side}_pair_meta[1] + 1")
        lines.append(f"    gnnc__even_bounds(p->{side}_pair_meta[0], p->{side}_pair_meta[1], p->{side}_pair_blocks);")
        # segment-matmul's tiles: each relation's run of pairs cut into tiles of pair_rows
        tile_rows = record.pair_rows or 0
        alloc(f"{side}_pair_tiles", "E + 1")
        lines.append(
            f"    p->{side}_pair_meta[2] = gnnc__pair_tiles(p->{side}_pair_rel, p->{side}_pair_meta[0], {tile_rows}, "
            f"p->{side}_pair_tiles);"
        )
        lines.append(
            f"    p->{side}_pair_meta[3] = gnnc__block_count(p->{side}_pair_meta[2], "
            f"8 * {max(tile_rows, 1)} * p->{side}_pair_meta[2], num_threads);"
        )
        alloc(f"{side}_tile_blocks", f"p->{side}_pair_meta[3] + 1")
        lines.append(f"    gnnc__even_bounds(p->{side}_pair_meta[2], p->{side}_pair_meta[3], p->{side}_tile_blocks);")
    # the workspace the kernel writes
    slice_ = f"gnnc__scratch_slice({_sum_expression(record.scratch, dims)}, (int64_t)sizeof({t}))"
    alloc("scratch", f"num_threads * {slice_}", t)
    pair_rows = {"RS": "p->src_pair_meta[0]", "RD": "p->dst_pair_meta[0]"}
    for temp_name, temp in zip(temps, record.temps):
        rows = "g->num_src" if temp.source_rows else {"V": "V", "E": "E", **pair_rows}[temp.domain]
        alloc(temp_name, f"{rows} * ({_size_expression(temp.shape, dims)})", t)
    if "src_meta" in present:
        alloc("src_meta", "2")
        lines += [
            "    p->src_meta[0] = g->num_src;",
            "    p->src_meta[1] = gnnc__block_count(g->num_src, 8 * g->num_src, num_threads);",
        ]
        alloc("src_blocks", "p->src_meta[1] + 1")
        lines.append("    gnnc__even_bounds(g->num_src, p->src_meta[1], p->src_blocks);")
    if "part_indptr" in present:
        k = record.partitions
        alloc("part_indptr", f"{k} * (V + 1)")
        alloc("part_src", "E")
        alloc("part_eid", "E")
        call(f"gnnc__source_partitions(g, {k}, p->part_indptr, p->part_src, p->part_eid)")
    if "hilbert_src" in present:
        alloc("hilbert_src", "E")
        alloc("hilbert_dst", "E")
        alloc("hilbert_eid", "E")
        call("gnnc__hilbert_edges(g, p->hilbert_src, p->hilbert_dst, p->hilbert_eid)")
    if "group_meta" in present:
        call(
            f"gnnc__neighbor_groups(g, {record.groups}, num_threads, &p->group_meta, &p->group_blocks, "
            "&p->group_dst, &p->group_bounds, &p->group_offsets)"
        )
    if "edge_rel" in present:
        lines.append("    p->edge_rel = g->edge_type;")
    if "rel_deg_in" in present:
        alloc("rel_deg_in", "E", t)
        alloc("rel_deg_out", "E", t)
        lines += [
            "    {",
            "        int64_t *count_in = (int64_t *)gnnc__alloc(E, sizeof(int64_t));",
            "        int64_t *count_out = (int64_t *)gnnc__alloc(E, sizeof(int64_t));",
            "        status = GNNC_ERROR_MEMORY;",
            "        if (count_in && count_out)",
            "            status = gnnc__relation_degrees(g, count_in, count_out);",
            "        for (i = 0; status == GNNC_OK && i < E; i++) {",
            f"            p->rel_deg_in[i] = ({t})count_in[i];",
            f"            p->rel_deg_out[i] = ({t})count_out[i];",
            "        }",
            "        free(count_in);",
            "        free(count_out);",
            "        if (status != GNNC_OK)",
            "            goto fail;",
            "        status = GNNC_ERROR_MEMORY;",
            "    }",
        ]
    if "acc_rows" in present:
        # one row per destination (partitions), per split neighbour group, or per worker (stream)
        rows = (
            "V" if record.partitions is not None else "p->group_meta[1]" if record.groups is not None else "num_threads"
        )
        alloc("acc_rows", f"{rows} * ({_sum_expression(record.acc_rows, dims)})", t)
    lines += ["    return GNNC_OK;", "fail:", f"    gnnc_{name}_free(p);", "    return status;", "}", ""]
    return lines


def has_coo_entry(record: abi.AbiRecord) -> bool:
    """Whether a kernel gets a `gnnc_K__coo` entry: a CPU kernel whose plan needs nothing but the
    edges (no relation types, no ids sorted by destination, which COO edges need not be)."""
    return record.grid is None and not (
        record.relations or record.relation_degrees or record.pairs or record.edges_sorted
    )


#: The C types of a COO entry's arguments (`abi.COO_ENTRY_ARGUMENTS`).
_COO_TYPES = {
    "src": "const int64_t *",
    "dst": "const int64_t *",
    "dims": "const int64_t *",
    "args": "void *const *",
}


def coo_prototype(symbol: str) -> str:
    """`symbol(arguments)` of a COO entry, its arguments as `abi.COO_ENTRY_ARGUMENTS` lists them."""
    arguments = ", ".join(
        f"{_COO_TYPES[name]}{name}" if pointer else f"int64_t {name}" for name, pointer in abi.COO_ENTRY_ARGUMENTS
    )
    return f"{symbol}({arguments})"


def coo_entry(kernel: dict, arguments: Sequence[abi.Argument], float_type: str) -> str:
    """A kernel's COO entry: `gnnc_graph_from_coo`, `gnnc_K_prepare`, `gnnc_K_run` and the frees."""
    name = kernel["name"]
    params = [a for a in arguments if a.group in (abi.Group.PARAMS, abi.Group.RESULTS)]
    values = [
        f"({a.c_type(float_type)})args[{i}]" if a.pointer else f"*(const {a.c_type(float_type)} *)args[{i}]"
        for i, a in enumerate(params)
    ]
    return "\n".join(
        [
            f"/* {name} on the graph of num_edges edges src[e] -> dst[e] with num_threads workers and",
            " * dims in the kernel's dims order: args are its inputs, then its results, in declaration",
            " * order. GNNC_OK, or an error code and no result written. */",
            f"int {coo_prototype(kernel['coo'])}",
            "{",
            "    gnnc_graph g;",
            f"    gnnc_{name}_plan p;",
            "    int status = gnnc_graph_from_coo(&g, num_src, num_dst, num_edges, src, dst);",
            "    if (status != GNNC_OK)",
            "        return status;",
            f"    status = gnnc_{name}_prepare(&p, &g, num_threads, dims);",
            "    if (status == GNNC_OK) {",
            f"        gnnc_{name}_run(&p{''.join(', ' + v for v in values)});",
            f"        gnnc_{name}_free(&p);",
            "    }",
            "    gnnc_graph_free(&g);",
            "    return status;",
            "}",
            "",
        ]
    )
