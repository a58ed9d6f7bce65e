/* What every file of the int4 path shares: the instruction set it was compiled for, half-precision conversions, and
 * the arithmetic whose order must not depend on it.
 *
 * One rule runs through the path: a value is computed by the same sequence of float operations on every
 * instruction set and for every row count and thread count. Integer sums are exact whatever their order, so the
 * products (int8 activations times 4- or 8-bit codes) may add them in any order; every float sum is written out in a
 * fixed order (`dot`, `sum16`), elementwise work is elementwise, and fused multiply-adds are spelled `fmaf` (the
 * file is compiled with -ffp-contract=off, so the compiler fuses nothing on its own). */
#ifndef PLAYGROUND_NUMERIC_H
#define PLAYGROUND_NUMERIC_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__AVX512F__) && defined(__AVX512BW__) && defined(__AVX512VL__) && defined(__FMA__) && defined(__F16C__)
#define PG_AVX512 1
#endif
#if defined(__AVX2__) && defined(__FMA__) && defined(__F16C__)
#define PG_AVX2 1
#endif
#if defined(PG_AVX512) || defined(PG_AVX2)
#include <immintrin.h>
#endif
#if defined(PG_AVX512) && defined(__AVX512VNNI__)
#define PG_VNNI 1 /* 8-bit dot products in one instruction: the products store 8-bit codes offset by 128 */
#endif

#ifdef _OPENMP
#include <omp.h>
#define PG_THREAD omp_get_thread_num()
#else
#define PG_THREAD 0
#endif

#define PG_BLOCK 32 /* inputs a scale covers, in weights and in activations (GGUF's Q4_1 and Q8_0 blocks) */
#define PG_TILE 16  /* outputs a product computes together */

static inline float pg_half_to_float(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000u) << 16, exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu, bits;
    if (exponent == 0x1fu) {
        bits = sign | 0x7f800000u | (mantissa << 13);
    } else if (exponent != 0) {
        bits = sign | ((exponent + 112u) << 23) | (mantissa << 13);
    } else if (mantissa == 0) {
        bits = sign;
    } else { /* subnormal: normalise */
        int e = -1;
        do {
            e++;
            mantissa <<= 1;
        } while ((mantissa & 0x400u) == 0);
        bits = sign | ((uint32_t)(112 - e) << 23) | ((mantissa & 0x3ffu) << 13);
    }
    float f;
    memcpy(&f, &bits, sizeof f);
    return f;
}

/* float to half, rounded to nearest even (as F16C's and numpy's conversions round) */
static inline uint16_t pg_float_to_half(float f) {
    uint32_t x;
    memcpy(&x, &f, sizeof x);
    uint32_t sign = (x >> 16) & 0x8000u, magnitude = x & 0x7fffffffu;
    if (magnitude >= 0x7f800000u) return (uint16_t)(sign | 0x7c00u | (magnitude > 0x7f800000u ? 0x200u : 0u));
    if (magnitude >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u); /* rounds past the largest half */
    if (magnitude < 0x38800000u) { /* below the smallest normal half: a subnormal or zero */
        if (magnitude < 0x33000000u) return (uint16_t)sign;
        uint32_t mantissa = (magnitude & 0x7fffffu) | 0x800000u;
        int shift = 126 - (int)(magnitude >> 23); /* the value is mantissa * 2^-shift units of 2^-24 */
        uint32_t half = mantissa >> shift, rest = mantissa & ((1u << shift) - 1), mid = 1u << (shift - 1);
        if (rest > mid || (rest == mid && (half & 1u))) half++;
        return (uint16_t)(sign | half);
    }
    uint32_t bits = magnitude - 0x38000000u; /* rebias the exponent, 127 - 15 = 112 (<< 23) */
    uint32_t half = bits >> 13, rest = bits & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (half & 1u))) half++;
    return (uint16_t)(sign | half);
}

/* a . b over n floats in a fixed order, whatever the instruction set: 16 partial sums (element i into sum i % 16,
 * by fused multiply-adds), then those 16 added pairwise, halves first (`pg_sum16`), then the tail in order. */
static inline float pg_sum16(const float *s) {
    float h8[8], h4[4];
    for (int i = 0; i < 8; i++) h8[i] = s[i] + s[i + 8];
    for (int i = 0; i < 4; i++) h4[i] = h8[i] + h8[i + 4];
    float a = h4[0] + h4[2], b = h4[1] + h4[3];
    return a + b;
}

static inline float pg_dot(const float *a, const float *b, int n) {
    int i = 0;
    float partial[16];
#if defined(PG_AVX512)
    __m512 acc = _mm512_setzero_ps();
    for (; i + 16 <= n; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), acc);
    _mm512_storeu_ps(partial, acc);
#elif defined(PG_AVX2)
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    for (; i + 16 <= n; i += 16) {
        lo = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), lo);
        hi = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), hi);
    }
    _mm256_storeu_ps(partial, lo);
    _mm256_storeu_ps(partial + 8, hi);
#else
    for (int j = 0; j < 16; j++) partial[j] = 0.0f;
    for (; i + 16 <= n; i += 16)
        for (int j = 0; j < 16; j++) partial[j] = fmaf(a[i + j], b[i + j], partial[j]);
#endif
    float sum = pg_sum16(partial);
    for (; i < n; i++) sum = fmaf(a[i], b[i], sum);
    return sum;
}

/* e^x for x <= 0 (softmax's shifted scores, silu's -|g|), to about 2 ulp: 2^k times a polynomial of the rest, in
 * fused steps; `pg_exp_many` computes the same values 16 or 8 at a time. */
static inline float pg_exp_nonpositive(float x) {
    x = x < -87.0f ? -87.0f : x; /* e^-87 is below float's normal range: a softmax weight of 0 either way */
    const float round = 12582912.0f; /* 1.5 * 2^23: adding and taking it away rounds to an integer */
    float k = fmaf(x, 1.44269504f, round) - round;
    float r = fmaf(k, -0.693145752f, x);
    r = fmaf(k, -1.42860677e-6f, r); /* ln 2 in two parts: r exact to float rounding */
    float p = 1.98756912e-4f;
    p = fmaf(p, r, 1.39819994e-3f);
    p = fmaf(p, r, 8.33345205e-3f);
    p = fmaf(p, r, 4.16657962e-2f);
    p = fmaf(p, r, 1.66666657e-1f);
    p = fmaf(p, r, 5.00000001e-1f);
    p = fmaf(p * r, r, r) + 1.0f;
    int32_t bits = ((int32_t)k + 127) << 23;
    float scale;
    memcpy(&scale, &bits, sizeof scale);
    return p * scale;
}

#if defined(PG_AVX512)
static inline __m512 pg_exp16(__m512 x) {
    x = _mm512_max_ps(_mm512_set1_ps(-87.0f), x); /* a NaN stays NaN, as in the scalar form */
    const __m512 round = _mm512_set1_ps(12582912.0f);
    __m512 k = _mm512_sub_ps(_mm512_fmadd_ps(x, _mm512_set1_ps(1.44269504f), round), round);
    __m512 r = _mm512_fmadd_ps(k, _mm512_set1_ps(-0.693145752f), x);
    r = _mm512_fmadd_ps(k, _mm512_set1_ps(-1.42860677e-6f), r);
    __m512 p = _mm512_set1_ps(1.98756912e-4f);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.39819994e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(8.33345205e-3f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(4.16657962e-2f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.66666657e-1f));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(5.00000001e-1f));
    p = _mm512_add_ps(_mm512_fmadd_ps(_mm512_mul_ps(p, r), r, r), _mm512_set1_ps(1.0f));
    __m512i bits = _mm512_slli_epi32(_mm512_add_epi32(_mm512_cvttps_epi32(k), _mm512_set1_epi32(127)), 23);
    return _mm512_mul_ps(p, _mm512_castsi512_ps(bits));
}
#elif defined(PG_AVX2)
static inline __m256 pg_exp8(__m256 x) {
    x = _mm256_max_ps(_mm256_set1_ps(-87.0f), x);
    const __m256 round = _mm256_set1_ps(12582912.0f);
    __m256 k = _mm256_sub_ps(_mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504f), round), round);
    __m256 r = _mm256_fmadd_ps(k, _mm256_set1_ps(-0.693145752f), x);
    r = _mm256_fmadd_ps(k, _mm256_set1_ps(-1.42860677e-6f), r);
    __m256 p = _mm256_set1_ps(1.98756912e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.39819994e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.33345205e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.16657962e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.66666657e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.00000001e-1f));
    p = _mm256_add_ps(_mm256_fmadd_ps(_mm256_mul_ps(p, r), r, r), _mm256_set1_ps(1.0f));
    __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}
#endif

/* x[i] = e^(x[i] - shift) for i < n (every x[i] <= shift) */
static inline void pg_exp_many(float *x, int64_t n, float shift) {
    int64_t i = 0;
#if defined(PG_AVX512)
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(x + i, pg_exp16(_mm512_sub_ps(_mm512_loadu_ps(x + i), _mm512_set1_ps(shift))));
#elif defined(PG_AVX2)
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(x + i, pg_exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), _mm256_set1_ps(shift))));
#endif
    for (; i < n; i++) x[i] = pg_exp_nonpositive(x[i] - shift);
}

/* the sum of x[0 .. n), in a fixed order: element s into partial sum s % 16, those added by `pg_sum16` */
static inline float pg_sum(const float *x, int64_t n) {
    float partial[16];
    int64_t s = 0;
#if defined(PG_AVX512)
    __m512 acc = _mm512_setzero_ps();
    for (; s + 16 <= n; s += 16) acc = _mm512_add_ps(acc, _mm512_loadu_ps(x + s));
    _mm512_storeu_ps(partial, acc);
#elif defined(PG_AVX2)
    __m256 lo = _mm256_setzero_ps(), hi = lo;
    for (; s + 16 <= n; s += 16) {
        lo = _mm256_add_ps(lo, _mm256_loadu_ps(x + s));
        hi = _mm256_add_ps(hi, _mm256_loadu_ps(x + s + 8));
    }
    _mm256_storeu_ps(partial, lo);
    _mm256_storeu_ps(partial + 8, hi);
#else
    for (int j = 0; j < 16; j++) partial[j] = 0.0f;
    for (; s + 16 <= n; s += 16)
        for (int j = 0; j < 16; j++) partial[j] += x[s + j];
#endif
    for (int j = 0; s < n; s++, j++) partial[j] += x[s];
    return pg_sum16(partial);
}

/* the largest of x[0 .. n) (exact in any order), -inf for none */
static inline float pg_max(const float *x, int64_t n) {
    float top = -INFINITY;
    for (int64_t s = 0; s < n; s++) top = x[s] > top ? x[s] : top;
    return top;
}

/* half precision copies of x[0 .. n), saturated at +-65504 (the cache's entries) */
static inline void pg_halves(const float *x, int n, uint16_t *out) {
    int i = 0;
#if defined(PG_AVX512)
    const __m512 most = _mm512_set1_ps(65504.0f), least = _mm512_set1_ps(-65504.0f);
    for (; i + 16 <= n; i += 16) {
        __m512 v = _mm512_max_ps(least, _mm512_min_ps(most, _mm512_loadu_ps(x + i)));
        _mm256_storeu_si256((__m256i *)(out + i), _mm512_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
#elif defined(PG_AVX2)
    const __m256 most = _mm256_set1_ps(65504.0f), least = _mm256_set1_ps(-65504.0f);
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_max_ps(least, _mm256_min_ps(most, _mm256_loadu_ps(x + i)));
        _mm_storeu_si128((__m128i *)(out + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    }
#endif
    for (; i < n; i++) {
        float v = x[i] < -65504.0f ? -65504.0f : x[i];
        out[i] = pg_float_to_half(65504.0f < v ? 65504.0f : v);
    }
}

#endif
