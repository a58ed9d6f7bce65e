/* An EAGLE-3 / EAGLE-3.1 drafter's calls in C: the fc projection of the target's aux states, and one decoder layer
 * reading [norm(embedding) | norm(hidden)], with its head over the draft vocabulary. Products in 8-bit codes (the
 * target's Q8 kernels), small steps in layer.c's fixed order: its drafts depend on its inputs alone, not on threads.
 * EAGLE-3.1's flags: fc_norm (an RMSNorm per aux state before fc), norm_output (feed back the normed state). */
#include "drafter.h"

#include <stdlib.h>

#include "layer.h"
#include "numeric.h"
#include "products.h"

static int activations(PgActivations *a, int rows, int width) {
    int blocks = width / PG_BLOCK;
    *a = (PgActivations){malloc((size_t)rows * width), malloc(sizeof(float) * rows * blocks),
                         malloc(sizeof(float) * rows * blocks), malloc(sizeof(int32_t) * rows * blocks), width};
    return a->q && a->d && a->s && a->sum;
}

static void free_activations(PgActivations *a) {
    free(a->q);
    free(a->d);
    free(a->s);
    free(a->sum);
}

int pg_draft_project(const PgDrafter *d, const float *aux, int rows, float *hidden, int threads) {
    const int width = d->aux_width, part = width / d->aux_count;
    float *normed = malloc(sizeof(float) * rows * width);
    PgActivations a;
    int ok = normed != NULL && activations(&a, rows, width), counter = 0;
    if (ok) {
#pragma omp parallel num_threads(threads < 1 ? 1 : threads)
        {
#pragma omp for schedule(static)
            for (int r = 0; r < rows; r++) {
                const float *x = aux + (int64_t)r * width;
                float *y = normed + (int64_t)r * width;
                if (d->fc_norm)
                    for (int c = 0; c < d->aux_count; c++)
                        pg_rms_norm(x + c * part, d->aux_norms + c * part, part, d->eps, y + c * part);
                else if (d->norm_before_fc)
                    pg_rms_norm(x, d->aux_norms, width, d->eps, y);
                else
                    memcpy(y, x, sizeof(float) * width);
                pg_quantize_row(normed, r, width, &a);
            }
            pg_q8_share(d->fc, d->hidden, &a, rows, hidden, d->hidden, &counter);
        }
        free_activations(&a);
    }
    free(normed);
    return !ok;
}

int pg_draft(const PgDrafter *d, const PgDraftStep *s) {
    const int rows = s->rows, hidden = d->hidden, dim = d->head_dim, heads = d->heads, kv = d->kv_heads;
    const int qkv_width = (heads + 2 * kv) * dim, inner = heads * dim, inter = d->intermediate;
    const int group = heads / kv, threads = s->threads < 1 ? 1 : s->threads, wide = 2 * hidden;
    const int64_t end = s->start + rows, room = end + PG_KEY_TILE, span = end - s->prefix;
    int widest = wide > inter ? wide : inter;
    widest = inner > widest ? inner : widest;
    float *x = malloc(sizeof(float) * rows * widest), *h = malloc(sizeof(float) * rows * hidden);
    float *qkv = malloc(sizeof(float) * rows * qkv_width), *attended = malloc(sizeof(float) * rows * inner);
    float *projected = malloc(sizeof(float) * rows * hidden), *gate_up = malloc(sizeof(float) * rows * 2 * inter);
    float *scores = malloc(sizeof(float) * threads * 4 * room), *masses = malloc(sizeof(float) * rows * heads * 3);
    int64_t *picked = malloc(sizeof(int64_t) * threads * (span + 1));
    int counters[5] = {0};
    PgActivations a = {0};
    int ok = x && h && qkv && attended && projected && gate_up && scores && masses && picked &&
             activations(&a, rows, widest);
    if (ok) {
#pragma omp parallel num_threads(threads)
        {
            const int me = PG_THREAD;
#pragma omp for schedule(static)
            for (int r = 0; r < rows; r++) { /* [norm(embedding) | norm(hidden)], and the residual stream */
                const float *in = s->hidden + (int64_t)r * hidden;
                float *row = x + (int64_t)r * wide;
                pg_q8_row(d->embedding, hidden, (int)s->ids[r], projected + (int64_t)r * hidden);
                pg_rms_norm(projected + (int64_t)r * hidden, d->input_norm, hidden, d->eps, row);
                pg_rms_norm(in, d->hidden_norm, hidden, d->eps, row + hidden);
                memcpy(h + (int64_t)r * hidden, d->norm_before_residual ? row + hidden : in, sizeof(float) * hidden);
                pg_quantize_row(x, r, wide, &a);
            }
            PgActivations act = pg_with_width(a, wide);
            pg_q8_share(d->qkv, qkv_width, &act, rows, qkv, qkv_width, &counters[0]);
#pragma omp barrier
#pragma omp for schedule(static)
            for (int task = 0; task < rows * kv; task++) {
                int r = task / kv, g = task % kv;
                int64_t pos = s->positions[r];
                const float *row = qkv + (int64_t)r * qkv_width;
                float key[256];
                pg_rotate(row + (int64_t)(heads + g) * dim, s->cos + pos * dim, s->ssin + pos * dim, dim, key);
                pg_store_entry(s->keys + g * s->capacity * dim, s->values + g * s->capacity * dim, dim,
                               s->start + r, key, row + (int64_t)(heads + kv + g) * dim);
            }
#pragma omp for schedule(static)
            for (int task = 0; task < rows * heads; task++) {
                int r = task / heads, hd = task % heads;
                int64_t pos = s->positions[r], at = (int64_t)(hd / group) * s->capacity * dim;
                float q[256], *out = attended + (int64_t)r * inner + (int64_t)hd * dim;
                float *mass = masses + ((int64_t)r * heads + hd) * 3;
                const float *query = q;
                pg_rotate(qkv + (int64_t)r * qkv_width + (int64_t)hd * dim, s->cos + pos * dim, s->ssin + pos * dim,
                          dim, q);
                pg_attend(1, &query, s->keys + at, s->values + at, dim, s->sees ? s->prefix : s->start, end,
                          s->start + r, s->sees ? s->sees + (int64_t)r * span : NULL, d->scale,
                          scores + (int64_t)me * 4 * room, room, picked + (int64_t)me * (span + 1), &out, s->context,
                          s->mass != NULL && r >= s->mass_from ? &mass : NULL);
            }
#pragma omp for schedule(static)
            for (int r = 0; r < rows; r++) pg_quantize_row(attended, r, inner, &a);
            act = pg_with_width(a, inner);
            pg_q8_share(d->o, hidden, &act, rows, projected, hidden, &counters[1]);
#pragma omp barrier
#pragma omp for schedule(static)
            for (int r = 0; r < rows; r++) {
                float *state = h + (int64_t)r * hidden;
                pg_add(state, projected + (int64_t)r * hidden, hidden);
                pg_rms_norm(state, d->post_norm, hidden, d->eps, x + (int64_t)r * hidden);
                pg_quantize_row(x, r, hidden, &a);
            }
            act = pg_with_width(a, hidden);
            pg_q8_share(d->gate_up, 2 * inter, &act, rows, gate_up, 2 * inter, &counters[2]);
#pragma omp barrier
#pragma omp for schedule(static)
            for (int r = 0; r < rows; r++) {
                pg_silu_mul(gate_up + (int64_t)r * 2 * inter, inter, x + (int64_t)r * inter);
                pg_quantize_row(x, r, inter, &a);
            }
            act = pg_with_width(a, inter);
            pg_q8_share(d->down, hidden, &act, rows, projected, hidden, &counters[3]);
#pragma omp barrier
            const int first = s->logits_from;
#pragma omp for schedule(static)
            for (int r = 0; r < rows; r++) {
                float *state = h + (int64_t)r * hidden, *normed = s->feedback + (int64_t)r * hidden;
                pg_add(state, projected + (int64_t)r * hidden, hidden);
                pg_rms_norm(state, d->final_norm, hidden, d->eps, x + (int64_t)r * hidden);
                memcpy(normed, d->norm_output ? x + (int64_t)r * hidden : state, sizeof(float) * hidden);
                if (r >= first) { /* the scored rows' activations from row 0 */
                    int blocks = hidden / PG_BLOCK, at = r - first;
                    PgActivations row = {a.q + (int64_t)at * hidden, a.d + (int64_t)at * blocks,
                                         a.s + (int64_t)at * blocks, a.sum + (int64_t)at * blocks, hidden};
                    pg_quantize_rows(x + (int64_t)r * hidden, 1, hidden, hidden, &row);
                }
                if (s->mass != NULL && r >= s->mass_from)
                    for (int k = 0; k < 3; k++) {
                        float total = 0.0f;
                        for (int hd = 0; hd < heads; hd++) total += masses[((int64_t)r * heads + hd) * 3 + k];
                        s->mass[(int64_t)(r - s->mass_from) * 3 + k] = total / (float)heads;
                    }
            }
            act = pg_with_width(a, hidden);
            pg_q8_share(d->head, d->draft_vocab, &act, rows - first, s->logits, d->draft_vocab, &counters[4]);
        }
    }
    void *all[] = {x, h, qkv, attended, projected, gate_up, scores, masses, picked};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
    free_activations(&a);
    return !ok;
}
