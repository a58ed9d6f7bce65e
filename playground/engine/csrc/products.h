/* Products of int8 activations and packed 4- or 8-bit weights (products.c). */
#ifndef PLAYGROUND_PRODUCTS_H
#define PLAYGROUND_PRODUCTS_H

#include <stdint.h>

typedef struct {
    int8_t *q;    /* [rows, k] */
    float *d;     /* [rows, k / 32] */
    float *s;     /* [rows, k / 32]: d * sum(q) */
    int32_t *sum; /* [rows, k / 32] */
    int k;
} PgActivations;

int64_t pg_q4_bytes(int n, int k);
int64_t pg_q8_bytes(int n, int k);
void pg_pack_q4(const float *w, int n, int k, uint8_t *out);
void pg_pack_q8(const float *w, int n, int k, uint8_t *out);
void pg_q8_row(const uint8_t *packed, int k, int o, float *out);
void pg_quantize_rows(const float *x, int rows, int k, int64_t stride, PgActivations *a);
void pg_quantize_row(const float *x, int r, int k, const PgActivations *a); /* row r of x [rows, k] into row r of a */

static inline PgActivations pg_with_width(PgActivations a, int k) { /* the same buffers, read as rows of k */
    a.k = k;
    return a;
}
void pg_q4_share(const uint8_t *w, int n, const PgActivations *a, int rows, float *out, int64_t stride,
                 int *counter);
void pg_q8_share(const uint8_t *w, int n, const PgActivations *a, int rows, float *out, int64_t stride,
                 int *counter);
int pg_product(int bits, const uint8_t *w, int n, int k, const float *x, int rows, float *out, int threads);
void pg_q8_rows(const uint8_t *packed, int k, const int64_t *ids, int count, float *out);

#endif
