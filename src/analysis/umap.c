/* UMAP (McInnes, Healy & Melville 2018), as umap-learn computes it, on the exact
 * k-nearest-neighbour graph of the selected items:
 *   1. the graph: every item's n_neighbors - 1 nearest other items (umap-learn
 *      counts the item itself among its n_neighbors), by cosine distance 1 - cos
 *      from a matrix product of unit rows a block at a time, or by euclidean
 *      distance (candidates from the product, the kept ones summed directly);
 *   2. fuzzy memberships exp(-(d - rho_i) / sigma_i), rho_i the nearest distance,
 *      sigma_i by bisection so that they sum to log2(n_neighbors), symmetrised
 *      as a fuzzy union w + w' - w w';
 *   3. the curve 1 / (1 + a d^2b) fitted to min_dist (Levenberg-Marquardt);
 *   4. the layout: stochastic gradient descent over the edges, each sampled in
 *      proportion to its weight, with 5 negative samples, a learning rate going
 *      linearly from 1 to 0 over the epochs, from a start the caller gives (the
 *      top PCA coordinates, scaled to [0, 10] per axis).
 * One thread and a seeded generator: the same request gives the same bits. */
#include "analysis/internal.h"

#include <cblas.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Items scored at a time against all n: their products take at most BLOCK_BYTES
 * (256 x 50257 doubles), and at least 16 items go at once. */
#define BLOCK_BYTES (100u << 20)
/* Candidates kept per item from the products before the exact euclidean sums. */
#define EUCLID_SPARE 8
#define SMOOTH_ITERS 64
#define SMOOTH_TOL 1e-5
#define MIN_K_DIST_SCALE 1e-3
#define NEGATIVE_RATE 5
#define GRAD_CLIP 4.0

typedef struct cand {
    double dist;
    size_t j;
} cand;

/* Nearer first, then the lower index. */
static int by_dist(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->dist != y->dist)
        return x->dist < y->dist ? -1 : 1;
    return x->j < y->j ? -1 : x->j > y->j;
}

/* Keep the m best (nearest) of a stream in heap[0..*len), a max-heap on (dist, j). */
static bool worse(const cand *a, const cand *b) { return by_dist(a, b) > 0; }
static void heap_offer(cand *heap, size_t *len, size_t m, cand c)
{
    size_t i;
    if (*len < m) {
        i = (*len)++;
        while (i > 0 && worse(&c, &heap[(i - 1) / 2])) {
            heap[i] = heap[(i - 1) / 2];
            i = (i - 1) / 2;
        }
        heap[i] = c;
        return;
    }
    if (!worse(&heap[0], &c))
        return;
    i = 0;
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, top = i;
        const cand *t = &c;
        if (l < m && worse(&heap[l], t)) {
            top = l;
            t = &heap[l];
        }
        if (r < m && worse(&heap[r], t))
            top = r;
        if (top == i)
            break;
        heap[i] = heap[top];
        i = top;
    }
    heap[i] = c;
}

static double sq_dist(const double *a, const double *b, size_t d)
{
    double s = 0;
    for (size_t j = 0; j < d; j++)
        s += (a[j] - b[j]) * (a[j] - b[j]);
    return s;
}

/* The k nearest others of each of the n rows of x (n x d, row-major; normalised in
 * place for cosine) into nbr/dist (n x k). ES_E_CANCELLED etc. from the tracker. */
static int knn_graph(double *x, size_t n, size_t d, es_metric metric, size_t k, size_t *nbr, double *dist,
                     es_err *err)
{
    size_t block = BLOCK_BYTES / 8 / n;
    block = block < 16 ? 16 : block > n ? n : block;
    double *norms = NULL, *prod = es_alloc_doubles(block, n, "the neighbour graph's products", err);
    if (!prod)
        return -1;
    size_t keep = metric == ES_METRIC_COSINE ? k : k + EUCLID_SPARE;
    keep = keep < n - 1 ? keep : n - 1;
    cand *heap = es_malloc(keep * sizeof *heap);
    if (metric == ES_METRIC_COSINE) {
        es_normalise_rows(x, n, d);
    } else {
        norms = es_malloc(n * sizeof *norms);
        for (size_t i = 0; i < n; i++)
            norms[i] = cblas_ddot((int)d, x + i * d, 1, x + i * d, 1);
    }
    es_progress_begin("knn", (n + block - 1) / block);
    int rc = 0;
    for (size_t i0 = 0; i0 < n && rc == 0; i0 += block) {
        size_t b = n - i0 < block ? n - i0 : block;
        cblas_dgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)b, (int)n, (int)d, 1.0, x + i0 * d, (int)d, x,
                    (int)d, 0.0, prod, (int)n);
        for (size_t r = 0; r < b; r++) {
            size_t i = i0 + r, len = 0;
            const double *p = prod + r * n;
            for (size_t j = 0; j < n; j++) {
                if (j == i)
                    continue;
                double dj = metric == ES_METRIC_COSINE ? 1.0 - p[j] : norms[i] + norms[j] - 2.0 * p[j];
                heap_offer(heap, &len, keep, (cand){dj, j});
            }
            if (metric == ES_METRIC_EUCLIDEAN) /* exact sums for the candidates: no cancellation */
                for (size_t c = 0; c < len; c++)
                    heap[c].dist = sqrt(sq_dist(x + i * d, x + heap[c].j * d, d));
            else
                for (size_t c = 0; c < len; c++)
                    heap[c].dist = fmax(heap[c].dist, 0.0);
            qsort(heap, len, sizeof *heap, by_dist);
            for (size_t c = 0; c < k; c++) {
                nbr[i * k + c] = c < len ? heap[c].j : i;
                dist[i * k + c] = c < len ? heap[c].dist : INFINITY;
            }
        }
        es_progress_step();
        rc = es_progress_check(err);
    }
    free(heap);
    free(norms);
    free(prod);
    return rc;
}

/* umap-learn's smooth_knn_dist and compute_membership_strengths for one item's k
 * distances (nearest first): the membership of each neighbour. */
static void memberships(const double *dist, size_t k, double target, double mean_all, double *w)
{
    double rho = 0, mean = 0;
    for (size_t j = 0; j < k; j++) {
        if (rho == 0 && dist[j] > 0 && isfinite(dist[j]))
            rho = dist[j];
        mean += isfinite(dist[j]) ? dist[j] : 0;
    }
    mean /= (double)k;
    double lo = 0, hi = INFINITY, mid = 1;
    for (int it = 0; it < SMOOTH_ITERS; it++) {
        double psum = 0;
        for (size_t j = 0; j < k; j++) {
            double dd = dist[j] - rho;
            psum += dd > 0 ? exp(-dd / mid) : 1.0;
        }
        if (fabs(psum - target) < SMOOTH_TOL)
            break;
        if (psum > target) {
            hi = mid;
            mid = (lo + hi) / 2;
        } else {
            lo = mid;
            mid = isinf(hi) ? mid * 2 : (lo + hi) / 2;
        }
    }
    double sigma = mid;
    if (rho > 0) {
        if (sigma < MIN_K_DIST_SCALE * mean)
            sigma = MIN_K_DIST_SCALE * mean;
    } else if (sigma < MIN_K_DIST_SCALE * mean_all) {
        sigma = MIN_K_DIST_SCALE * mean_all;
    }
    for (size_t j = 0; j < k; j++) {
        double dd = dist[j] - rho;
        w[j] = !isfinite(dist[j]) ? 0 : dd <= 0 || sigma == 0 ? 1.0 : exp(-dd / sigma);
    }
}

/* See analysis.h: the curve 1 / (1 + a x^(2b)) closest in least squares to 1 below
 * min_dist and exp(-(x - min_dist) / spread) above, on 300 points of [0, 3 spread]
 * (umap-learn's find_ab_params), by Levenberg-Marquardt from (1, 1). */
void es_umap_curve(double spread, double min_dist, double *a_out, double *b_out)
{
    enum { POINTS = 300 };
    double xs[POINTS], ys[POINTS];
    for (int i = 0; i < POINTS; i++) {
        xs[i] = 3.0 * spread * i / (POINTS - 1);
        ys[i] = xs[i] < min_dist ? 1.0 : exp(-(xs[i] - min_dist) / spread);
    }
    double a = 1, b = 1, lambda = 1e-3;
    double cost = 0;
    for (int i = 0; i < POINTS; i++) {
        double r = 1.0 / (1.0 + a * pow(xs[i], 2 * b)) - ys[i];
        cost += r * r;
    }
    bool converged = false;
    for (int it = 0; it < 500 && !converged; it++) {
        double jj[2][2] = {{0, 0}, {0, 0}}, g[2] = {0, 0};
        for (int i = 0; i < POINTS; i++) {
            if (xs[i] == 0)
                continue; /* f = 1 whatever a and b: no gradient */
            double p = pow(xs[i], 2 * b), f = 1.0 / (1.0 + a * p), r = f - ys[i];
            double da = -p * f * f, db = -a * p * 2.0 * log(xs[i]) * f * f;
            jj[0][0] += da * da;
            jj[0][1] += da * db;
            jj[1][1] += db * db;
            g[0] += da * r;
            g[1] += db * r;
        }
        bool improved = false;
        while (!improved && lambda < 1e12) {
            double m00 = jj[0][0] * (1 + lambda), m11 = jj[1][1] * (1 + lambda), m01 = jj[0][1];
            double det = m00 * m11 - m01 * m01;
            double sa = -(m11 * g[0] - m01 * g[1]) / det, sb = -(m00 * g[1] - m01 * g[0]) / det;
            double na = a + sa, nb = b + sb, nc = 0;
            for (int i = 0; i < POINTS; i++) {
                double r = 1.0 / (1.0 + na * pow(xs[i], 2 * nb)) - ys[i];
                nc += r * r;
            }
            if (nc < cost && na > 0 && nb > 0) {
                double drop = cost - nc;
                a = na;
                b = nb;
                cost = nc;
                lambda /= 10;
                improved = true;
                converged = drop <= 1e-15 * (cost + 1e-300);
            } else {
                lambda *= 10;
            }
        }
        if (!improved)
            break;
    }
    *a_out = a;
    *b_out = b;
}

/* umap-learn's tau_rand_int: three combined Tausworthe generators. */
typedef struct rng {
    uint32_t s[3];
} rng;
static uint32_t tau_rand(rng *r)
{
    r->s[0] = (((r->s[0] & 4294967294u) << 12) & 0xffffffffu) ^ ((((r->s[0] << 13) & 0xffffffffu) ^ r->s[0]) >> 19);
    r->s[1] = (((r->s[1] & 4294967288u) << 4) & 0xffffffffu) ^ ((((r->s[1] << 2) & 0xffffffffu) ^ r->s[1]) >> 25);
    r->s[2] = (((r->s[2] & 4294967280u) << 17) & 0xffffffffu) ^ ((((r->s[2] << 3) & 0xffffffffu) ^ r->s[2]) >> 11);
    return r->s[0] ^ r->s[1] ^ r->s[2];
}

/* splitmix64, to spread a seed over the generator's state (each part above its minimum). */
static uint64_t splitmix(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static double clip(double v) { return v > GRAD_CLIP ? GRAD_CLIP : v < -GRAD_CLIP ? -GRAD_CLIP : v; }

/* The symmetric graph as directed edges (both directions), with weights. */
typedef struct graph {
    size_t m;
    size_t *head, *tail;
    double *w;
} graph;

/* Fuzzy union of the directed memberships w (n x k over nbr), both directions of
 * every pair kept, edges below max / epochs dropped (umap-learn's pruning). */
static void symmetrise(const size_t *nbr, const double *w, size_t n, size_t k, size_t epochs, graph *g)
{
    g->head = es_malloc(2 * n * k * sizeof *g->head);
    g->tail = es_malloc(2 * n * k * sizeof *g->tail);
    g->w = es_malloc(2 * n * k * sizeof *g->w);
    g->m = 0;
    double top = 0;
    for (int pass = 0; pass < 2; pass++)
        for (size_t i = 0; i < n; i++)
            for (size_t c = 0; c < k; c++) {
                size_t j = nbr[i * k + c];
                if (j == i || w[i * k + c] <= 0)
                    continue;
                double back = 0; /* w_ji, when i is among j's neighbours */
                for (size_t e = 0; e < k; e++)
                    if (nbr[j * k + e] == i)
                        back = w[j * k + e];
                double v = w[i * k + c] + back - w[i * k + c] * back;
                if (pass == 0) {
                    top = fmax(top, v);
                    continue;
                }
                if (v < top / (double)epochs)
                    continue;
                /* i -> j from i's list; j -> i too unless j's list holds i (then it adds it itself) */
                g->head[g->m] = i;
                g->tail[g->m] = j;
                g->w[g->m++] = v;
                if (back == 0) {
                    g->head[g->m] = j;
                    g->tail[g->m] = i;
                    g->w[g->m++] = v;
                }
            }
}

/* umap-learn's optimize_layout_euclidean (one thread, move_other). */
static int layout(double *emb, size_t n, size_t dims, const graph *g, size_t epochs, double a, double b,
                  uint64_t seed, es_err *err)
{
    double *eps = es_malloc((g->m ? g->m : 1) * sizeof *eps), *next = es_malloc((g->m ? g->m : 1) * sizeof *next);
    double *eneg = es_malloc((g->m ? g->m : 1) * sizeof *eneg), *nextneg = es_malloc((g->m ? g->m : 1) * sizeof *nextneg);
    double top = 0;
    for (size_t e = 0; e < g->m; e++)
        top = fmax(top, g->w[e]);
    for (size_t e = 0; e < g->m; e++) {
        double samples = (double)epochs * g->w[e] / top;
        eps[e] = samples > 0 ? (double)epochs / samples : -1;
        next[e] = eps[e];
        eneg[e] = eps[e] / NEGATIVE_RATE;
        nextneg[e] = eneg[e];
    }
    uint64_t sm = seed;
    rng r = {{(uint32_t)(splitmix(&sm) | 2u), (uint32_t)(splitmix(&sm) | 8u), (uint32_t)(splitmix(&sm) | 16u)}};
    es_progress_begin("layout", epochs);
    int rc = 0;
    for (size_t ep = 0; ep < epochs && rc == 0; ep++) {
        double alpha = 1.0 - (double)ep / (double)epochs, now = (double)ep;
        for (size_t e = 0; e < g->m; e++) {
            if (eps[e] <= 0 || next[e] > now)
                continue;
            double *cur = emb + g->head[e] * dims, *oth = emb + g->tail[e] * dims;
            double d2 = sq_dist(cur, oth, dims);
            double pb = d2 > 0 ? pow(d2, b) : 0.0; /* d2^(b-1) = d2^b / d2: one pow per move */
            double coef = d2 > 0 ? -2.0 * a * b * (pb / d2) / (a * pb + 1.0) : 0.0;
            for (size_t t = 0; t < dims; t++) {
                double gr = clip(coef * (cur[t] - oth[t]));
                cur[t] += gr * alpha;
                oth[t] -= gr * alpha;
            }
            next[e] += eps[e];
            size_t nneg = (size_t)((now - nextneg[e]) / eneg[e]);
            for (size_t p = 0; p < nneg; p++) {
                size_t o = tau_rand(&r) % n;
                if (o == g->head[e])
                    continue;
                oth = emb + o * dims;
                d2 = sq_dist(cur, oth, dims);
                coef = d2 > 0 ? 2.0 * b / ((0.001 + d2) * (a * pow(d2, b) + 1.0)) : 0.0;
                for (size_t t = 0; t < dims; t++)
                    cur[t] += (coef > 0 ? clip(coef * (cur[t] - oth[t])) : GRAD_CLIP) * alpha;
            }
            nextneg[e] += (double)nneg * eneg[e];
        }
        es_progress_step();
        rc = es_progress_check(err);
    }
    free(eps);
    free(next);
    free(eneg);
    free(nextneg);
    return rc;
}

/* See analysis.h. */
size_t es_umap_epochs(size_t n, size_t asked) { return asked ? asked : n <= 10000 ? 500 : 200; }

/* See analysis.h. */
int es_umap_items(const es_matrix *m, const size_t *idx, size_t n, const es_umap_params *p, const double *init,
                  es_umap **out, es_err *err)
{
    if (es_check_selection(m, idx, n, err) < 0)
        return -1;
    if (n < 3 || p->n_neighbors < 2 || p->n_neighbors > n)
        return es_fail(err, ES_E_PARAM, n < 3 ? "rows" : "n_neighbors",
                       "UMAP needs at least 3 rows and 2 <= n_neighbors <= the rows (%zu), got %zu rows and "
                       "n_neighbors=%zu", n, n, p->n_neighbors);
    size_t d = es_matrix_dim(m), k = p->n_neighbors - 1, dims = p->dims, epochs = es_umap_epochs(n, p->epochs);
    double *x = es_matrix_items_copy(m, idx, n);
    size_t *nbr = es_malloc(n * k * sizeof *nbr);
    double *dist = es_malloc(n * k * sizeof *dist), *w = es_malloc(n * k * sizeof *w);
    graph g = {0};
    es_umap *u = NULL;
    int rc = knn_graph(x, n, d, p->metric, k, nbr, dist, err);
    free(x);
    if (rc == 0) {
        double mean_all = 0;
        for (size_t i = 0; i < n * k; i++)
            mean_all += isfinite(dist[i]) ? dist[i] : 0;
        mean_all /= (double)(n * k);
        double target = log2((double)p->n_neighbors);
        for (size_t i = 0; i < n; i++)
            memberships(dist + i * k, k, target, mean_all, w + i * k);
        symmetrise(nbr, w, n, k, epochs, &g);
        u = es_calloc(1, sizeof *u);
        *u = (es_umap){.n = n, .dims = dims, .n_neighbors = p->n_neighbors, .epochs = epochs, .edges = g.m / 2};
        u->rows = es_malloc(n * sizeof *u->rows);
        memcpy(u->rows, idx, n * sizeof *idx);
        u->coords = es_malloc(n * dims * sizeof *u->coords);
        es_umap_curve(1.0, p->min_dist, &u->a, &u->b);
        /* the start, per axis scaled to [0, 10] as umap-learn does with its initial layout */
        for (size_t t = 0; t < dims; t++) {
            double lo = INFINITY, hi = -INFINITY;
            for (size_t i = 0; i < n; i++) {
                lo = fmin(lo, init[i * dims + t]);
                hi = fmax(hi, init[i * dims + t]);
            }
            for (size_t i = 0; i < n; i++)
                u->coords[i * dims + t] = hi > lo ? 10.0 * (init[i * dims + t] - lo) / (hi - lo) : 0.0;
        }
        rc = layout(u->coords, n, dims, &g, epochs, u->a, u->b, p->seed, err);
    }
    free(nbr);
    free(dist);
    free(w);
    free(g.head);
    free(g.tail);
    free(g.w);
    if (rc < 0) {
        es_umap_free(u);
        return -1;
    }
    *out = u;
    return 0;
}

void es_umap_free(es_umap *u)
{
    if (!u)
        return;
    free(u->rows);
    free(u->coords);
    free(u);
}
