/* An EAGLE-3 / EAGLE-3.1 drafter's step in C, beside an int4 target (drafter.c; engine/native_drafter.py mirrors these
 * structs): one decoder layer that reads the target's aux states, all its products in 8-bit codes (Q8_0 tiles). */
#ifndef PLAYGROUND_DRAFTER_H
#define PLAYGROUND_DRAFTER_H

#include <stdint.h>

typedef struct {
    int hidden, heads, kv_heads, head_dim, intermediate, draft_vocab, aux_width, aux_count;
    float eps, scale;
    int fc_norm, norm_before_fc, norm_output, norm_before_residual; /* the config flags, 0 or 1 */
    const uint8_t *fc, *qkv, *o, *gate_up, *down, *head;            /* Q8 tiles; qkv reads [embedding | hidden] */
    const float *aux_norms; /* fc_norm: [aux_count, aux_width / aux_count]; norm_before_fc: [aux_width]; or NULL */
    const float *hidden_norm, *input_norm, *post_norm, *final_norm;
    const uint8_t *embedding; /* Q8 tiles [vocab, hidden]: the target's table, shared */
} PgDrafter;

typedef struct {
    const int64_t *ids; /* the tokens at position + 1 */
    int rows;
    const float *hidden;         /* [rows, hidden]: projected aux states, or the state fed back */
    const int64_t *positions;    /* [rows] */
    const float *cos, *ssin;     /* RoPE tables [positions, head_dim] */
    uint16_t *keys, *values;     /* its cache (one layer), as the target's */
    int64_t capacity, start;     /* new rows go into slots start .. start + rows - 1 */
    int64_t prefix;              /* with `sees`: the slots every row sees */
    const uint8_t *sees;         /* [rows, start + rows - prefix] flags, or NULL: every cached slot and new causally */
    int logits_from;             /* rows from this one on are scored */
    float *logits;               /* [rows - logits_from, draft_vocab] */
    float *feedback;             /* [rows, hidden]: what the next depth is fed */
    int mass_from;               /* rows from this one on report where their attention went */
    int64_t context;             /* slots before this are the context */
    float *mass;                 /* [rows - mass_from, 3]: on slot 0, on the context, on the rest; head-averaged */
    int threads;
} PgDraftStep;

/* hidden [rows, hidden] = fc(the aux states [rows, aux_width], normed as the config says): 0, or 1 out of memory */
int pg_draft_project(const PgDrafter *d, const float *aux, int rows, float *hidden, int threads);
/* one drafter call: 0, or 1 where scratch memory could not be had */
int pg_draft(const PgDrafter *d, const PgDraftStep *s);

#endif
