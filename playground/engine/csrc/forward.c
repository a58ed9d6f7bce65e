/* A Llama target's forward for a few rows (a step, a verification) or many (a prompt), in one call: the int8
 * embedding, then per layer norm, qkv, RoPE and attention, o, norm, gate and up, SwiGLU, down; the final norm and the
 * int8 head. Threads take a product's tiles of outputs from a shared counter, and split the row steps by rows and
 * attention by (row, head): every value is computed by one thread in a fixed order, so the results do not depend on
 * the thread count, and each row's on no other row (a verification's rows equal one-row steps'). */
#include "forward.h"

#include <stdlib.h>

#include "layer.h"
#include "numeric.h"
#include "products.h"

typedef struct {
    float *x, *normed, *qkv, *attended, *projected, *gate_up, *gated, *scores;
    int64_t *picked;
    int *counters; /* one per product of the forward: its next tile */
    PgActivations act;
} Scratch;

static void scratch_free(Scratch *w) {
    void *all[] = {w->x,      w->normed, w->qkv,     w->attended, w->projected, w->gate_up, w->gated,
                   w->scores, w->picked, w->counters, w->act.q,   w->act.d,     w->act.s,   w->act.sum};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) free(all[i]);
}

static int scratch_for(const PgModel *m, const PgStep *s, int threads, Scratch *w) {
    int64_t rows = s->rows, inner = (int64_t)m->heads * m->head_dim, widest = m->hidden;
    widest = m->intermediate > widest ? m->intermediate : widest;
    widest = inner > widest ? inner : widest;
    int64_t keys = s->start + rows + PG_KEY_TILE;
    for (int r = 0; s->sequences != NULL && r < rows; r++)
        keys = s->sequences[r].start + 1 + PG_KEY_TILE > keys ? s->sequences[r].start + 1 + PG_KEY_TILE : keys;
    *w = (Scratch){0};
    w->x = malloc(sizeof(float) * rows * m->hidden);
    w->normed = malloc(sizeof(float) * rows * widest);
    w->qkv = malloc(sizeof(float) * rows * (inner + 2 * (int64_t)m->kv_heads * m->head_dim));
    w->attended = malloc(sizeof(float) * rows * inner);
    w->projected = malloc(sizeof(float) * rows * m->hidden);
    w->gate_up = malloc(sizeof(float) * rows * 2 * m->intermediate);
    w->gated = malloc(sizeof(float) * rows * m->intermediate);
    w->scores = malloc(sizeof(float) * threads * 4 * keys);
    w->picked = malloc(sizeof(int64_t) * threads * rows);
    w->counters = calloc((size_t)(4 * m->layers + 1), sizeof(int));
    w->act.q = malloc(rows * widest);
    w->act.d = malloc(sizeof(float) * rows * (widest / PG_BLOCK));
    w->act.s = malloc(sizeof(float) * rows * (widest / PG_BLOCK));
    w->act.sum = malloc(sizeof(int32_t) * rows * (widest / PG_BLOCK));
    return w->x && w->normed && w->qkv && w->attended && w->projected && w->gate_up && w->gated && w->scores &&
           w->picked && w->counters && w->act.q && w->act.d && w->act.s && w->act.sum;
}

/* one row of x [*, k] into the activations' row r */
/* where row r's keys and values go and what it attends to: its sequence's cache (a batch), or the step's */
typedef struct {
    uint16_t *keys, *values;
    int64_t capacity, start, slot, position;
    int rows, own; /* the new rows it may see, and its own index among them */
} RowCache;

static inline RowCache row_cache(const PgStep *s, int r, int layer, int64_t layer_floats_of_step, int head_dim,
                                 int kv) {
    RowCache c;
    if (s->sequences != NULL) {
        const PgSequence *q = s->sequences + r;
        int64_t layer_floats = (int64_t)kv * q->capacity * head_dim;
        c = (RowCache){q->keys + layer * layer_floats, q->values + layer * layer_floats, q->capacity, q->start,
                       q->start, q->start, 1, 0};
    } else {
        c = (RowCache){s->keys + layer * layer_floats_of_step, s->values + layer * layer_floats_of_step, s->capacity,
                       s->start, s->start + r, s->positions ? s->positions[r] : s->start + r, s->rows, r};
    }
    return c;
}

static void copy_aux(const PgModel *m, const PgStep *s, int layer, const float *x, int r) {
    for (int a = 0; a < s->aux_count; a++)
        if (s->aux_layers[a] == layer)
            memcpy(s->aux + ((int64_t)r * s->aux_count + a) * m->hidden, x, sizeof(float) * m->hidden);
}

int pg_forward(const PgModel *m, const PgStep *s) {
    const int threads = s->threads < 1 ? 1 : s->threads;
    Scratch w;
    if (!scratch_for(m, s, threads, &w)) {
        scratch_free(&w);
        return 1;
    }
    const int rows = s->rows, hidden = m->hidden, dim = m->head_dim, heads = m->heads, kv = m->kv_heads;
    const int qkv_width = (heads + 2 * kv) * dim, inner = heads * dim, inter = m->intermediate;
    const int group = heads / kv;
    const int64_t layer_floats = (int64_t)kv * s->capacity * dim;
    int64_t keys_room = s->start + rows + PG_KEY_TILE;
    for (int r = 0; s->sequences != NULL && r < rows; r++)
        keys_room = s->sequences[r].start + 1 + PG_KEY_TILE > keys_room ? s->sequences[r].start + 1 + PG_KEY_TILE
                                                                        : keys_room;
#pragma omp parallel num_threads(threads)
    {
        const int me = PG_THREAD;
        float *scores = w.scores + (int64_t)me * 4 * keys_room;
        int64_t *picked = w.picked + (int64_t)me * rows;
        int *counter = w.counters;
#pragma omp for schedule(static)
        for (int r = 0; r < rows; r++) pg_q8_row(m->embedding, hidden, (int)s->ids[r], w.x + (int64_t)r * hidden);
        for (int i = 0; i < m->layers; i++) {
            const PgLayer *layer = m->layer + i;
#pragma omp for schedule(static)
            for (int r = 0; r < rows; r++) {
                float *x = w.x + (int64_t)r * hidden;
                if (i > 0) pg_add(x, w.projected + (int64_t)r * hidden, hidden); /* the last layer's down */
                copy_aux(m, s, i, x, r);
                pg_rms_norm(x, layer->input_norm, hidden, m->eps, w.normed + (int64_t)r * hidden);
                pg_quantize_row(w.normed, r, hidden, &w.act);
            }
            PgActivations act = pg_with_width(w.act, hidden);
            pg_q4_share(layer->qkv, qkv_width, &act, rows, w.qkv, qkv_width, counter++);
#pragma omp barrier
            /* the new tokens' keys (rotated) and values into the cache: every query below may read any of them */
#pragma omp for schedule(static)
            for (int task = 0; task < rows * kv; task++) {
                int r = task / kv, g = task % kv;
                RowCache c = row_cache(s, r, i, layer_floats, dim, kv);
                const float *row = w.qkv + (int64_t)r * qkv_width;
                float key[256];
                pg_rotate(row + (int64_t)(heads + g) * dim, s->cos + c.position * dim, s->ssin + c.position * dim,
                          dim, key);
                pg_store_entry(c.keys + g * c.capacity * dim, c.values + g * c.capacity * dim, dim, c.slot, key,
                               row + (int64_t)(heads + kv + g) * dim);
            }
            /* a task per row and key head (its query heads share each key read), or per row and query head where
             * that leaves threads idle: the same numbers either way */
            const int per_task = rows * kv >= 2 * threads && group <= 8 ? group : 1, tasks = rows * heads / per_task;
#pragma omp for schedule(static)
            for (int task = 0; task < tasks; task++) {
                int r = task / (heads / per_task), h0 = task % (heads / per_task) * per_task;
                RowCache c = row_cache(s, r, i, layer_floats, dim, kv);
                int64_t at = (int64_t)(h0 / group) * c.capacity * dim;
                float rotated[8][256], *out[8];
                const float *q[8];
                for (int j = 0; j < per_task; j++) {
                    int h = h0 + j;
                    pg_rotate(w.qkv + (int64_t)r * qkv_width + (int64_t)h * dim, s->cos + c.position * dim,
                              s->ssin + c.position * dim, dim, rotated[j]);
                    q[j] = rotated[j];
                    out[j] = w.attended + (int64_t)r * inner + (int64_t)h * dim;
                }
                pg_attend(per_task, q, c.keys + at, c.values + at, dim, c.start, c.start + c.rows, c.slot,
                          s->sees ? s->sees + (int64_t)r * rows : NULL, m->scale, scores, keys_room, picked, out, 0,
                          NULL);
            }
#pragma omp for schedule(static)
            for (int r = 0; r < rows; r++) pg_quantize_row(w.attended, r, inner, &w.act);
            act = pg_with_width(w.act, inner);
            pg_q4_share(layer->o, hidden, &act, rows, w.projected, hidden, counter++);
#pragma omp barrier
#pragma omp for schedule(static)
            for (int r = 0; r < rows; r++) {
                float *x = w.x + (int64_t)r * hidden;
                pg_add(x, w.projected + (int64_t)r * hidden, hidden);
                pg_rms_norm(x, layer->post_norm, hidden, m->eps, w.normed + (int64_t)r * hidden);
                pg_quantize_row(w.normed, r, hidden, &w.act);
            }
            act = pg_with_width(w.act, hidden);
            pg_q4_share(layer->gate_up, 2 * inter, &act, rows, w.gate_up, 2 * inter, counter++);
#pragma omp barrier
#pragma omp for schedule(static)
            for (int r = 0; r < rows; r++) {
                pg_silu_mul(w.gate_up + (int64_t)r * 2 * inter, inter, w.gated + (int64_t)r * inter);
                pg_quantize_row(w.gated, r, inter, &w.act);
            }
            act = pg_with_width(w.act, inter);
            pg_q4_share(layer->down, hidden, &act, rows, w.projected, hidden, counter++);
#pragma omp barrier
        }
        const int first = s->logits_from;
#pragma omp for schedule(static)
        for (int r = 0; r < rows; r++) {
            float *x = w.x + (int64_t)r * hidden;
            pg_add(x, w.projected + (int64_t)r * hidden, hidden);
            copy_aux(m, s, m->layers, x, r);
            if (r >= first) {
                pg_rms_norm(x, m->final_norm, hidden, m->eps, w.normed + (int64_t)(r - first) * hidden);
                pg_quantize_row(w.normed, r - first, hidden, &w.act);
            }
        }
        PgActivations act = pg_with_width(w.act, hidden);
        pg_q8_share(m->head, m->vocab, &act, rows - first, s->logits, m->vocab, counter);
    }
    scratch_free(&w);
    return 0;
}
