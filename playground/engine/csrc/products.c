/* Matrix products for a few rows: int8 activations times 4-bit (Q4_1) or 8-bit (Q8_0) weight codes, GGUF's blocks of
 * 32 inputs, each weight read and unpacked once for every row of the product.
 *
 * Weights are packed by `pg_pack_q4` / `pg_pack_q8` into tiles of 16 outputs: per tile, its blocks in order, each
 * block the 16 outputs' codes interleaved four inputs at a time (a vector lane per output), then their scales.
 *   Q4 block (320 bytes): 4 x 64 bytes of codes, vector v holding inputs 4v..4v+3 in its low nibbles and
 *                         16+4v..16+4v+3 in its high ones; 16 half scales d; 16 half minima m.   w = d * code + m
 *   Q8 block (544 bytes): 8 x 64 bytes of codes (inputs 4j..4j+3 in vector j); 16 half scales d.  w = d * code
 * Q8 codes are stored offset by 128 (unsigned) where the products use VNNI's unsigned-by-signed instruction.
 *
 * Activations are quantised a row at a time, as llama.cpp's Q8_1: per block of 32, d = max|x| / 127, q = x / d
 * rounded, and the block's sum of q (`pg_quantize_rows`). A block's integer dot product is exact whatever adds it, so
 * an output is, on every instruction set and for any row or thread count,
 *     sum over blocks b, in order:  acc = fma(float(isum_b), d_w * d_x, acc);  acc = fma(m_w, d_x * sum(q_b), acc)
 * (the second term for Q4 only). */
#include <stdio.h>
#include <stdlib.h>

#include "numeric.h"
#include "products.h"

#ifndef PREFETCH
#define PREFETCH 2048
#endif
#define MAX_CHUNK 8 /* rows one pass over a tile computes: their accumulators stay in registers */

#define Q4_BLOCK_BYTES (PG_TILE * PG_BLOCK / 2 + 4 * PG_TILE)
#define Q8_BLOCK_BYTES (PG_TILE * PG_BLOCK + 2 * PG_TILE)

static inline int pg_tiles(int n) { return (n + PG_TILE - 1) / PG_TILE; }

int64_t pg_q4_bytes(int n, int k) { return (int64_t)pg_tiles(n) * (k / PG_BLOCK) * Q4_BLOCK_BYTES; }
int64_t pg_q8_bytes(int n, int k) { return (int64_t)pg_tiles(n) * (k / PG_BLOCK) * Q8_BLOCK_BYTES; }

/* float weights [n, k] (k a multiple of 32) into Q4_1 tiles, quantised as llama.cpp quantises Q4_1: per block,
 * m = min, d = (max - min) / 15, code = round((w - m) / d); d and m kept as halves. Weights read back from a Q4_1
 * file give back the file's own codes, scales and minima. Outputs past n are zero. */
void pg_pack_q4(const float *w, int n, int k, uint8_t *out) {
    int blocks = k / PG_BLOCK;
    memset(out, 0, (size_t)pg_q4_bytes(n, k));
    for (int o = 0; o < n; o++) {
        int tile = o / PG_TILE, lane = o % PG_TILE;
        for (int b = 0; b < blocks; b++) {
            const float *x = w + (int64_t)o * k + b * PG_BLOCK;
            float lo = x[0], hi = x[0];
            for (int i = 1; i < PG_BLOCK; i++) {
                lo = x[i] < lo ? x[i] : lo;
                hi = x[i] > hi ? x[i] : hi;
            }
            float d = (hi - lo) / 15.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            uint8_t *block = out + ((int64_t)tile * blocks + b) * Q4_BLOCK_BYTES;
            for (int i = 0; i < PG_BLOCK; i++) {
                int code = (int)roundf((x[i] - lo) * id);
                code = code < 0 ? 0 : code > 15 ? 15 : code;
                int half = i / 16, v = (i % 16) / 4, byte = 64 * v + 4 * lane + i % 4;
                block[byte] |= (uint8_t)(code << (4 * half));
            }
            uint16_t dh = pg_float_to_half(d), mh = pg_float_to_half(lo);
            memcpy(block + 256 + 2 * lane, &dh, 2);
            memcpy(block + 256 + 2 * PG_TILE + 2 * lane, &mh, 2);
        }
    }
}

/* float weights [n, k] into Q8_0 tiles, quantised as llama.cpp quantises Q8_0: d = max|w| / 127, code = round(w / d) */
void pg_pack_q8(const float *w, int n, int k, uint8_t *out) {
    int blocks = k / PG_BLOCK;
    memset(out, 0, (size_t)pg_q8_bytes(n, k));
    for (int t = 0; t < pg_tiles(n); t++)
        for (int b = 0; b < blocks; b++) {
            uint8_t *block = out + ((int64_t)t * blocks + b) * Q8_BLOCK_BYTES;
            for (int lane = 0; lane < PG_TILE; lane++) {
                int o = t * PG_TILE + lane;
                float amax = 0.0f;
                const float *x = w + (int64_t)o * k + b * PG_BLOCK;
                if (o < n)
                    for (int i = 0; i < PG_BLOCK; i++) amax = fabsf(x[i]) > amax ? fabsf(x[i]) : amax;
                float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
                for (int i = 0; i < PG_BLOCK; i++) {
                    int code = o < n ? (int)roundf(x[i] * id) : 0;
                    code = code < -127 ? -127 : code > 127 ? 127 : code;
#ifdef PG_VNNI
                    code += 128;
#endif
                    block[64 * (i / 4) + 4 * lane + i % 4] = (uint8_t)code;
                }
                uint16_t dh = pg_float_to_half(d);
                memcpy(block + 512 + 2 * lane, &dh, 2);
            }
        }
}

/* row `o` of packed Q8 weights back as floats, d * code: the embedding of a tied vocabulary table */
void pg_q8_row(const uint8_t *packed, int k, int o, float *out) {
    int blocks = k / PG_BLOCK, tile = o / PG_TILE, lane = o % PG_TILE;
    for (int b = 0; b < blocks; b++) {
        const uint8_t *block = packed + ((int64_t)tile * blocks + b) * Q8_BLOCK_BYTES;
        uint16_t dh;
        memcpy(&dh, block + 512 + 2 * lane, 2);
        float d = pg_half_to_float(dh);
        for (int i = 0; i < PG_BLOCK; i++) {
            int code = block[64 * (i / 4) + 4 * lane + i % 4];
#ifdef PG_VNNI
            code -= 128;
#else
            code = (int8_t)code;
#endif
            out[b * PG_BLOCK + i] = d * (float)code;
        }
    }
}

/* rows of x [rows, k] (float) into int8 blocks (see the top of the file): per block, d = max|x| / 127 and q = x / d
 * rounded to nearest even (x times 1 / d, as the vector forms multiply) */
void pg_quantize_row(const float *x, int r, int k, const PgActivations *a) {
    int blocks = k / PG_BLOCK;
    PgActivations row = {a->q + (int64_t)r * k, a->d + (int64_t)r * blocks, a->s + (int64_t)r * blocks,
                         a->sum + (int64_t)r * blocks, k};
    pg_quantize_rows(x + (int64_t)r * k, 1, k, k, &row);
}

void pg_quantize_rows(const float *x, int rows, int k, int64_t stride, PgActivations *a) {
    int blocks = k / PG_BLOCK;
    for (int r = 0; r < rows; r++)
        for (int b = 0; b < blocks; b++) {
            const float *v = x + r * stride + b * PG_BLOCK;
            int8_t *q = a->q + (int64_t)r * k + b * PG_BLOCK;
            int32_t sum = 0;
            float amax = 0.0f;
#if defined(PG_AVX512)
            __m512 v0 = _mm512_loadu_ps(v), v1 = _mm512_loadu_ps(v + 16);
            amax = _mm512_reduce_max_ps(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1)));
            float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, _mm512_set1_ps(id)));
            __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, _mm512_set1_ps(id)));
            _mm_storeu_si128((__m128i *)q, _mm512_cvtepi32_epi8(q0));
            _mm_storeu_si128((__m128i *)(q + 16), _mm512_cvtepi32_epi8(q1));
            sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
#else
            for (int i = 0; i < PG_BLOCK; i++) amax = fmaxf(amax, fabsf(v[i]));
            float d = amax / 127.0f, id = d != 0.0f ? 1.0f / d : 0.0f;
            for (int i = 0; i < PG_BLOCK; i++) {
                q[i] = (int8_t)(int)nearbyintf(v[i] * id);
                sum += q[i];
            }
#endif
            int64_t at = (int64_t)r * blocks + b;
            a->d[at] = d;
            a->sum[at] = sum;
            a->s[at] = d * (float)sum;
        }
}

#if defined(PG_AVX512)
static inline __m512 load_halves(const uint8_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
static inline __m512i quad(const int8_t *q) {
    int32_t v;
    memcpy(&v, q, 4);
    return _mm512_set1_epi32(v);
}
#ifdef PG_VNNI
#define DOT4(acc, w, x) _mm512_dpbusd_epi32(acc, w, x)
#else
static inline __m512i DOT4(__m512i acc, __m512i w, __m512i x) {
    return _mm512_add_epi32(acc, _mm512_madd_epi16(_mm512_maddubs_epi16(w, x), _mm512_set1_epi16(1)));
}
#endif

/* R rows (1..MAX_CHUNK) of one Q4 tile: 16 outputs */
static inline __attribute__((always_inline)) void q4_tile(const uint8_t *tile, int blocks, const PgActivations *a,
                                                          int r0, int R, float *out, int64_t stride, int lanes) {
    __m512 acc[MAX_CHUNK];
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    const __m512i low = _mm512_set1_epi8(0x0f);
    for (int b = 0; b < blocks; b++) {
        const uint8_t *block = tile + (int64_t)b * Q4_BLOCK_BYTES;
        for (int line = 0; line < Q4_BLOCK_BYTES; line += 64) _mm_prefetch((const char *)block + PREFETCH + line, _MM_HINT_T0);
        __m512i w[8];
        for (int v = 0; v < 4; v++) {
            __m512i packed = _mm512_loadu_si512(block + 64 * v);
            w[v] = _mm512_and_si512(packed, low);
            w[v + 4] = _mm512_and_si512(_mm512_srli_epi16(packed, 4), low);
        }
        __m512 d = load_halves(block + 256), m = load_halves(block + 256 + 2 * PG_TILE);
        for (int r = 0; r < R; r++) {
            const int8_t *q = a->q + (int64_t)(r0 + r) * a->k + b * PG_BLOCK;
            __m512i even = _mm512_setzero_si512(), odd = even;
            for (int j = 0; j < 8; j += 2) {
                even = DOT4(even, w[j], quad(q + 4 * j));
                odd = DOT4(odd, w[j + 1], quad(q + 4 * j + 4));
            }
            int64_t at = (int64_t)(r0 + r) * blocks + b;
            __m512 isum = _mm512_cvtepi32_ps(_mm512_add_epi32(even, odd));
            acc[r] = _mm512_fmadd_ps(isum, _mm512_mul_ps(d, _mm512_set1_ps(a->d[at])), acc[r]);
            acc[r] = _mm512_fmadd_ps(m, _mm512_set1_ps(a->s[at]), acc[r]);
        }
    }
    for (int r = 0; r < R; r++) {
        if (lanes == PG_TILE)
            _mm512_storeu_ps(out + (r0 + r) * stride, acc[r]);
        else
            _mm512_mask_storeu_ps(out + (r0 + r) * stride, (__mmask16)((1u << lanes) - 1), acc[r]);
    }
}

static inline __attribute__((always_inline)) void q8_tile(const uint8_t *tile, int blocks, const PgActivations *a,
                                                          int r0, int R, float *out, int64_t stride, int lanes) {
    __m512 acc[MAX_CHUNK];
    for (int r = 0; r < R; r++) acc[r] = _mm512_setzero_ps();
    for (int b = 0; b < blocks; b++) {
        const uint8_t *block = tile + (int64_t)b * Q8_BLOCK_BYTES;
        for (int line = 0; line < Q8_BLOCK_BYTES; line += 64) _mm_prefetch((const char *)block + PREFETCH + line, _MM_HINT_T0);
        __m512 d = load_halves(block + 512);
        for (int r = 0; r < R; r++) {
            const int8_t *q = a->q + (int64_t)(r0 + r) * a->k + b * PG_BLOCK;
            __m512i even = _mm512_setzero_si512(), odd = even;
#ifdef PG_VNNI
            for (int j = 0; j < 8; j += 2) {
                even = _mm512_dpbusd_epi32(even, _mm512_loadu_si512(block + 64 * j), quad(q + 4 * j));
                odd = _mm512_dpbusd_epi32(odd, _mm512_loadu_si512(block + 64 * j + 64), quad(q + 4 * j + 4));
            }
            int64_t at = (int64_t)(r0 + r) * blocks + b;
            __m512i exact = _mm512_sub_epi32(_mm512_add_epi32(even, odd), _mm512_set1_epi32(128 * a->sum[at]));
#else
            const __m512i ones = _mm512_set1_epi16(1);
            for (int j = 0; j < 8; j++) { /* |x| times w with x's sign: unsigned by signed, no saturation */
                __m512i x = quad(q + 4 * j), w = _mm512_loadu_si512(block + 64 * j);
                __mmask64 negative = _mm512_movepi8_mask(x);
                __m512i signed_w = _mm512_mask_sub_epi8(w, negative, _mm512_setzero_si512(), w);
                __m512i pairs = _mm512_maddubs_epi16(_mm512_abs_epi8(x), signed_w);
                even = _mm512_add_epi32(even, _mm512_madd_epi16(pairs, ones));
            }
            int64_t at = (int64_t)(r0 + r) * blocks + b;
            __m512i exact = _mm512_add_epi32(even, odd);
#endif
            acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(exact), _mm512_mul_ps(d, _mm512_set1_ps(a->d[at])), acc[r]);
        }
    }
    for (int r = 0; r < R; r++) {
        if (lanes == PG_TILE)
            _mm512_storeu_ps(out + (r0 + r) * stride, acc[r]);
        else
            _mm512_mask_storeu_ps(out + (r0 + r) * stride, (__mmask16)((1u << lanes) - 1), acc[r]);
    }
}

#elif defined(PG_AVX2)
static inline __m256 load_halves8(const uint8_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }
static inline __m256i quad(const int8_t *q) {
    int32_t v;
    memcpy(&v, q, 4);
    return _mm256_set1_epi32(v);
}

/* R rows of one Q4 tile, as two halves of 8 outputs */
static inline __attribute__((always_inline)) void q4_tile(const uint8_t *tile, int blocks, const PgActivations *a,
                                                          int r0, int R, float *out, int64_t stride, int lanes) {
    float result[MAX_CHUNK][PG_TILE];
    const __m256i low = _mm256_set1_epi8(0x0f), ones = _mm256_set1_epi16(1);
    for (int h = 0; h < 2; h++) {
        __m256 acc[MAX_CHUNK];
        for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
        for (int b = 0; b < blocks; b++) {
            const uint8_t *block = tile + (int64_t)b * Q4_BLOCK_BYTES;
            __m256i w[8];
            for (int v = 0; v < 4; v++) {
                __m256i packed = _mm256_loadu_si256((const __m256i *)(block + 64 * v + 32 * h));
                w[v] = _mm256_and_si256(packed, low);
                w[v + 4] = _mm256_and_si256(_mm256_srli_epi16(packed, 4), low);
            }
            __m256 d = load_halves8(block + 256 + 16 * h), m = load_halves8(block + 256 + 2 * PG_TILE + 16 * h);
            for (int r = 0; r < R; r++) {
                const int8_t *q = a->q + (int64_t)(r0 + r) * a->k + b * PG_BLOCK;
                /* 8 pair sums of at most 2 * 15 * 127 each fit 16 bits: one widening per block */
                __m256i pairs = _mm256_maddubs_epi16(w[0], quad(q));
                for (int j = 1; j < 8; j++) pairs = _mm256_add_epi16(pairs, _mm256_maddubs_epi16(w[j], quad(q + 4 * j)));
                int64_t at = (int64_t)(r0 + r) * blocks + b;
                __m256 isum = _mm256_cvtepi32_ps(_mm256_madd_epi16(pairs, ones));
                acc[r] = _mm256_fmadd_ps(isum, _mm256_mul_ps(d, _mm256_set1_ps(a->d[at])), acc[r]);
                acc[r] = _mm256_fmadd_ps(m, _mm256_set1_ps(a->s[at]), acc[r]);
            }
        }
        for (int r = 0; r < R; r++) _mm256_storeu_ps(result[r] + 8 * h, acc[r]);
    }
    for (int r = 0; r < R; r++) memcpy(out + (r0 + r) * stride, result[r], sizeof(float) * lanes);
}

static inline __attribute__((always_inline)) void q8_tile(const uint8_t *tile, int blocks, const PgActivations *a,
                                                          int r0, int R, float *out, int64_t stride, int lanes) {
    float result[MAX_CHUNK][PG_TILE];
    const __m256i ones = _mm256_set1_epi16(1);
    for (int h = 0; h < 2; h++) {
        __m256 acc[MAX_CHUNK];
        for (int r = 0; r < R; r++) acc[r] = _mm256_setzero_ps();
        for (int b = 0; b < blocks; b++) {
            const uint8_t *block = tile + (int64_t)b * Q8_BLOCK_BYTES;
            __m256 d = load_halves8(block + 512 + 16 * h);
            for (int r = 0; r < R; r++) {
                const int8_t *q = a->q + (int64_t)(r0 + r) * a->k + b * PG_BLOCK;
                __m256i sum = _mm256_setzero_si256();
                for (int j = 0; j < 8; j++) { /* |x| times w with x's sign: unsigned by signed, no saturation */
                    __m256i x = quad(q + 4 * j);
                    __m256i w = _mm256_loadu_si256((const __m256i *)(block + 64 * j + 32 * h));
                    __m256i pairs = _mm256_maddubs_epi16(_mm256_abs_epi8(x), _mm256_sign_epi8(w, x));
                    sum = _mm256_add_epi32(sum, _mm256_madd_epi16(pairs, ones));
                }
                int64_t at = (int64_t)(r0 + r) * blocks + b;
                acc[r] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(d, _mm256_set1_ps(a->d[at])), acc[r]);
            }
        }
        for (int r = 0; r < R; r++) _mm256_storeu_ps(result[r] + 8 * h, acc[r]);
    }
    for (int r = 0; r < R; r++) memcpy(out + (r0 + r) * stride, result[r], sizeof(float) * lanes);
}

#else
static inline void q4_tile(const uint8_t *tile, int blocks, const PgActivations *a, int r0, int R, float *out,
                           int64_t stride, int lanes) {
    for (int r = r0; r < r0 + R; r++)
        for (int lane = 0; lane < lanes; lane++) {
            float acc = 0.0f;
            for (int b = 0; b < blocks; b++) {
                const uint8_t *block = tile + (int64_t)b * Q4_BLOCK_BYTES;
                const int8_t *q = a->q + (int64_t)r * a->k + b * PG_BLOCK;
                int32_t isum = 0;
                for (int i = 0; i < PG_BLOCK; i++) {
                    int byte = block[64 * ((i % 16) / 4) + 4 * lane + i % 4];
                    isum += ((byte >> (4 * (i / 16))) & 15) * q[i];
                }
                uint16_t dh, mh;
                memcpy(&dh, block + 256 + 2 * lane, 2);
                memcpy(&mh, block + 256 + 2 * PG_TILE + 2 * lane, 2);
                int64_t at = (int64_t)r * blocks + b;
                acc = fmaf((float)isum, pg_half_to_float(dh) * a->d[at], acc);
                acc = fmaf(pg_half_to_float(mh), a->s[at], acc);
            }
            out[r * stride + lane] = acc;
        }
}

static inline void q8_tile(const uint8_t *tile, int blocks, const PgActivations *a, int r0, int R, float *out,
                           int64_t stride, int lanes) {
    for (int r = r0; r < r0 + R; r++)
        for (int lane = 0; lane < lanes; lane++) {
            float acc = 0.0f;
            for (int b = 0; b < blocks; b++) {
                const uint8_t *block = tile + (int64_t)b * Q8_BLOCK_BYTES;
                const int8_t *q = a->q + (int64_t)r * a->k + b * PG_BLOCK;
                int32_t isum = 0;
                for (int i = 0; i < PG_BLOCK; i++) isum += (int8_t)block[64 * (i / 4) + 4 * lane + i % 4] * q[i];
                uint16_t dh;
                memcpy(&dh, block + 512 + 2 * lane, 2);
                acc = fmaf((float)isum, pg_half_to_float(dh) * a->d[(int64_t)r * blocks + b], acc);
            }
            out[r * stride + lane] = acc;
        }
}
#endif

/* rows split into passes of at most MAX_CHUNK, as even as can be (5 rows: one pass; 9: 5 and 4) */
static inline int chunk_rows(int rows) {
    int passes = (rows + MAX_CHUNK - 1) / MAX_CHUNK;
    return (rows + passes - 1) / passes;
}

#define DISPATCH(tile_fn, R, ...)                   \
    switch (R) {                                    \
        case 1: tile_fn(__VA_ARGS__, 1, o, stride, lanes); break; \
        case 2: tile_fn(__VA_ARGS__, 2, o, stride, lanes); break; \
        case 3: tile_fn(__VA_ARGS__, 3, o, stride, lanes); break; \
        case 4: tile_fn(__VA_ARGS__, 4, o, stride, lanes); break; \
        case 5: tile_fn(__VA_ARGS__, 5, o, stride, lanes); break; \
        case 6: tile_fn(__VA_ARGS__, 6, o, stride, lanes); break; \
        case 7: tile_fn(__VA_ARGS__, 7, o, stride, lanes); break; \
        default: tile_fn(__VA_ARGS__, 8, o, stride, lanes); break; \
    }

/* tiles [first, last) of a product of `bits`-bit weights: out[r, o] for rows 0..rows-1 and the tiles' outputs
 * below n */
static void product_tiles(int bits, const uint8_t *w, int n, const PgActivations *a, int rows, float *out,
                          int64_t stride, int first, int last) {
    int blocks = a->k / PG_BLOCK, chunk = chunk_rows(rows);
    int64_t tile_bytes = (int64_t)blocks * (bits == 4 ? Q4_BLOCK_BYTES : Q8_BLOCK_BYTES);
    for (int t = first; t < last; t++) {
        const uint8_t *tile = w + t * tile_bytes;
        int lanes = n - t * PG_TILE < PG_TILE ? n - t * PG_TILE : PG_TILE;
        float *o = out + t * PG_TILE;
        for (int r = 0; r < rows; r += chunk) {
            int R = rows - r < chunk ? rows - r : chunk;
            if (bits == 4) {
                DISPATCH(q4_tile, R, tile, blocks, a, r)
            } else {
                DISPATCH(q8_tile, R, tile, blocks, a, r)
            }
        }
    }
}

/* Threads take a product's tiles a chunk at a time from a shared counter (about 64 KB of weights a chunk), so one
 * that a neighbour slows takes fewer: which thread computes a tile changes nothing in it. */
static void take_tiles(int bits, const uint8_t *w, int n, const PgActivations *a, int rows, float *out,
                       int64_t stride, int *counter) {
    int tiles = pg_tiles(n), blocks = a->k / PG_BLOCK;
    int tile_bytes = blocks * (bits == 4 ? Q4_BLOCK_BYTES : Q8_BLOCK_BYTES);
    int chunk = tile_bytes >= 65536 ? 1 : 65536 / tile_bytes;
    for (;;) {
        int first = __atomic_fetch_add(counter, chunk, __ATOMIC_RELAXED);
        if (first >= tiles) return;
        int last = first + chunk < tiles ? first + chunk : tiles;
        product_tiles(bits, w, n, a, rows, out, stride, first, last);
    }
}

/* out [rows, n] (row stride `stride`) = activations times packed weights transposed: called by every thread of a
 * parallel region with the same zeroed `counter`, each computing the tiles it takes. */
void pg_q4_share(const uint8_t *w, int n, const PgActivations *a, int rows, float *out, int64_t stride,
                 int *counter) {
    take_tiles(4, w, n, a, rows, out, stride, counter);
}

void pg_q8_share(const uint8_t *w, int n, const PgActivations *a, int rows, float *out, int64_t stride,
                 int *counter) {
    take_tiles(8, w, n, a, rows, out, stride, counter);
}

/* out [rows, n] = x [rows, k] times packed weights (`bits` 4 or 8) transposed, on `threads` threads: the activations
 * quantised, then the tiles shared out. 0, or 1 where scratch memory could not be had. */
int pg_product(int bits, const uint8_t *w, int n, int k, const float *x, int rows, float *out, int threads) {
    int blocks = k / PG_BLOCK;
    PgActivations a = {malloc((size_t)rows * k), malloc(sizeof(float) * rows * blocks),
                       malloc(sizeof(float) * rows * blocks), malloc(sizeof(int32_t) * rows * blocks), k};
    int ok = a.q && a.d && a.s && a.sum;
    if (ok) {
        pg_quantize_rows(x, rows, k, k, &a);
        int counter = 0;
#pragma omp parallel num_threads(threads < 1 ? 1 : threads)
        take_tiles(bits, w, n, &a, rows, out, n, &counter);
    }
    free(a.q);
    free(a.d);
    free(a.s);
    free(a.sum);
    return !ok;
}

/* rows `ids` [count] of packed Q8 weights [*, k] as floats [count, k]: an embedding lookup */
void pg_q8_rows(const uint8_t *packed, int k, const int64_t *ids, int count, float *out) {
    for (int i = 0; i < count; i++) pg_q8_row(packed, k, (int)ids[i], out + (int64_t)i * k);
}

/* the instruction path this build runs, for the run record: the numbers are the same on each */
const char *pg_instruction_path(void) {
#if defined(PG_VNNI)
    const char *path = "avx512-vnni";
#elif defined(PG_AVX512)
    const char *path = "avx512";
#elif defined(PG_AVX2)
    const char *path = "avx2";
#else
    const char *path = "c";
#endif
#ifdef _OPENMP
    static char with[32];
    snprintf(with, sizeof with, "%s+openmp", path);
    return with;
#else
    return path;
#endif
}
