/* A Llama target's forward on packed int4 layers and an int8 vocabulary head, and the types Python fills to call
 * it (forward.c; engine/int4.py mirrors these structs with ctypes). */
#ifndef PLAYGROUND_FORWARD_H
#define PLAYGROUND_FORWARD_H

#include <stdint.h>

typedef struct {
    const uint8_t *qkv, *o, *gate_up, *down; /* Q4 tiles (products.c): [q | k | v], o, [gate | up], down */
    const float *input_norm, *post_norm;
} PgLayer;

typedef struct {
    int layers, hidden, heads, kv_heads, head_dim, intermediate, vocab;
    float eps, scale;
    const PgLayer *layer;
    const float *final_norm;
    const uint8_t *head;      /* Q8 tiles [vocab, hidden] */
    const uint8_t *embedding; /* Q8 tiles [vocab, hidden]: the head itself where the two are tied */
} PgModel;

typedef struct {
    uint16_t *keys, *values; /* half precision, [layers, kv_heads, capacity, head_dim] each (keys in tiles: layer.h) */
    int64_t capacity, start;
} PgSequence;

typedef struct {
    const int64_t *ids;
    int rows;
    const int64_t *positions; /* [rows], or NULL: start, start + 1, ... */
    const uint8_t *sees;      /* [rows, rows]: which new tokens each sees (a tree), or NULL: the causal ones */
    const float *cos, *ssin;  /* RoPE tables [positions, head_dim] covering every position given */
    uint16_t *keys, *values;  /* the cache, as a PgSequence's */
    int64_t capacity, start;  /* new tokens go into slots start .. start + rows - 1 */
    const int32_t *aux_layers;
    int aux_count;
    float *aux;      /* [rows, aux_count * hidden]: the residual stream at the input of each aux layer */
    int logits_from; /* rows from this one on are scored */
    float *logits;   /* [rows - logits_from, vocab] */
    int threads;
    const PgSequence *sequences; /* or NULL; where set, row r is the next token of sequence r (a batch of
                                    sequences decoding together), whose own cache replaces keys .. start */
} PgStep;

/* 0, or 1 where scratch memory could not be had (nothing computed then) */
int pg_forward(const PgModel *model, const PgStep *step);

#endif
