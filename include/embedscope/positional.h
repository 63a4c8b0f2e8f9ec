/* embedscope positional analyses (issue 4): weight alignment, positional-only
 * attention, periodicity, robust row-norm outliers, Toeplitz (relative-position)
 * scores, the row-averaging ablation and singular-value degeneracy.
 * Pure functions from matrices / decompositions to immutable result structs; no
 * JSON, no HTTP. Ownership and failure rules: see core.h; every result struct has
 * an es_*_free that accepts NULL. Parameter errors are ES_E_PARAM with `param`
 * naming the request parameter used by the API. */
#ifndef EMBEDSCOPE_POSITIONAL_H
#define EMBEDSCOPE_POSITIONAL_H

#include <stdbool.h>
#include <stddef.h>
#include "embedscope/analysis.h"
#include "embedscope/core.h"
#include "embedscope/linalg.h"
#include "embedscope/store.h"

/* ---------------------------------------------------------------- 1. weight alignment */

/* Does a weight matrix W read the subspace of a reference R (e.g. W_pos)?
 * capture: es_capture_compute(r, k, w), the share of each of W's model-space
 * singular vectors inside R's top-k subspace, with baseline k/d.
 * overlap: es_overlap_compute(w, kw, r, kr, bins, 0), rows W's vectors, columns R's.
 * top_mean[i]: mean capture over W's top top_m[i] vectors, for top_m in
 * {1, 5, 10, 20, 50} up to the number of W's vectors. */
typedef struct es_alignment {
    es_capture *capture;
    es_grid *overlap;
    size_t n_top;
    size_t *top_m;
    double *top_mean;
} es_alignment;
/* n_top for W's count vectors: how many summary sizes are at most count. Never fails. */
size_t es_alignment_summary_count(size_t count);
/* ES_E_PARAM "method" if either holds singular values only; ES_E_INCOMPATIBLE
 * if the model dimensions differ; ES_E_PARAM "k" (k not in 1..r->r), and the errors of es_overlap_compute (its "ka"/"kb"/"bins"). */
int es_alignment_compute(const es_svd *w, const es_svd *r, size_t k, size_t kw, size_t kr,
                         size_t bins, es_alignment **out, es_err *err);
void es_alignment_free(es_alignment *a);

/* ---------------------------------------------------------------- 2. positional-only attention */

/* One GPT-2 attention layer applied to the position embeddings alone:
 * x_p = LayerNorm(P_p) (biased variance, weight ln_weight, bias ln_bias, eps),
 * q = x W_q + b_q, k = x W_k + b_k with W_q = c_attn columns 0..d-1 and W_k =
 * columns d..2d-1 (Conv1D [in, out]), head h owns columns h*dh..(h+1)*dh-1 of each,
 * dh = d / n_heads; scores q k^T / sqrt(dh), causal mask (key <= query), softmax. */
typedef struct es_attn_layer {
    size_t layer;                   /* echoed in the results */
    const es_matrix *pos;           /* W_pos: items are positions, model axis length d */
    const es_matrix *ln_weight;     /* d values (1 x d or d x 1) */
    const es_matrix *ln_bias;       /* d values */
    const es_matrix *qkv_weight;    /* c_attn weight, model axis rows: 3d items x d */
    const es_matrix *qkv_bias;      /* 3d values */
    size_t n_heads;                 /* 12 for GPT-2 small */
    double eps;                     /* 1e-5 for GPT-2 */
} es_attn_layer;

/* Scores of one head over the query positions [q_start, q_stop):
 * prev = mean over queries p >= 1 of a[p][p-1]; self = mean of a[p][p];
 * distance = mean of sum_j a[p][j] (p - j). */
typedef struct es_attn_head {
    size_t layer, head;
    double prev, self, distance;
} es_attn_head;

typedef struct es_attn_scores {
    size_t layer, n_heads, d_head, n_pos;
    size_t q_start, q_stop;
    es_attn_head *heads;            /* n_heads, in head order */
} es_attn_scores;

/* All heads of one layer. q_stop = 0 means n_pos. ES_E_PARAM "queries" unless
 * q_start < q_stop <= n_pos and q_stop >= 2 (the range must hold a position >= 1);
 * ES_E_INCOMPATIBLE naming the field ("ln_weight", "qkv_weight", ...) when shapes
 * disagree; ES_E_PARAM "n_heads" if it does not divide d. */
int es_attn_scores_compute(const es_attn_layer *in, size_t q_start, size_t q_stop,
                           es_attn_scores **out, es_err *err);
/* The checks of es_attn_scores_compute alone (shapes, head count, eps, query
 * range), so a caller can refuse a request before queueing its computation;
 * *q_stop (0 = n_pos) becomes the resolved end. Fails like it. */
int es_attn_check(const es_attn_layer *in, size_t q_start, size_t *q_stop, es_err *err);
void es_attn_scores_free(es_attn_scores *s);

/* All heads of the given layers ranked by prev, descending (ties: layer, head). */
typedef struct es_attn_ranking {
    size_t count;
    es_attn_head *heads;
} es_attn_ranking;
/* ES_E_PARAM "layers" when n_layers is 0. */
int es_attn_rank(const es_attn_scores *const *layers, size_t n_layers, es_attn_ranking **out,
                 es_err *err);
void es_attn_ranking_free(es_attn_ranking *r);

/* Head `head`'s attention pattern, rows = queries [q_start, q_stop) (edges are
 * positions), columns = keys [0, q_stop), reduced to at most bins x bins block
 * means (bins = 0: full). Errors as es_attn_scores_compute plus ES_E_PARAM "head". */
int es_attn_pattern(const es_attn_layer *in, size_t head, size_t q_start, size_t q_stop,
                    size_t bins, es_grid **out, es_err *err);

/* ---------------------------------------------------------------- 3. periodicity, outliers */

/* Dominant period of a uniformly sampled curve x_t, t = 0..n-1 (positions step apart),
 * or none. The mean is removed. Periodogram P_k = |sum_t x_t e^{-2 pi i k t / n}|^2 for
 * k = 1..floor(n/2) (direct sums); peak_bin = argmax. Refinement: the frequency f
 * (in cycles per n samples) in [max(k-1, 1/2), min(k+1, n/2)] maximising the
 * least-squares sinusoid power ||proj of x onto span{cos 2 pi f t/n, sin 2 pi f t/n}
 * (both centred)||^2, by golden-section search. It equals the periodogram at integer
 * bins up to the cos/sin cross term and, unlike the DTFT maximum, is maximised exactly
 * at f for a pure sinusoid (on real curves the search finds the local maximum next
 * to the peak bin). fit_cycles = f, fit_period = n * step / f (positions per cycle).
 * peak_share = variance share of bins peak-1..peak+1: sum of w_k P_k over them / (n
 * sum_t x_t^2), w_k = 2 except 1 for the Nyquist bin (Parseval).
 *
 * The fit always finds some frequency, so it is reported as a period (found, cycles =
 * fit_cycles, period = fit_period) only when none of these holds (verdict, checked in
 * this order):
 *  - ES_PERIOD_CONSTANT: the curve is constant;
 *  - ES_PERIOD_EDGE: f lies on an edge of its search bracket other than n/2 (within 1e-6 cycles: the search locates a flat maximum
 *    only to ~1e-8) — the fit ran into the half-cycle floor or the bracket, so the curve has
 *    no interior maximum there (a trend, a half cycle). n/2 is not an edge: the
 *    sinusoid power is symmetric about it (aliasing), so a maximum there is genuine;
 *  - ES_PERIOD_UNDER_ONE_CYCLE: f < 1 - 1e-6: the rows do not hold one full cycle,
 *    so nothing shows that the curve repeats;
 *  - ES_PERIOD_NOT_SIGNIFICANT: Fisher's g-test does not reject white noise at level
 *    alpha: g = max_k P_k / sum_k P_k over the n_ordinates = floor(n/2) ordinates
 *    k = 1..floor(n/2) (for even n the Nyquist ordinate is included: chi^2 with 1
 *    rather than 2 degrees of freedom under the null, which makes the test slightly
 *    liberal for that one bin), p = P(g' >= g) = sum_{j=1}^{floor(1/g)} (-1)^{j-1}
 *    C(m, j) (1 - j g)^{m-1} (Fisher 1929), m = n_ordinates; not significant when
 *    p >= alpha. The series is summed only when its first term S1 = m (1 - g)^{m-1} is
 *    below 1: then |term_j| <= S1^j / j! and the sum is accurate to rounding
 *    (p_exact). When S1 >= 1 the peak is no larger than the typical maximum of white
 *    noise: p is not summed (the alternating series would lose all digits to
 *    cancellation) and p_value holds the lower bound S1 / (1 + S1) >= 1/2 (de Caen's
 *    inequality with S2 <= S1^2 / 2), which alone decides "not significant". */
typedef enum es_period_verdict {
    ES_PERIOD_FOUND,
    ES_PERIOD_CONSTANT,
    ES_PERIOD_EDGE,
    ES_PERIOD_UNDER_ONE_CYCLE,
    ES_PERIOD_NOT_SIGNIFICANT,
} es_period_verdict;
/* "found", "constant", "edge_of_search_range", "under_one_cycle", "not_significant". */
const char *es_period_verdict_name(es_period_verdict v);
/* Default significance level of the g-test. */
#define ES_PERIOD_ALPHA 0.01
typedef struct es_period {
    size_t peak_bin;
    double fit_cycles;   /* refined frequency f (0 for a constant curve) */
    double fit_period;   /* n * step / f (0 for a constant curve) */
    double peak_share;
    es_period_verdict verdict;
    bool found;          /* verdict == ES_PERIOD_FOUND */
    double cycles, period;   /* fit_* when found, else 0 */
    double search_lo, search_hi;  /* the refinement bracket in cycles */
    size_t n_ordinates;  /* m of the g-test */
    double g;            /* Fisher's statistic (0 for a constant curve) */
    double p_value;      /* exact when p_exact, else a lower bound (>= 1/2) */
    bool p_exact;
    double alpha;
    /* The sinusoid fitted at fit_cycles (least squares with an offset):
     * x_t ~ c + amplitude cos(2 pi fit_cycles t / n + phase), t = 0 at the first
     * sample; r2 = its share of the curve's variance (0 for a constant curve). */
    double amplitude, phase, r2;
} es_period;
/* x is read at x[t * stride]. ES_E_PARAM "rows" if n < 4, "alpha" unless
 * 0 < alpha < 1/2; a constant curve gets peak_bin 0, verdict constant, zeros. */
int es_period_estimate(const double *x, size_t n, size_t stride, double step, double alpha, es_period *out,
                       es_err *err);
/* Periods of every column of the n evenly spaced items idx (model orientation:
 * each model dimension as a function of position), as es_period_estimate with
 * level alpha: *out holds d = es_matrix_dim(m) periods, *step the position step.
 * ES_E_PARAM "rows" for fewer than 4 or unevenly spaced items, "alpha"; stops
 * between columns when the computation must (es_progress_check). */
int es_periodicity_columns(const es_matrix *m, const size_t *idx, size_t n, double alpha, es_period **out,
                           long *step, es_err *err);

/* Fisher's g-test p-value for m ordinates (see es_period). *exact is false when
 * the returned value is only the lower bound S1 / (1 + S1). Never fails; g outside
 * (0, 1] gives 1 (g <= 0) or 0 (g > 1). */
double es_fisher_g_pvalue(double g, size_t m, bool *exact);

/* Periods of the top m left singular vectors u_j (identical to those of the PCA
 * coordinates s_j u_j: a scale changes nothing, so pass the columns-centred
 * decomposition for PCA components). Turns of the helix: among the pairs of the top
 * min(3, r) components, the pair (a, b) with the closest periods (relative
 * difference); turns = the frequency f (cycles over the n rows, either sense) of
 * the least-squares circle c + a e^{2 pi i f t / n} fitted to the PCA coordinates
 * s_a u_a(t) + i s_b u_b(t): the complex periodogram's peak, refined as the
 * periods are. For a helix of period P it is n * step / P exactly, the measure of
 * the components' cycles. */
typedef struct es_periodicity {
    size_t n, m;
    long step;                  /* position step between consecutive selected rows */
    es_period *components;      /* m */
    size_t turn_plane[2];       /* components a < b (0-based) */
    double turns;
} es_periodicity;
/* ES_E_PARAM "k" unless 1 <= m <= r; ES_E_PARAM "rows" if the selected rows are
 * not evenly spaced (an exclusion inside the range) or fewer than 4; "alpha" as
 * es_period_estimate; fails as es_svd_left (src: the matrix svd was computed from) when the left vectors cannot be formed. The helix plane is chosen among components with a period
 * (found); with fewer than two such it is (0, 1). */
int es_periodicity_from_svd(const es_svd *svd, const es_matrix *src, size_t m, double alpha, es_periodicity **out,
                            es_err *err);
void es_periodicity_free(es_periodicity *p);

/* Row-norm outliers: norm_i = ||item i|| (uncentred); median and MAD (numpy
 * median conventions); scale = max(1.4826 MAD, 1e-9 median, DBL_MIN) — the relative
 * floor keeps constant-norm matrices (sinusoidal) from flagging rounding noise;
 * score_i = |norm_i - median| / scale; flagged when score > threshold (default 3.5). */
#define ES_OUTLIER_THRESHOLD 3.5
typedef struct es_outliers {
    size_t n;
    size_t *rows;               /* n item indices */
    double *norm, *score;       /* n each */
    double median, mad, scale, threshold;
    size_t n_flagged;
    size_t *flagged;            /* item indices, ascending selection order */
} es_outliers;
/* ES_E_PARAM "threshold" unless finite and > 0; "rows" if n == 0. */
int es_outliers_compute(const es_matrix *m, const size_t *idx, size_t n, double threshold,
                        es_outliers **out, es_err *err);
void es_outliers_free(es_outliers *o);

/* ---------------------------------------------------------------- 4. Toeplitz score */

/* For an n x n matrix G whose row/column i sits at position pos[i] (NULL: i):
 * score = 1 - sum (G_ij - mean_{o(i,j)})^2 / sum (G_ij - mean(G))^2, mean_o the mean of
 * the entries with the same offset o = pos[i] - pos[j] (the diagonals for evenly
 * spaced positions): the variance share explained by a function of the offset
 * alone. score = 1 when G is constant. diag_mean[t] = mean at offset t - span,
 * span = max pos - min pos, 2 span + 1 entries, NaN-free: offsets without pairs
 * hold 0 and count 0. */
typedef struct es_toeplitz {
    size_t n, span;
    double score;
    double *diag_mean;          /* 2 span + 1 */
    size_t *diag_count;         /* 2 span + 1 */
} es_toeplitz;
/* ES_E_PARAM "rows" if n == 0. */
int es_toeplitz_score(const double *g, size_t n, const size_t *pos, es_toeplitz **out,
                      es_err *err);
typedef enum es_gram_kind { ES_GRAM_DOT, ES_GRAM_COSINE } es_gram_kind;
/* Toeplitz score of the uncentred row Gram (x_i . x_j) or cosine matrix of the n
 * selected items idx (offsets are item-index differences). Zero rows have cosine 0.
 * ES_E_PARAM "rows" if n == 0, ES_E_NOMEM if the n x n matrix cannot be allocated. */
int es_toeplitz_compute(const es_matrix *m, const size_t *idx, size_t n, es_gram_kind kind,
                        es_toeplitz **out, es_err *err);
/* RoPE relative property: rotate q by m t_i and k by n t_i in each pair (2i, 2i+1)
 * using the es_gen_rope table (rows = positions, columns 2i/2i+1 = cos/sin) and
 * score the n_pos x n_pos matrix S[m][n] = rot_m(q) . rot_n(k) (-> 1). q and k hold
 * the table's column count values; ES_E_PARAM naming `param` (the caller's name
 * for the table) if it is odd. If s_out is non-NULL it receives S (n_pos x n_pos,
 * caller frees). */
int es_rope_relative(const es_matrix *rope, const char *param, const double *q, const double *k,
                     es_toeplitz **out, double **s_out, es_err *err);
/* The table check of es_rope_relative alone (an even, non-zero column count and
 * some positions): ES_E_PARAM naming param otherwise. */
int es_rope_check(const es_matrix *rope, const char *param, es_err *err);
void es_toeplitz_free(es_toeplitz *t);

/* ---------------------------------------------------------------- 5. row-averaging ablation */

/* es_matrix_average_rows (the averaged matrix itself) lives in embedscope/store.h. */

/* How far averaging moves the selected rows in the top-k (k = min(3, r)) PCA space
 * of the original: pca is the columns-centred decomposition of `original` on its
 * rows; both the original rows x_i and the averaged rows a_i (same items) are
 * projected with the same mean and V_k: (x_i - mean) V_k, (a_i - mean) V_k.
 * disp_i = distance between the two; radius = mean distance of the original
 * coordinates from 0 (the centroid). */
typedef struct es_averaging {
    size_t n, k;
    size_t *rows;
    double *disp;               /* n */
    double mean_disp, max_disp;
    size_t max_row;             /* item index of the largest displacement */
    double radius, rel_mean, rel_max;  /* rel_* = *_disp / radius (0 if radius 0) */
} es_averaging;
/* ES_E_PARAM "method" if pca holds singular values only (es_svd_need_vectors);
 * ES_E_PARAM "centering" unless pca is columns-centred; ES_E_INCOMPATIBLE ("matrix"
 * / "average") if a matrix has another dimension or lacks a selected item. */
int es_averaging_compute(const es_svd *pca, const es_matrix *original, const es_matrix *averaged,
                         es_averaging **out, es_err *err);
void es_averaging_free(es_averaging *a);

/* ---------------------------------------------------------------- 6. degeneracy */

/* Groups of near-equal singular values: maximal runs j..e-1 (e - j >= 2) in which
 * every consecutive relative gap (s_j - s_{j+1}) / s_j is below the threshold
 * (default 1e-2; two zeros have gap 0). Inside a group individual singular vectors
 * are arbitrary up to rotation; subspace quantities summed over it are not. */
#define ES_DEGENERACY_GAP 1e-2
typedef struct es_degeneracy {
    double threshold;
    size_t count;
    size_t *start, *end;        /* [start, end) into s */
} es_degeneracy;
/* s descending, r values. ES_E_PARAM "gap" unless 0 < threshold < 1. */
int es_degeneracy_find(const double *s, size_t r, double threshold, es_degeneracy **out,
                       es_err *err);
void es_degeneracy_free(es_degeneracy *d);

#endif
