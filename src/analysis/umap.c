/* UMAP (McInnes, Healy & Melville 2018), as umap-learn computes it, on the exact
 * k-nearest-neighbour graph of the selected items:
 *   1. the graph: every item's n_neighbors - 1 nearest other items (umap-learn
 *      counts the item itself among its n_neighbors), by cosine distance 1 - cos
 *      of unit rows or by euclidean distance, exact in double, the candidates
 *      from float32 matrix products (es_umap_knn says how that stays exact);
 *   2. fuzzy memberships exp(-(d - rho_i) / sigma_i), rho_i the nearest distance,
 *      sigma_i by bisection so that they sum to log2(n_neighbors), symmetrised
 *      as a fuzzy union w + w' - w w';
 *   3. the curve 1 / (1 + a d^2b) fitted to min_dist (Levenberg-Marquardt);
 *   4. the layout: stochastic gradient descent over the edges, each sampled in
 *      proportion to its weight, with 5 negative samples, a learning rate going
 *      linearly from 1 to 0 over the epochs, from a start the caller gives (the
 *      top PCA coordinates, scaled to [0, 10] per axis), on up to two threads
 *      over a fixed cut of the items (layout() says how).
 * Seeded generators and a fixed cut: the same request gives the same bits,
 * whatever the threads. */
#include "analysis/internal.h"
#include "embedscope/blas.h"

#include <cblas.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

/* Items whose float32 products are taken at a time: at most BLOCK_BYTES (521 x
 * 50257 floats), and at least 16 items go at once. */
#define BLOCK_BYTES (100u << 20)
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

static double sq_dist(const double *a, const double *b, size_t d)
{
    double s = 0;
    for (size_t j = 0; j < d; j++)
        s += (a[j] - b[j]) * (a[j] - b[j]);
    return s;
}

/* Candidates kept per item from the float32 products, beyond its k, before they
 * are scored again in double (a certificate below says whether they suffice). */
#define KNN_SPARE 12

/* The neighbour graph's candidates: a max-heap of one item's `keep` smallest keys
 * (float32 approximations, smaller is nearer), its largest on top. */
typedef struct fcand {
    float key;
    uint32_t j;
} fcand;

static void fheap_push(fcand *h, size_t *len, size_t keep, float key, uint32_t j, float *top)
{
    size_t i;
    if (*len < keep) {
        i = (*len)++;
        while (i > 0 && h[(i - 1) / 2].key < key) {
            h[i] = h[(i - 1) / 2];
            i = (i - 1) / 2;
        }
        h[i] = (fcand){key, j};
        if (*len == keep)
            *top = h[0].key;
        return;
    }
    i = 0; /* replace the top (key < top, the caller's test) and sift down */
    for (;;) {
        size_t l = 2 * i + 1, r = l + 1, big = i;
        float bk = key;
        if (l < keep && h[l].key > bk) {
            big = l;
            bk = h[l].key;
        }
        if (r < keep && h[r].key > bk)
            big = r;
        if (big == i)
            break;
        h[i] = h[big];
        i = big;
    }
    h[i] = (fcand){key, j};
    *top = h[0].key;
}

static int by_key(const void *a, const void *b)
{
    float x = ((const fcand *)a)->key, y = ((const fcand *)b)->key;
    return (x > y) - (x < y);
}

/* The distance the graph keeps between rows i and j of x, in double: 1 - cos for
 * unit rows, the squared euclidean distance (its root taken at the end) else. */
static double exact_dist(const double *x, size_t d, es_metric metric, size_t i, size_t j)
{
    if (metric == ES_METRIC_COSINE)
        return fmax(1.0 - cblas_ddot((int)d, x + i * d, 1, x + j * d, 1), 0.0);
    return sq_dist(x + i * d, x + j * d, d);
}

/* Row i's k nearest (distance, then the lower index) among the m candidates js,
 * scored in double, into nbr/dist; cs is scratch for m. */
static void keep_nearest(const double *x, size_t d, es_metric metric, size_t i, const uint32_t *js, size_t m,
                         size_t k, cand *cs, size_t *nbr, double *dist)
{
    for (size_t c = 0; c < m; c++)
        cs[c] = (cand){exact_dist(x, d, metric, i, js[c]), js[c]};
    qsort(cs, m, sizeof *cs, by_dist);
    for (size_t c = 0; c < k; c++) {
        nbr[i * k + c] = c < m ? cs[c].j : i;
        dist[i * k + c] = c >= m ? INFINITY : metric == ES_METRIC_COSINE ? cs[c].dist : sqrt(cs[c].dist);
    }
}

/* The float32 rows the candidates come from, and the bound beta on the error of
 * every key: within a row, key(i, j) is the exact (double) distance's ordering
 * quantity plus a constant of the row, to within beta. Cosine: key = -fl32(u_i . u_j)
 * of the rounded unit rows u, against -(u_i . u_j) in double; its error is at most
 * gamma_d (1 + u)^2 (the float32 sum of d products, in any order, of vectors of
 * norm <= 1 + u; gamma_d = d u / (1 - d u), u = 2^-24) + 2u + u^2 (rounding the
 * rows) + the double product's own error. Euclidean: the rows centred first
 * (distances do not move), key = |v_j|^2 - 2 fl32(v_i . v_j) in float32, whose
 * error is at most R^2 (2 gamma_d (1 + u)^2 + 24 u) with R the largest row norm:
 * the product's error doubled, the rounding of the rows (|a^2 - b^2| <= |a - b|
 * (a + b)) and of the key's two float32 operations. Both get the double
 * re-scoring's error ((d + 8) 2^-50 of the scale) on top, and 1 % to spare. */
static float *float_rows(const double *x, size_t n, size_t d, es_metric metric, float *sqnorm, double *beta)
{
    const double u = 0x1p-24, gamma = (double)d * u / (1.0 - (double)d * u), slop = (double)(d + 8) * 0x1p-50;
    float *xf = es_malloc(n * d * sizeof *xf);
    if (metric == ES_METRIC_COSINE) {
        for (size_t i = 0; i < n * d; i++)
            xf[i] = (float)x[i];
        *beta = 1.01 * (gamma * (1 + u) * (1 + u) + 2 * u + u * u + slop);
        return xf;
    }
    double *mean = es_calloc(d, sizeof *mean), r2 = 0;
    for (size_t i = 0; i < n; i++)
        for (size_t t = 0; t < d; t++)
            mean[t] += x[i * d + t] / (double)n;
    for (size_t i = 0; i < n; i++) {
        double s = 0, sf = 0;
        for (size_t t = 0; t < d; t++) {
            double v = x[i * d + t] - mean[t];
            xf[i * d + t] = (float)v;
            s += v * v;
            sf += (double)xf[i * d + t] * xf[i * d + t];
        }
        sqnorm[i] = (float)sf;
        r2 = fmax(r2, fmax(s, sf));
    }
    free(mean);
    *beta = 1.01 * (r2 * (1 + 1e-6) * (2 * gamma * (1 + u) * (1 + u) + 24 * u + slop));
    return xf;
}

/* See internal.h. The candidates come from float32 products (cblas_sgemm, twice
 * dgemm's rate), each pair once: a strip of rows against itself and every later
 * row, the product offered to both rows' heaps. Row i keeps its keep = k + spare
 * smallest keys; with s_k its k-th and s_w its largest kept, s_w > s_k + 2 beta
 * certifies that the exact k nearest are among them: a row left out has a key
 * >= s_w, so an exact distance >= s_w - beta > s_k + beta, which is at least the
 * exact k-th's. Rows without the certificate
 * (near-ties, duplicates) get a second product against every row, keeping every
 * key <= s_k + 2 beta. The kept candidates are scored again in double and the k
 * nearest (distance, then the lower index) kept: the exact graph, whatever
 * float32 and OpenBLAS's threads did to the keys. */
int es_umap_knn(double *x, size_t n, size_t d, es_metric metric, size_t k, size_t block, size_t *nbr,
                double *dist, es_err *err)
{
    if (n > UINT32_MAX)
        return es_fail(err, ES_E_NOMEM, "rows", "the neighbour graph takes at most %u rows, got %zu", UINT32_MAX, n);
    if (!block)
        block = BLOCK_BYTES / sizeof(float) / n;
    block = block < 16 ? 16 : block > n ? n : block;
    float *prod = es_malloc(block * n * sizeof *prod);
    if (metric == ES_METRIC_COSINE)
        es_normalise_rows(x, n, d);
    size_t keep = k + KNN_SPARE < n - 1 ? k + KNN_SPARE : n - 1;
    float *sqnorm = es_calloc(n, sizeof *sqnorm), *top = es_malloc(n * sizeof *top);
    double beta;
    float *xf = float_rows(x, n, d, metric, sqnorm, &beta);
    fcand *heaps = es_malloc(n * keep * sizeof *heaps);
    size_t *len = es_calloc(n, sizeof *len);
    for (size_t i = 0; i < n; i++)
        top[i] = INFINITY;
    size_t strips = (n + block - 1) / block;
    es_progress_begin("knn", strips + 1);
    int rc = 0;
    for (size_t i0 = 0; i0 < n && rc == 0; i0 += block) {
        size_t b = n - i0 < block ? n - i0 : block, w = n - i0;
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)b, (int)w, (int)d, 1.0f, xf + i0 * d, (int)d,
                    xf + i0 * d, (int)d, 0.0f, prod, (int)w);
        for (size_t r = 0; r < b; r++) {
            size_t i = i0 + r;
            const float *p = prod + r * w;
            fcand *hi = heaps + i * keep;
            for (size_t c = r + 1; c < w; c++) { /* the pair (i, j), j > i, for both rows */
                size_t j = i0 + c;
                float ki, kj;
                if (metric == ES_METRIC_COSINE) {
                    ki = kj = -p[c];
                } else {
                    ki = sqnorm[j] - 2.0f * p[c];
                    kj = sqnorm[i] - 2.0f * p[c];
                }
                if (ki < top[i])
                    fheap_push(hi, &len[i], keep, ki, (uint32_t)j, &top[i]);
                if (kj < top[j])
                    fheap_push(heaps + j * keep, &len[j], keep, kj, (uint32_t)i, &top[j]);
            }
        }
        es_progress_step();
        rc = es_progress_check(err);
    }
    /* the certificate, and the exact k nearest of the certified rows */
    size_t *redo = es_malloc(n * sizeof *redo), nredo = 0;
    float *limit = es_malloc(n * sizeof *limit);
    cand *cs = es_malloc((n > keep ? n : keep) * sizeof *cs);
    uint32_t *js = es_malloc((n > keep ? n : keep) * sizeof *js);
    for (size_t i = 0; i < n && rc == 0; i++) {
        fcand *h = heaps + i * keep;
        qsort(h, len[i], sizeof *h, by_key);
        if (len[i] == keep && keep < n - 1 && !((double)h[keep - 1].key > (double)h[k - 1].key + 2 * beta)) {
            double lim = (double)h[k - 1].key + 2 * beta;
            limit[i] = (float)lim;
            if ((double)limit[i] < lim) /* rounded up: it may only let more in */
                limit[i] = nextafterf(limit[i], INFINITY);
            redo[nredo++] = i;
            continue;
        }
        for (size_t c = 0; c < len[i]; c++)
            js[c] = h[c].j;
        keep_nearest(x, d, metric, i, js, len[i], k, cs, nbr, dist);
    }
    free(heaps);
    free(len);
    /* rows without a certificate: every key within 2 beta of the k-th, from a
     * product against all rows, scored in double */
    float *rows = es_malloc(block * d * sizeof *rows);
    for (size_t a = 0; a < nredo && rc == 0; a += block) {
        size_t b = nredo - a < block ? nredo - a : block;
        for (size_t r = 0; r < b; r++)
            memcpy(rows + r * d, xf + redo[a + r] * d, d * sizeof *rows);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)b, (int)n, (int)d, 1.0f, rows, (int)d, xf,
                    (int)d, 0.0f, prod, (int)n);
        for (size_t r = 0; r < b; r++) {
            size_t i = redo[a + r], m = 0;
            const float *p = prod + r * n;
            for (size_t j = 0; j < n; j++) {
                float key = metric == ES_METRIC_COSINE ? -p[j] : sqnorm[j] - 2.0f * p[j];
                if (j != i && key <= limit[i])
                    js[m++] = (uint32_t)j;
            }
            keep_nearest(x, d, metric, i, js, m, k, cs, nbr, dist);
        }
        rc = es_progress_check(err);
    }
    es_progress_step();
    free(rows);
    free(redo);
    free(limit);
    free(cs);
    free(js);
    free(xf);
    free(sqnorm);
    free(top);
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

/* The layout's parts: the items cut into LAYOUT_PARTS ranges of indices, each with
 * the edges whose head it holds, its own generator, and the moves it owes the
 * other parts' items. A part moves its own items in place, in its edges' order,
 * and reads the other parts' items as they were when the epoch began; an edge's
 * pull on an item of another part waits for the epoch's end, where every part's
 * owed moves are added in part order. So the bits depend on the seed alone, not on
 * how many threads run the parts (up to LAYOUT_PARTS, es_blas_job_threads' share),
 * nor in what order they finish. */
#define LAYOUT_PARTS 2

/* An edge as the layout walks it, everything it reads in one place (its part's
 * edges in one array, in order): when it is next sampled, and its next negative
 * samples, umap-learn's epoch_of_next_sample and epoch_of_next_negative_sample,
 * with their periods. */
typedef struct ledge {
    double next, eps, nextneg, eneg;
    uint32_t h, t;
} ledge;

/* Negative samples drawn this many ahead of their use, their items fetched into
 * the cache meanwhile: the random reads of the items are what the layout waits on
 * otherwise (an L3 read takes longer than one draw's arithmetic). */
#define AHEAD 8

typedef struct lay {
    size_t n, dims;
    double a, b, alpha, now;
    double *emb, *prev;              /* live items, and all of them as the epoch began */
} lay;

typedef struct part {
    const lay *l;
    size_t lo, hi; /* its items [lo, hi) */
    ledge *edges;
    size_t m;
    rng r;
    uint32_t ahead[AHEAD]; /* the next negative samples, drawn early to fetch their items */
    unsigned at;           /* the next of them to use */
    size_t *owed_at, nowed; /* items of other parts, and their moves (dims each) */
    double *owed;
} part;

/* An item as this part sees it: its own live, the others' as the epoch began. */
static inline double *seen(const part *p, size_t i, size_t dims)
{
    return (i >= p->lo && i < p->hi ? p->l->emb : p->l->prev) + i * dims;
}

/* A draw in [0, n): a multiply and a shift, no division. */
static inline uint32_t draw(rng *r, size_t n) { return (uint32_t)(((uint64_t)tau_rand(r) * n) >> 32); }

/* The part's next negative sample; the one AHEAD draws later is drawn now and its
 * item fetched. The same draws in the same order. */
static inline size_t negative(part *p, size_t dims)
{
    size_t o = p->ahead[p->at];
    uint32_t later = draw(&p->r, p->l->n);
    p->ahead[p->at] = later;
    p->at = (p->at + 1) % AHEAD;
    __builtin_prefetch(seen(p, later, dims));
    return o;
}

/* x^b for x > 0, the layout's one transcendental (x^(b-1) = x^b / x), in
 * float32 where x is a normal float: powf is within an ulp (6e-8 relative; x
 * rounded to float adds b times 6e-8) at a third of pow's cost, which was a
 * quarter of the layout's time. The coefficient it enters scales a step that is
 * clipped at 4 and shrunk by the learning rate, in a stochastic descent that
 * umap-learn runs wholly in float32; the coordinates stay double. pow outside
 * float's normal range. Deterministic: the same bits for the same x. */
static inline double powb(double x, float bf, double b)
{
    return x > 1e-30 && x < 1e30 ? (double)powf((float)x, bf) : pow(x, b);
}

/* One epoch of the part's edges (umap-learn's optimize_layout_euclidean,
 * move_other), dims given as a constant where run_part calls it. */
static inline __attribute__((always_inline)) void epoch_of(part *p, size_t dims)
{
    const lay *l = p->l;
    double a = l->a, b = l->b, alpha = l->alpha, now = l->now, *emb = l->emb;
    float bf = (float)b;
    p->nowed = 0;
    for (size_t q = 0; q < p->m; q++) {
        ledge *e = &p->edges[q];
        if (q + 4 < p->m) /* a later edge's tail, likely read soon */
            __builtin_prefetch(seen(p, p->edges[q + 4].t, dims));
        if (e->eps <= 0 || e->next > now)
            continue;
        size_t h = e->h, t = e->t;
        double *cur = emb + h * dims, *oth = seen(p, t, dims);
        bool own = t >= p->lo && t < p->hi;
        double d2 = sq_dist(cur, oth, dims), coef = 0;
        if (d2 > 0) {
            double pb = powb(d2, bf, b);
            coef = -2.0 * a * b * (pb / d2) / (a * pb + 1.0);
        }
        double *owe = own ? NULL : p->owed + p->nowed * dims;
        if (!own)
            p->owed_at[p->nowed++] = t;
        for (size_t k = 0; k < dims; k++) {
            double gr = clip(coef * (cur[k] - oth[k]));
            cur[k] += gr * alpha;
            if (own)
                oth[k] -= gr * alpha;
            else
                owe[k] = -gr * alpha;
        }
        e->next += e->eps;
        size_t nneg = (size_t)((now - e->nextneg) / e->eneg);
        for (size_t s = 0; s < nneg; s++) {
            size_t o = negative(p, dims);
            if (o == h)
                continue;
            oth = seen(p, o, dims);
            d2 = sq_dist(cur, oth, dims);
            coef = d2 > 0 ? 2.0 * b / ((0.001 + d2) * (a * powb(d2, bf, b) + 1.0)) : 0.0;
            for (size_t k = 0; k < dims; k++) /* umap-learn's: 4 where the coefficient is not positive */
                cur[k] += (coef > 0 ? clip(coef * (cur[k] - oth[k])) : GRAD_CLIP) * alpha;
        }
        e->nextneg += (double)nneg * e->eneg;
    }
}

static void *run_part(void *arg)
{
    part *p = arg;
    if (p->l->dims == 2)
        epoch_of(p, 2);
    else
        epoch_of(p, p->l->dims);
    return NULL;
}

/* umap-learn's optimize_layout_euclidean with move_other, its edges cut into parts
 * (above), up to LAYOUT_PARTS threads. */
static int layout(double *emb, size_t n, size_t dims, const graph *g, size_t epochs, double a, double b,
                  uint64_t seed, es_err *err)
{
    lay l = {.n = n, .dims = dims, .a = a, .b = b, .emb = emb};
    l.prev = es_malloc(n * dims * sizeof *l.prev);
    double top = 0;
    for (size_t e = 0; e < g->m; e++)
        top = fmax(top, g->w[e]);
    part parts[LAYOUT_PARTS];
    uint64_t sm = seed;
    for (size_t q = 0; q < LAYOUT_PARTS; q++) {
        part *p = &parts[q];
        *p = (part){.l = &l, .lo = n * q / LAYOUT_PARTS, .hi = n * (q + 1) / LAYOUT_PARTS};
        p->r = (rng){{(uint32_t)(splitmix(&sm) | 2u), (uint32_t)(splitmix(&sm) | 8u), (uint32_t)(splitmix(&sm) | 16u)}};
        for (size_t s = 0; s < AHEAD; s++)
            p->ahead[s] = draw(&p->r, n);
        size_t m = 0;
        for (size_t e = 0; e < g->m; e++)
            m += g->head[e] >= p->lo && g->head[e] < p->hi;
        p->edges = es_malloc((m ? m : 1) * sizeof *p->edges);
        for (size_t e = 0; e < g->m; e++) {
            if (g->head[e] < p->lo || g->head[e] >= p->hi)
                continue;
            double samples = (double)epochs * g->w[e] / top, eps = samples > 0 ? (double)epochs / samples : -1;
            p->edges[p->m++] = (ledge){.next = eps, .eps = eps, .nextneg = eps / NEGATIVE_RATE,
                                       .eneg = eps / NEGATIVE_RATE, .h = (uint32_t)g->head[e],
                                       .t = (uint32_t)g->tail[e]};
        }
        p->owed_at = es_malloc((p->m ? p->m : 1) * sizeof *p->owed_at);
        p->owed = es_malloc((p->m ? p->m : 1) * dims * sizeof *p->owed);
    }
    unsigned threads = es_blas_job_threads();
    threads = threads < LAYOUT_PARTS ? threads : LAYOUT_PARTS;
    es_progress_begin("layout", epochs);
    int rc = 0;
    for (size_t ep = 0; ep < epochs && rc == 0; ep++) {
        l.alpha = 1.0 - (double)ep / (double)epochs;
        l.now = (double)ep;
        memcpy(l.prev, emb, n * dims * sizeof *emb);
        pthread_t tid[LAYOUT_PARTS];
        bool started[LAYOUT_PARTS] = {false};
        for (size_t q = 1; q < threads; q++)
            started[q] = pthread_create(&tid[q], NULL, run_part, &parts[q]) == 0;
        for (size_t q = 0; q < LAYOUT_PARTS; q++)
            if (q == 0 || q >= threads || !started[q])
                run_part(&parts[q]);
        for (size_t q = 1; q < threads; q++)
            if (started[q])
                pthread_join(tid[q], NULL);
        for (size_t q = 0; q < LAYOUT_PARTS; q++)
            for (size_t o = 0; o < parts[q].nowed; o++)
                for (size_t k = 0; k < dims; k++)
                    emb[parts[q].owed_at[o] * dims + k] += parts[q].owed[o * dims + k];
        es_progress_step();
        rc = es_progress_check(err);
    }
    for (size_t q = 0; q < LAYOUT_PARTS; q++) {
        free(parts[q].edges);
        free(parts[q].owed_at);
        free(parts[q].owed);
    }
    free(l.prev);
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
    int rc = es_umap_knn(x, n, d, p->metric, k, 0, nbr, dist, err);
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
