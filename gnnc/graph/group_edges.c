/* Grouping a graph's edges by a key (destination for the in-CSR, source for the reversed
 * graph's; source partition and destination for FeatGraph's partitions), for
 * gnnc/graph/group_edges.py. Two passes over int64 arrays: a count that checks
 * every id and notices edges already grouped, then a stable counting sort. numpy needs a
 * dozen calls for the same (a mini-batch block's graph is new every call), and its radix
 * argsort and gather keep temporaries of 8-16 bytes an edge that these passes do not.
 *
 * Plain C99 with no libc call but memset: the object is built by the C compiler that links
 * gnnc's kernels, once per cache.
 */
#include <stdint.h>
#include <string.h>

#define GROUPED (-1)
#define UNGROUPED (-2)
#define CHANGED (-3)

/* Counts the edges of each key into indptr (n_keys + 1 offsets, indptr[0] = 0) and checks
 * every key against n_keys and, where n_other >= 0, every other id against n_other.
 * Returns GROUPED when the keys never decrease (the edges are grouped already: no pass 2),
 * UNGROUPED otherwise, or the position of the first edge with an id out of range (>= 0),
 * indptr then being incomplete. */
int64_t gnnc_count_groups(const int64_t *keys, const int64_t *other, int64_t e, int64_t n_keys, int64_t n_other,
                          int64_t *indptr) {
    memset(indptr, 0, sizeof(int64_t) * (size_t)(n_keys + 1));
    int64_t *counts = indptr + 1;
    int64_t grouped = 1, previous = 0;
    for (int64_t i = 0; i < e; i++) {
        int64_t k = keys[i];
        if ((uint64_t)k >= (uint64_t)n_keys) return i;  /* negative ids wrap past n_keys */
        grouped &= k >= previous;
        previous = k;
        counts[k]++;
    }
    if (n_other >= 0)
        for (int64_t i = 0; i < e; i++)
            if ((uint64_t)other[i] >= (uint64_t)n_other) return i;
    for (int64_t j = 0; j < n_keys; j++) indptr[j + 1] += indptr[j];
    return grouped ? GROUPED : UNGROUPED;
}

/* Lays out `other` (and, where out_order is not NULL, each edge's position) in key order,
 * stable, by the offsets of gnnc_count_groups on the same keys. indptr serves as the write
 * cursor and is restored. Returns UNGROUPED, or CHANGED where a key no longer fits the count
 * (another writer of a file mapping between the passes): nothing is written out of bounds,
 * and the outputs and indptr are to be thrown away. */
int64_t gnnc_scatter_groups(const int64_t *keys, const int64_t *other, int64_t e, int64_t n_keys, int64_t *indptr,
                            int64_t *out_other, int64_t *out_order) {
    int64_t status = UNGROUPED;
    int64_t *cursor = indptr;  /* cursor[k]: the next free position of key k */
    for (int64_t i = 0; i < e; i++) {
        int64_t k = keys[i];
        if ((uint64_t)k >= (uint64_t)n_keys || cursor[k] >= e) {
            status = CHANGED;
            continue;
        }
        int64_t p = cursor[k]++;
        out_other[p] = other[i];
        if (out_order) out_order[p] = i;
    }
    /* cursor[k] ended at k's end, the next key's start: shift back */
    for (int64_t j = n_keys; j > 0; j--) indptr[j] = indptr[j - 1];
    indptr[0] = 0;
    return status;
}

/* Both passes in one call (a small graph pays one foreign call, not two): the count, then,
 * unless the keys came grouped, the scatter into out_other / out_order (room for e each). */
int64_t gnnc_group_edges(const int64_t *keys, const int64_t *other, int64_t e, int64_t n_keys, int64_t n_other,
                         int64_t *indptr, int64_t *out_other, int64_t *out_order) {
    int64_t status = gnnc_count_groups(keys, other, e, n_keys, n_other, indptr);
    if (status != UNGROUPED) return status;
    return gnnc_scatter_groups(keys, other, e, n_keys, indptr, out_other, out_order);
}

/* The partition of source u: the p with bounds[p] <= u < bounds[p + 1] (k + 1 increasing
 * boundaries; an id outside them lands in the first or the last partition). */
static int64_t partition_of(const int64_t *bounds, int64_t k, int64_t u) {
    int64_t lo = 0, n = k;
    while (n > 1) { /* branch-free halving: the last boundary at or below u */
        int64_t half = n / 2;
        lo = bounds[lo + half] <= u ? lo + half : lo;
        n -= half;
    }
    return lo;
}

/* FeatGraph's source partitions of an in-CSR (plans.source_partitions): the edges grouped by
 * their source's partition, each partition's edges an in-CSR by destination in the in-CSR's
 * order. part_indptr holds k segments of v + 1 offsets into part_src / part_eid (positions
 * over all partitions: segment p starts where p - 1 ends). in_eid NULL: the edge ids are the
 * in-CSR positions; part_eid NULL: none are written. Returns 0, or CHANGED where the sources
 * no longer fit the count (a file mapping rewritten between the passes): nothing is written
 * out of bounds, and the outputs are to be thrown away. */
int64_t gnnc_partition_edges(const int64_t *indptr, const int64_t *in_src, const int64_t *in_eid, int64_t v,
                             const int64_t *bounds, int64_t k, int64_t *part_indptr, int64_t *part_src,
                             int64_t *part_eid) {
    memset(part_indptr, 0, sizeof(int64_t) * (size_t)(k * (v + 1)));
    for (int64_t d = 0; d < v; d++)
        for (int64_t i = indptr[d]; i < indptr[d + 1]; i++)
            part_indptr[partition_of(bounds, k, in_src[i]) * (v + 1) + d + 1]++;
    int64_t running = 0;
    for (int64_t p = 0; p < k; p++) {
        int64_t *segment = part_indptr + p * (v + 1);
        segment[0] = running;
        for (int64_t d = 0; d < v; d++) {
            running += segment[d + 1];
            segment[d + 1] = running;
        }
    }
    /* segment[d] serves as the cursor of destination d: row d - 1 is done before row d starts */
    int64_t status = 0;
    for (int64_t d = 0; d < v; d++)
        for (int64_t i = indptr[d]; i < indptr[d + 1]; i++) {
            int64_t *cursor = part_indptr + partition_of(bounds, k, in_src[i]) * (v + 1) + d;
            if (cursor[0] >= cursor[1]) { /* the row is full (cursor[1], row d + 1's, has not moved) */
                status = CHANGED;
                continue;
            }
            int64_t at = cursor[0]++;
            part_src[at] = in_src[i];
            if (part_eid) part_eid[at] = in_eid ? in_eid[i] : i;
        }
    /* each cursor ended at its row's end, the next row's start: shift back, segment by segment */
    for (int64_t p = 0; p < k; p++) {
        int64_t *segment = part_indptr + p * (v + 1);
        for (int64_t d = v; d > 0; d--) segment[d] = segment[d - 1];
        segment[0] = p == 0 ? 0 : segment[-1];
    }
    return status;
}

/* The n + 1 boundaries of plans.balanced_blocks over destinations in id order: the work of
 * destination j is its in-degree + 1, so the work before j is indptr[j] + j, searched by
 * bisection (no prefix array). Boundary i is the first j whose prefix reaches ceil(i T / n);
 * where the next block came out empty and this one holds two or more destinations, the
 * boundary moves in front of the heavy last one (plans._split_prefix's rule, on the
 * boundaries before any moved). */
void gnnc_split_work(const int64_t *indptr, int64_t items, int64_t n, int64_t *bounds) {
    int64_t total = indptr[items] + items;
    bounds[0] = 0;
    bounds[n] = items;
    for (int64_t i = 1; i < n; i++) {
        int64_t target = (i * total + n - 1) / n, lo = 0, hi = items + 1;
        while (lo < hi) {
            int64_t mid = lo + (hi - lo) / 2;
            if (indptr[mid] + mid < target) lo = mid + 1;
            else hi = mid;
        }
        bounds[i] = lo;
    }
    /* the rule reads the unshifted boundaries: walk down, so bounds[i - 1] is still unshifted
     * and bounds[i + 1] is final (a shifted boundary's neighbours never qualify) */
    int64_t next = bounds[n];
    for (int64_t i = n - 1; i >= 1; i--) {
        int64_t here = bounds[i];
        if (here == next && here - bounds[i - 1] >= 2) bounds[i] = here - 1;
        next = here;
    }
}
