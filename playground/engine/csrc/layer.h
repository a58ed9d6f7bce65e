/* The small steps of a decoder layer, a row (or a row and a head) at a time (layer.c). */
#ifndef PLAYGROUND_LAYER_H
#define PLAYGROUND_LAYER_H

#include <stdint.h>

/* out = x / rms(x) * weight */
void pg_rms_norm(const float *x, const float *weight, int width, float eps, float *out);
/* x += add */
void pg_add(float *x, const float *add, int width);
/* out = silu(gate) * up, from a fused [gate | up] row */
void pg_silu_mul(const float *gate_up, int inter, float *out);
/* RoPE as transformers applies it, x * cos + rotate_half(x) * sin, rotate_half's sign folded into `ssin` */
void pg_rotate(const float *x, const float *cos, const float *ssin, int dim, float *out);

#define PG_KEY_TILE 16 /* a key head's cache holds its slots in tiles of 16, [slots / 16][dim][16] */

/* the key and value of `slot` into one key head's cache (half precision, saturated at +-65504) */
void pg_store_entry(uint16_t *keys, uint16_t *values, int dim, int64_t slot, const float *key, const float *value);

/* The attention of nq queries of one row over one key head (the query heads that share it): keys (tiled) and values
 * [slots, dim], in half precision. The row sees the slots 0 .. own (sees NULL: causal), or the slots before `prefix`
 * and those of prefix .. end - 1 that `sees` (its flags over them) marks, in that order. Each query's arithmetic is
 * the same whatever nq. Room: `scores` for 4 x `room` floats (room >= end + 16), `picked` for end - prefix slots.
 * Out: nq rows of dim floats; with `mass`, each query's share of attention on slot 0, on the slots before
 * `context`, and on the rest. */
void pg_attend(int nq, const float *const *q, const uint16_t *keys, const uint16_t *values, int dim, int64_t prefix,
               int64_t end, int64_t own, const uint8_t *sees, float scale, float *scores, int64_t room,
               int64_t *picked, float *const *out, int64_t context, float *const *mass);

#endif
