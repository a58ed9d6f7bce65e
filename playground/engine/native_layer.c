/* The small steps of an int4 decode layer, in C: everything but its four matrix products (PyTorch's int4 kernel
 * multiplies those), and the vocabulary head's int8 product. A one-row step in PyTorch spends more time
 * dispatching about 25 small ops a layer than computing them; here each group of them is one call.
 *
 * Every function works row by row with the same instructions whatever the row count, so a verification's rows get
 * bit for bit what one-row steps give them (row-exact verification needs nothing more of this file). Where two
 * threads share the work (attention, the head: OpenMP, PyTorch's own runtime, `threads` as the caller sets), they
 * split it by whole rows, heads or outputs, each computed as one thread alone would. bf16 values are uint16
 * (PyTorch's layout), rounded to nearest even as PyTorch rounds them. Compiled at load by
 * playground/engine/native.py. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#if defined(__AVX512F__) || (defined(__AVX2__) && defined(__FMA__))
#include <immintrin.h>
#endif

#ifdef _OPENMP
#include <omp.h>
#define THIS_THREAD omp_get_thread_num()
#else
#define THIS_THREAD 0
#endif

#define MAX_DIM 256 /* head dimensions up to this (native.py checks) */

static inline float from_bf16(uint16_t h) {
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

static inline uint16_t to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40u); /* NaN stays NaN */
    u += 0x7fffu + ((u >> 16) & 1u);
    return (uint16_t)(u >> 16);
}

/* a . b, in an order fixed by n alone: vector partial sums (AVX-512 or AVX2 where compiled for them), reduced by
 * the same instructions every call, then the tail. */
static float dot(const float *a, const float *b, int n) {
    int i = 0;
    float sum = 0.0f;
#if defined(__AVX512F__)
    __m512 acc = _mm512_setzero_ps();
    for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
    sum = _mm512_reduce_add_ps(acc);
#elif defined(__AVX2__) && defined(__FMA__)
    __m256 acc = _mm256_setzero_ps();
    for (; i + 8 <= n; i += 8) acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
    __m128 half = _mm_add_ps(_mm256_castps256_ps128(acc), _mm256_extractf128_ps(acc, 1));
    half = _mm_add_ps(half, _mm_movehl_ps(half, half));
    sum = _mm_cvtss_f32(_mm_add_ss(half, _mm_movehdup_ps(half)));
#endif
    for (; i < n; i++) sum += a[i] * b[i];
    return sum;
}

/* e^x for x <= 0 (softmax's shifted scores, silu's -|g|), to about 2 ulp: 2^k times a polynomial of the rest,
 * written so that the compiler vectorises a loop of them (libm's expf is one call a value). */
static inline float exp_nonpositive(float x) {
    if (x < -87.0f) x = -87.0f; /* e^-87 is below float's normal range: a softmax weight of 0 either way */
    const float round = 12582912.0f; /* 1.5 * 2^23: adding and taking it away rounds to an integer, vectorisably */
    float k = (x * 1.44269504f + round) - round;
    float r = x - k * 0.693145752f - k * 1.42860677e-6f; /* ln 2 in two parts: r exact to float rounding */
    float p = 1.98756912e-4f;
    p = p * r + 1.39819994e-3f;
    p = p * r + 8.33345205e-3f;
    p = p * r + 4.16657962e-2f;
    p = p * r + 1.66666657e-1f;
    p = p * r + 5.00000001e-1f;
    p = p * r * r + r + 1.0f;
    int32_t bits = ((int32_t)k + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

/* x[r] += add[r] (bf16; skipped when add is NULL) for every row; then, for rows from `first` on, the RMS norm of
 * x[r] times weight, written as bf16 (out_bf16) or float32 (out_f32) from out's row 0. */
void add_norm(float *x, const uint16_t *add, const float *weight, int rows, int width, float eps, int first,
              uint16_t *out_bf16, float *out_f32) {
    for (int r = 0; r < rows; r++) {
        float *row = x + (int64_t)r * width;
        if (add != NULL) {
            const uint16_t *a = add + (int64_t)r * width;
            for (int i = 0; i < width; i++) row[i] += from_bf16(a[i]);
        }
        if (r < first) continue;
        float inv = 1.0f / sqrtf(dot(row, row, width) / (float)width + eps);
        int64_t at = (int64_t)(r - first) * width;
        if (out_bf16 != NULL)
            for (int i = 0; i < width; i++) out_bf16[at + i] = to_bf16(row[i] * inv * weight[i]);
        else
            for (int i = 0; i < width; i++) out_f32[at + i] = row[i] * inv * weight[i];
    }
}

/* sum = sum over s of weights[s] * values[seen[s]] (rows of dim), each element accumulated in the order of s, with
 * one fused multiply-add a term: the same arithmetic in the vector blocks and the scalar tail. */
static void weigh_values(const float *weights, const float *values, const int64_t *seen, int64_t n, int dim,
                         float *sum) {
    int i = 0;
#if defined(__AVX512F__)
    for (; i + 64 <= dim; i += 64) {
        __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t s = 0; s < n; s++) {
            const float *row = values + seen[s] * dim + i;
            __m512 w = _mm512_set1_ps(weights[s]);
            a0 = _mm512_fmadd_ps(w, _mm512_loadu_ps(row), a0);
            a1 = _mm512_fmadd_ps(w, _mm512_loadu_ps(row + 16), a1);
            a2 = _mm512_fmadd_ps(w, _mm512_loadu_ps(row + 32), a2);
            a3 = _mm512_fmadd_ps(w, _mm512_loadu_ps(row + 48), a3);
        }
        _mm512_storeu_ps(sum + i, a0);
        _mm512_storeu_ps(sum + i + 16, a1);
        _mm512_storeu_ps(sum + i + 32, a2);
        _mm512_storeu_ps(sum + i + 48, a3);
    }
#elif defined(__AVX2__) && defined(__FMA__)
    for (; i + 32 <= dim; i += 32) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
        for (int64_t s = 0; s < n; s++) {
            const float *row = values + seen[s] * dim + i;
            __m256 w = _mm256_set1_ps(weights[s]);
            a0 = _mm256_fmadd_ps(w, _mm256_loadu_ps(row), a0);
            a1 = _mm256_fmadd_ps(w, _mm256_loadu_ps(row + 8), a1);
            a2 = _mm256_fmadd_ps(w, _mm256_loadu_ps(row + 16), a2);
            a3 = _mm256_fmadd_ps(w, _mm256_loadu_ps(row + 24), a3);
        }
        _mm256_storeu_ps(sum + i, a0);
        _mm256_storeu_ps(sum + i + 8, a1);
        _mm256_storeu_ps(sum + i + 16, a2);
        _mm256_storeu_ps(sum + i + 24, a3);
    }
#endif
    for (; i < dim; i++) {
        float acc = 0.0f;
        for (int64_t s = 0; s < n; s++) acc = fmaf(weights[s], values[seen[s] * dim + i], acc);
        sum[i] = acc;
    }
}

/* RoPE as transformers applies it: x * cos + rotate_half(x) * sin, with rotate_half's sign folded into `ssin`. */
static void rotate(const uint16_t *x, const float *cos, const float *ssin, int dim, float *out) {
    int half = dim / 2;
    for (int i = 0; i < half; i++) out[i] = from_bf16(x[i]) * cos[i] + from_bf16(x[i + half]) * ssin[i];
    for (int i = half; i < dim; i++) out[i] = from_bf16(x[i]) * cos[i] + from_bf16(x[i - half]) * ssin[i];
}

/* One attention layer for `rows` new tokens, from the qkv product's output [rows, (heads + 2 kv_heads) * dim]:
 * rotate queries and keys (the new token r at position positions[r], or start + r where positions is NULL), write
 * keys and values into this layer's cache [kv_heads, capacity, dim] at slots start .. start + rows - 1, then let
 * each query attend to the cached keys 0 .. start - 1 and to the new keys it sees (sees [rows, rows], row-major;
 * where NULL, the new keys up to its own), in that order; `threads` share the (row, head) pairs. Out: [rows,
 * heads * dim] in bf16. Returns 0, or 1 where its scratch memory could not be had (nothing attended then). */
int attend(const uint16_t *qkv, int rows, int heads, int kv_heads, int dim, const float *cos_table,
            const float *ssin_table, const int64_t *positions, float *keys, float *values, int64_t capacity,
            int64_t start, const uint8_t *sees, float scale, uint16_t *out, int threads) {
    int width = (heads + 2 * kv_heads) * dim, group = heads / kv_heads;
    for (int r = 0; r < rows; r++) {
        const uint16_t *row = qkv + (int64_t)r * width;
        int64_t pos = positions != NULL ? positions[r] : start + r;
        for (int g = 0; g < kv_heads; g++) {
            int64_t slot = ((int64_t)g * capacity + start + r) * dim;
            rotate(row + (int64_t)(heads + g) * dim, cos_table + pos * dim, ssin_table + pos * dim, dim, keys + slot);
            const uint16_t *v = row + (int64_t)(heads + kv_heads + g) * dim;
            for (int i = 0; i < dim; i++) values[slot + i] = from_bf16(v[i]);
        }
    }
    if (threads < 1) threads = 1;
    int64_t most = start + rows; /* keys a query sees, at most */
    float *scores = malloc(sizeof(float) * (size_t)(threads * most));
    int64_t *seen = malloc(sizeof(int64_t) * (size_t)(rows * most)), *counts = malloc(sizeof(int64_t) * (size_t)rows);
    if (scores == NULL || seen == NULL || counts == NULL) {
        free(scores);
        free(seen);
        free(counts);
        return 1;
    }
    for (int r = 0; r < rows; r++) {
        int64_t *mine = seen + r * most, n = 0;
        for (int64_t s = 0; s < start; s++) mine[n++] = s;
        for (int c = 0; c < rows; c++)
            if (sees != NULL ? sees[(int64_t)r * rows + c] : c <= r) mine[n++] = start + c;
        counts[r] = n;
    }
#pragma omp parallel for num_threads(threads) schedule(static)
    for (int task = 0; task < rows * heads; task++) {
        int r = task / heads, h = task % heads;
        const uint16_t *row = qkv + (int64_t)r * width;
        const int64_t *mine = seen + r * most, n = counts[r];
        int64_t pos = positions != NULL ? positions[r] : start + r;
        float *weights = scores + (int64_t)THIS_THREAD * most;
        const float *k = keys + (int64_t)(h / group) * capacity * dim;
        const float *v = values + (int64_t)(h / group) * capacity * dim;
        float q[MAX_DIM], sum[MAX_DIM], top = -INFINITY, total = 0.0f;
        rotate(row + (int64_t)h * dim, cos_table + pos * dim, ssin_table + pos * dim, dim, q);
        for (int64_t s = 0; s < n; s++) {
            weights[s] = dot(q, k + mine[s] * dim, dim) * scale;
            if (weights[s] > top) top = weights[s];
        }
        for (int64_t s = 0; s < n; s++) weights[s] = exp_nonpositive(weights[s] - top);
        for (int64_t s = 0; s < n; s++) total += weights[s];
        weigh_values(weights, v, mine, n, dim, sum);
        uint16_t *o = out + (int64_t)r * heads * dim + (int64_t)h * dim;
        for (int i = 0; i < dim; i++) o[i] = to_bf16(sum[i] / total);
    }
    free(counts);
    free(seen);
    free(scores);
    return 0;
}

/* One output of an int8 product for R rows at once (1 to 4): the weights' row w[k] widened to float once, each
 * row's sum in two vector accumulators (alternate 16- or 8-lane blocks), reduced, then the scalar tail. A row's
 * arithmetic does not depend on R. */
static inline __attribute__((always_inline)) void int8_output(const int8_t *w, const float *x, int k, int R,
                                                              float scale, float *out, int64_t out_stride) {
    float sums[4];
    int i = 0;
#if defined(__AVX512F__)
    __m512 a[4], b[4];
    for (int r = 0; r < R; r++) a[r] = b[r] = _mm512_setzero_ps();
    for (; i + 32 <= k; i += 32) {
        __m512 w0 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(w + i))));
        __m512 w1 = _mm512_cvtepi32_ps(_mm512_cvtepi8_epi32(_mm_loadu_si128((const __m128i *)(w + i + 16))));
        for (int r = 0; r < R; r++) {
            a[r] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(x + (int64_t)r * k + i), a[r]);
            b[r] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(x + (int64_t)r * k + i + 16), b[r]);
        }
    }
    for (int r = 0; r < R; r++) sums[r] = _mm512_reduce_add_ps(_mm512_add_ps(a[r], b[r]));
#elif defined(__AVX2__) && defined(__FMA__)
    __m256 a[4], b[4];
    for (int r = 0; r < R; r++) a[r] = b[r] = _mm256_setzero_ps();
    for (; i + 16 <= k; i += 16) {
        __m256 w0 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(w + i))));
        __m256 w1 = _mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(w + i + 8))));
        for (int r = 0; r < R; r++) {
            a[r] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(x + (int64_t)r * k + i), a[r]);
            b[r] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(x + (int64_t)r * k + i + 8), b[r]);
        }
    }
    for (int r = 0; r < R; r++) {
        __m256 both = _mm256_add_ps(a[r], b[r]);
        __m128 half = _mm_add_ps(_mm256_castps256_ps128(both), _mm256_extractf128_ps(both, 1));
        half = _mm_add_ps(half, _mm_movehl_ps(half, half));
        sums[r] = _mm_cvtss_f32(_mm_add_ss(half, _mm_movehdup_ps(half)));
    }
#else
    for (int r = 0; r < R; r++) sums[r] = 0.0f;
#endif
    for (int r = 0; r < R; r++) {
        float sum = sums[r];
        for (int j = i; j < k; j++) sum += (float)w[j] * x[(int64_t)r * k + j];
        out[r * out_stride] = sum * scale;
    }
}

/* out [rows, n] (float32) = x [rows, k] (float32) times codes [n, k] (int8, one scale an output row) transposed:
 * the vocabulary head beside int4 layers, its input kept in float32. `threads` share the outputs. */
void int8_product(const float *x, int rows, int k, int n, const int8_t *codes, const float *scales, float *out,
                  int threads) {
#pragma omp parallel for num_threads(threads < 1 ? 1 : threads) schedule(static)
    for (int o = 0; o < n; o++) {
        const int8_t *w = codes + (int64_t)o * k;
        for (int r = 0; r < rows; r += 4) {
            const float *xr = x + (int64_t)r * k;
            float *y = out + (int64_t)r * n + o;
            switch (rows - r) {
                case 1: int8_output(w, xr, k, 1, scales[o], y, n); break;
                case 2: int8_output(w, xr, k, 2, scales[o], y, n); break;
                case 3: int8_output(w, xr, k, 3, scales[o], y, n); break;
                default: int8_output(w, xr, k, 4, scales[o], y, n); break;
            }
        }
    }
}

/* SwiGLU's gate: silu(gate) * up, from the fused gate-and-up product [rows, 2 * inter], as bf16 [rows, inter]. */
void silu_mul(const uint16_t *gate_up, int rows, int inter, uint16_t *out) {
    for (int r = 0; r < rows; r++) {
        const uint16_t *gate = gate_up + (int64_t)r * 2 * inter, *up = gate + inter;
        for (int i = 0; i < inter; i++) {
            float g = from_bf16(gate[i]), e = exp_nonpositive(-fabsf(g)); /* silu(g) = g * sigmoid(g) */
            float sigmoid = g >= 0.0f ? 1.0f / (1.0f + e) : e / (1.0f + e);
            out[(int64_t)r * inter + i] = to_bf16(g * sigmoid * from_bf16(up[i]));
        }
    }
}
