/* The small steps of a decoder layer, in a fixed float order (numeric.h): norms, residual adds, SwiGLU's gate,
 * RoPE, and one query's attention. Each works on one row (attention on one row and head), so a verification's rows
 * are computed as one-row steps compute them, whichever thread runs them. */
#include "layer.h"

#include "numeric.h"

void pg_rms_norm(const float *x, const float *weight, int width, float eps, float *out) {
    float inv = 1.0f / sqrtf(pg_dot(x, x, width) / (float)width + eps);
    for (int i = 0; i < width; i++) out[i] = (x[i] * inv) * weight[i];
}

void pg_add(float *x, const float *add, int width) {
    for (int i = 0; i < width; i++) x[i] += add[i];
}

void pg_silu_mul(const float *gate_up, int inter, float *out) {
    const float *up = gate_up + inter;
    int i = 0;
#if defined(PG_AVX512)
    const __m512 one = _mm512_set1_ps(1.0f), zero = _mm512_setzero_ps();
    for (; i + 16 <= inter; i += 16) {
        __m512 g = _mm512_loadu_ps(gate_up + i), e = pg_exp16(_mm512_sub_ps(zero, _mm512_abs_ps(g)));
        __m512 denominator = _mm512_add_ps(one, e);
        __mmask16 positive = _mm512_cmp_ps_mask(g, zero, _CMP_GE_OQ);
        __m512 sigmoid = _mm512_mask_blend_ps(positive, _mm512_div_ps(e, denominator),
                                              _mm512_div_ps(one, denominator));
        _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_mul_ps(g, sigmoid), _mm512_loadu_ps(up + i)));
    }
#elif defined(PG_AVX2)
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    const __m256 sign = _mm256_set1_ps(-0.0f);
    for (; i + 8 <= inter; i += 8) {
        __m256 g = _mm256_loadu_ps(gate_up + i), e = pg_exp8(_mm256_sub_ps(zero, _mm256_andnot_ps(sign, g)));
        __m256 denominator = _mm256_add_ps(one, e);
        __m256 positive = _mm256_cmp_ps(g, zero, _CMP_GE_OQ);
        __m256 sigmoid = _mm256_blendv_ps(_mm256_div_ps(e, denominator), _mm256_div_ps(one, denominator), positive);
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_mul_ps(g, sigmoid), _mm256_loadu_ps(up + i)));
    }
#endif
    for (; i < inter; i++) {
        float g = gate_up[i], e = pg_exp_nonpositive(0.0f - fabsf(g)); /* silu(g) = g * sigmoid(g) */
        float sigmoid = g >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
        out[i] = (g * sigmoid) * up[i];
    }
}

void pg_rotate(const float *x, const float *cos, const float *ssin, int dim, float *out) {
    int half = dim / 2;
    for (int i = 0; i < half; i++) out[i] = x[i] * cos[i] + x[i + half] * ssin[i];
    for (int i = half; i < dim; i++) out[i] = x[i] * cos[i] + x[i - half] * ssin[i];
}

void pg_store_entry(uint16_t *keys, uint16_t *values, int dim, int64_t slot, const float *key, const float *value) {
    uint16_t *tile = keys + (slot / PG_KEY_TILE) * dim * PG_KEY_TILE + slot % PG_KEY_TILE, halves[256];
    pg_halves(key, dim, halves);
    for (int i = 0; i < dim; i++) tile[(int64_t)i * PG_KEY_TILE] = halves[i];
    pg_halves(value, dim, values + slot * dim);
}

#define MAX_QUERIES 4 /* queries one pass over the keys serves (heads sharing a key head) */

/* scores[j][s] = (q_j . key_s) * scale for the slots of `tiles` whole key tiles, each a chain of fused steps over the
 * head's dimensions in order (a vector lane per slot); each key tile read once for the nq (<= MAX_QUERIES) queries */
static void key_scores(int nq, const float *const *q, const uint16_t *keys, int dim, int64_t tiles, float scale,
                       float *const *out) {
    const int64_t stride = (int64_t)dim * PG_KEY_TILE;
    int64_t t = 0;
#if defined(PG_AVX512)
    const __m512 scaled = _mm512_set1_ps(scale);
    for (; t + 4 <= tiles; t += 4) { /* four tiles per query in flight: independent chains */
        const uint16_t *k = keys + t * stride;
        __m512 a[MAX_QUERIES][4];
        for (int j = 0; j < nq; j++) a[j][0] = a[j][1] = a[j][2] = a[j][3] = _mm512_setzero_ps();
        for (int i = 0; i < dim; i++) {
            __m512 kv[4];
            for (int x = 0; x < 4; x++)
                kv[x] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k + x * stride + i * PG_KEY_TILE)));
            for (int j = 0; j < nq; j++) {
                __m512 qi = _mm512_set1_ps(q[j][i]);
                for (int x = 0; x < 4; x++) a[j][x] = _mm512_fmadd_ps(qi, kv[x], a[j][x]);
            }
        }
        for (int j = 0; j < nq; j++)
            for (int x = 0; x < 4; x++) _mm512_storeu_ps(out[j] + (t + x) * 16, _mm512_mul_ps(a[j][x], scaled));
    }
    for (; t < tiles; t++) {
        const uint16_t *k = keys + t * stride;
        __m512 a[MAX_QUERIES];
        for (int j = 0; j < nq; j++) a[j] = _mm512_setzero_ps();
        for (int i = 0; i < dim; i++) {
            __m512 k0 = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(k + i * PG_KEY_TILE)));
            for (int j = 0; j < nq; j++) a[j] = _mm512_fmadd_ps(_mm512_set1_ps(q[j][i]), k0, a[j]);
        }
        for (int j = 0; j < nq; j++) _mm512_storeu_ps(out[j] + t * 16, _mm512_mul_ps(a[j], scaled));
    }
#elif defined(PG_AVX2)
    const __m256 scaled = _mm256_set1_ps(scale);
    for (; t + 1 <= tiles; t++) {
        const uint16_t *k = keys + t * stride;
        __m256 a[MAX_QUERIES][2];
        for (int j = 0; j < nq; j++) a[j][0] = a[j][1] = _mm256_setzero_ps();
        for (int i = 0; i < dim; i++) {
            __m256 k0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + i * PG_KEY_TILE)));
            __m256 k1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(k + i * PG_KEY_TILE + 8)));
            for (int j = 0; j < nq; j++) {
                __m256 qi = _mm256_set1_ps(q[j][i]);
                a[j][0] = _mm256_fmadd_ps(qi, k0, a[j][0]);
                a[j][1] = _mm256_fmadd_ps(qi, k1, a[j][1]);
            }
        }
        for (int j = 0; j < nq; j++) {
            _mm256_storeu_ps(out[j] + t * 16, _mm256_mul_ps(a[j][0], scaled));
            _mm256_storeu_ps(out[j] + t * 16 + 8, _mm256_mul_ps(a[j][1], scaled));
        }
    }
#endif
    for (; t < tiles; t++)
        for (int j = 0; j < nq; j++)
            for (int lane = 0; lane < PG_KEY_TILE; lane++) {
                float acc = 0.0f;
                for (int i = 0; i < dim; i++)
                    acc = fmaf(q[j][i], pg_half_to_float(keys[t * stride + i * PG_KEY_TILE + lane]), acc);
                out[j][t * 16 + lane] = acc * scale;
            }
}

/* sum_j = sum over s < n of w_j[s] * values[slot(s)] (rows of dim), for nq (<= MAX_QUERIES) weightings, each
 * element a chain of fused steps over s in order; each value row read once for every weighting */
static void weigh_values(int nq, const float *const *w, const uint16_t *values, int64_t start,
                         const int64_t *picked, int64_t n, int dim, float *const *sum) {
#define SLOT(s) ((s) < start || picked == NULL ? (s) : picked[(s) - start])
    int i = 0;
#if defined(PG_AVX512)
    for (; i + 64 <= dim; i += 64) {
        __m512 a[MAX_QUERIES][4];
        for (int j = 0; j < nq; j++) a[j][0] = a[j][1] = a[j][2] = a[j][3] = _mm512_setzero_ps();
        for (int64_t s = 0; s < n; s++) {
            const uint16_t *row = values + SLOT(s) * dim + i;
            __m512 v[4];
            for (int x = 0; x < 4; x++) v[x] = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(row + 16 * x)));
            for (int j = 0; j < nq; j++) {
                __m512 ws = _mm512_set1_ps(w[j][s]);
                for (int x = 0; x < 4; x++) a[j][x] = _mm512_fmadd_ps(ws, v[x], a[j][x]);
            }
        }
        for (int j = 0; j < nq; j++)
            for (int x = 0; x < 4; x++) _mm512_storeu_ps(sum[j] + i + 16 * x, a[j][x]);
    }
    for (; i + 16 <= dim; i += 16) {
        __m512 a[MAX_QUERIES];
        for (int j = 0; j < nq; j++) a[j] = _mm512_setzero_ps();
        for (int64_t s = 0; s < n; s++) {
            __m512 v = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)(values + SLOT(s) * dim + i)));
            for (int j = 0; j < nq; j++) a[j] = _mm512_fmadd_ps(_mm512_set1_ps(w[j][s]), v, a[j]);
        }
        for (int j = 0; j < nq; j++) _mm512_storeu_ps(sum[j] + i, a[j]);
    }
#elif defined(PG_AVX2)
    for (; i + 16 <= dim; i += 16) {
        __m256 a[MAX_QUERIES][2];
        for (int j = 0; j < nq; j++) a[j][0] = a[j][1] = _mm256_setzero_ps();
        for (int64_t s = 0; s < n; s++) {
            const uint16_t *row = values + SLOT(s) * dim + i;
            __m256 v0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)row));
            __m256 v1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(row + 8)));
            for (int j = 0; j < nq; j++) {
                __m256 ws = _mm256_set1_ps(w[j][s]);
                a[j][0] = _mm256_fmadd_ps(ws, v0, a[j][0]);
                a[j][1] = _mm256_fmadd_ps(ws, v1, a[j][1]);
            }
        }
        for (int j = 0; j < nq; j++) {
            _mm256_storeu_ps(sum[j] + i, a[j][0]);
            _mm256_storeu_ps(sum[j] + i + 8, a[j][1]);
        }
    }
#endif
    for (; i < dim; i++)
        for (int j = 0; j < nq; j++) {
            float acc = 0.0f;
            for (int64_t s = 0; s < n; s++) acc = fmaf(w[j][s], pg_half_to_float(values[SLOT(s) * dim + i]), acc);
            sum[j][i] = acc;
        }
#undef SLOT
}

void pg_attend(int nq, const float *const *q, const uint16_t *keys, const uint16_t *values, int dim, int64_t prefix,
               int64_t end, int64_t own, const uint8_t *sees, float scale, float *scores, int64_t room,
               int64_t *picked, float *const *out, int64_t context, float *const *mass) {
    /* every slot's score, then the ones this query sees in order: slots before `prefix`, then those it sees after;
     * a tree node's path lands where a one-row step would have it (its depth after the cache) */
    int64_t n = sees == NULL ? own + 1 : prefix, scored = sees == NULL ? n : end;
    for (int first = 0; first < nq; first += MAX_QUERIES) {
        int count = nq - first < MAX_QUERIES ? nq - first : MAX_QUERIES;
        float *w[MAX_QUERIES], sums[MAX_QUERIES][256], *sum[MAX_QUERIES];
        for (int j = 0; j < count; j++) {
            w[j] = scores + j * room;
            sum[j] = sums[j];
        }
        key_scores(count, q + first, keys, dim, (scored + PG_KEY_TILE - 1) / PG_KEY_TILE, scale, w);
        int64_t m = n;
        if (sees != NULL) {
            for (int64_t slot = prefix; slot < end; slot++)
                if (sees[slot - prefix]) {
                    picked[m - prefix] = slot;
                    for (int j = 0; j < count; j++) w[j][m] = w[j][slot];
                    m++;
                }
        }
        float total[MAX_QUERIES];
        for (int j = 0; j < count; j++) {
            pg_exp_many(w[j], m, pg_max(w[j], m));
            total[j] = pg_sum(w[j], m);
        }
        weigh_values(count, (const float *const *)w, values, prefix, sees == NULL ? NULL : picked, m, dim, sum);
        for (int j = 0; j < count; j++) {
            for (int i = 0; i < dim; i++) out[first + j][i] = sum[j][i] / total[j];
            if (mass != NULL) { /* the query's weight on slot 0, on the slots before `context`, on the rest */
                float before = 0.0f, after = 0.0f;
                for (int64_t s = 0; s < m; s++) {
                    if ((s < prefix || sees == NULL ? s : picked[s - prefix]) < context)
                        before += w[j][s];
                    else
                        after += w[j][s];
                }
                mass[first + j][0] = w[j][0] / total[j];
                mass[first + j][1] = before / total[j];
                mass[first + j][2] = after / total[j];
            }
        }
    }
}
