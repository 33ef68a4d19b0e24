/* Bloom filters as Hudi writes them: Hadoop's MurmurHash (org.apache.hadoop.util.hash.MurmurHash) folds the tail
 * bytes from the end of the key, sign-extended (Java's byte is signed), and HashFunction chains the seed through
 * nbHash rounds: round i hashes the key with round i-1's hash as seed (0 first) and the bit is
 * Math.abs(hash % vectorSize), Java's signed remainder. The same bits as laketide/index/hashing.py's numpy path. */
#include "_keyhash.h"

/* A key as murmur_chain takes it: its mixed words (in a block's scratch), its length and folded tail. */
typedef struct {
    const uint32_t *mixed;
    int64_t words, tail;
    uint32_t length, folded;
} MixedKey;

/* One round of Hadoop's MurmurHash of a key, from `seed`. */
static inline uint32_t murmur_chain(const MixedKey *key, uint32_t seed)
{
    uint32_t h = seed ^ key->length;
    for (int64_t i = 0; i < key->words; i++) {
        h *= MURMUR_M;
        h ^= key->mixed[i];
    }
    if (key->tail) {
        h ^= key->folded;
        h *= MURMUR_M;
    }
    h ^= h >> 13;
    h *= MURMUR_M;
    h ^= h >> 15;
    return h;
}

/* Math.abs(h % size) for Java's int h: |h| (2^31 for MIN_VALUE) modulo size, by Lemire's multiply in place of
 * a division; `magic` is UINT64_MAX / size + 1. */
static inline uint32_t bit_of(uint32_t h, uint64_t magic, uint32_t size)
{
    int32_t s = (int32_t)h;
    uint32_t magnitude = s < 0 ? (uint32_t)(-(int64_t)s) : (uint32_t)s;
    return (uint32_t)(((__uint128_t)(magic * magnitude) * size) >> 64);
}

typedef struct {
    Py_buffer *views;
    Py_ssize_t count;
} Rows;

static void rows_release(Rows *rows)
{
    for (Py_ssize_t i = 0; i < rows->count; i++)
        PyBuffer_Release(&rows->views[i]);
    PyMem_Free(rows->views);
    rows->views = NULL;
    rows->count = 0;
}

/* A filter's rows: each a contiguous buffer of its `size` bits, 8 a byte, bit i at byte i / 8, bit i % 8 (numpy uint8
 * arrays; Hadoop's serialized bit vector, byte for byte). */
static int rows_get(PyObject *sequence, Py_ssize_t size, int writable, Rows *rows)
{
    rows->views = NULL;
    rows->count = 0;
    PyObject *fast = PySequence_Fast(sequence, "rows must be a sequence of buffers");
    if (!fast)
        return -1;
    Py_ssize_t count = PySequence_Fast_GET_SIZE(fast);
    rows->views = PyMem_Calloc(count ? count : 1, sizeof(Py_buffer));
    if (!rows->views) {
        Py_DECREF(fast);
        PyErr_NoMemory();
        return -1;
    }
    int flags = PyBUF_C_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    for (Py_ssize_t i = 0; i < count; i++) {
        if (PyObject_GetBuffer(PySequence_Fast_GET_ITEM(fast, i), &rows->views[i], flags) < 0)
            goto fail;
        rows->count = i + 1;
        if (rows->views[i].len != (size + 7) / 8) {
            PyErr_Format(PyExc_ValueError, "row %zd holds %zd bytes, not the %zd of the filter's %zd bits", i,
                         rows->views[i].len, (size + 7) / 8, size);
            goto fail;
        }
    }
    Py_DECREF(fast);
    return 0;
fail:
    Py_DECREF(fast);
    rows_release(rows);
    return -1;
}

/* A bloom filter call's arguments, (data, offsets, num_hashes, vector_size, rows, other), checked and held:
 * `other` is row_of (n int32) for bloom_add, out (n bytes) for bloom_contains. */
typedef struct {
    Keys keys;
    Rows rows;
    Py_buffer other;
    int num_hashes;
    uint32_t size;
    uint64_t magic; /* UINT64_MAX / size + 1, for bit_of */
} FilterCall;

static void filter_call_release(FilterCall *call)
{
    if (call->other.obj)
        PyBuffer_Release(&call->other);
    rows_release(&call->rows);
    keys_release(&call->keys);
}

static int filter_call_get(PyObject *args, int writable_rows, int other_flags, FilterCall *call)
{
    PyObject *data, *offsets, *row_list, *other;
    long long vector_size;
    memset(call, 0, sizeof(*call));
    if (!PyArg_ParseTuple(args, "OOiLOO", &data, &offsets, &call->num_hashes, &vector_size, &row_list, &other))
        return -1;
    if (call->num_hashes < 1 || vector_size < 1 || vector_size > INT32_MAX) {
        PyErr_SetString(PyExc_ValueError, "a filter needs num_hashes >= 1 and 1 <= vector_size < 2^31");
        return -1;
    }
    call->size = (uint32_t)vector_size;
    call->magic = UINT64_MAX / call->size + 1;
    if (keys_get(data, offsets, &call->keys) < 0)
        return -1;
    if (rows_get(row_list, (Py_ssize_t)vector_size, writable_rows, &call->rows) < 0 ||
        PyObject_GetBuffer(other, &call->other, PyBUF_C_CONTIGUOUS | other_flags) < 0) {
        filter_call_release(call);
        return -1;
    }
    return 0;
}

/* The bit of every round of keys [first, first + count), count <= BLOCK: positions[round * BLOCK + b]. A wide block
 * goes in vector registers; else the keys' hash chains go round by round side by side, so the CPU overlaps them.
 * -1 when the scratch cannot grow. */
static int block_positions(const FilterCall *call, Py_ssize_t first, int count, uint32_t *positions, Scratch *scratch)
{
    const Keys *keys = &call->keys;
    int64_t longest;
    if (block_is_wide(keys, first, count, &longest))
        return wide_positions(keys, first, longest, call->num_hashes, call->magic, call->size, positions, scratch);
    if (scratch_fit(scratch, (size_t)((keys->at[first + count] - keys->at[first]) >> 2) + 1) < 0)
        return -1;
    MixedKey mixed[BLOCK];
    uint32_t *next = scratch->words;
    for (int b = 0; b < count; b++) {
        const uint8_t *key = keys->bytes + keys->at[first + b];
        int64_t length = keys->at[first + b + 1] - keys->at[first + b];
        MixedKey *m = &mixed[b];
        m->mixed = next;
        m->words = length >> 2;
        m->tail = length & 3;
        m->length = (uint32_t)length;
        m->folded = murmur_tail(key + 4 * m->words, m->tail);
        for (int64_t i = 0; i < m->words; i++)
            next[i] = murmur_word(key + 4 * i);
        next += m->words;
    }
    uint32_t h[BLOCK] = {0};
    for (int round = 0; round < call->num_hashes; round++) {
        for (int b = 0; b < count; b++) {
            h[b] = murmur_chain(&mixed[b], h[b]);
            positions[round * BLOCK + b] = bit_of(h[b], call->magic, call->size);
        }
    }
    return 0;
}

/* What a filter call does with a block of keys once it has their bits (positions, as block_positions lays them). */
typedef void (*BlockStep)(const FilterCall *call, Py_ssize_t first, int count, const uint32_t *positions);

/* The keys a block at a time, `step` on each, without the GIL; then the call's buffers released. `fits`: whether the
 * call's `other` fits its keys, else a ValueError saying `misfit`. */
static PyObject *filter_blocks(FilterCall *call, int fits, const char *misfit, BlockStep step)
{
    uint32_t *positions = NULL;
    Scratch scratch = {NULL, 0};
    int done = 0;
    if (!fits)
        PyErr_SetString(PyExc_ValueError, misfit);
    else if (!(positions = PyMem_Malloc((size_t)call->num_hashes * BLOCK * sizeof(uint32_t))))
        PyErr_NoMemory();
    else {
        done = 1;
        Py_BEGIN_ALLOW_THREADS
        for (Py_ssize_t first = 0; done && first < call->keys.n; first += BLOCK) {
            int count = call->keys.n - first < BLOCK ? (int)(call->keys.n - first) : BLOCK;
            done = block_positions(call, first, count, positions, &scratch) == 0;
            if (done)
                step(call, first, count, positions);
        }
        Py_END_ALLOW_THREADS
        if (!done)
            PyErr_NoMemory();
    }
    free(scratch.words);
    PyMem_Free(positions);
    filter_call_release(call);
    if (!done)
        return NULL;
    Py_RETURN_NONE;
}

/* bloom_add's step: each key's bits set in its row (`other` is row_of). */
static void add_block(const FilterCall *call, Py_ssize_t first, int count, const uint32_t *positions)
{
    /* held in locals: a store through a byte pointer may alias *call, which the compiler would then read again */
    const int32_t *row_of = call->other.buf;
    const Py_buffer *views = call->rows.views;
    int rounds = call->num_hashes;
    for (int b = 0; b < count; b++) {
        uint8_t *bits = views[row_of[first + b]].buf;
        for (int round = 0; round < rounds; round++) {
            uint32_t bit = positions[round * BLOCK + b];
            bits[bit >> 3] |= (uint8_t)(1u << (bit & 7));
        }
    }
}

/* bloom_contains's step: whether some row has every bit of each key (`other` is out). */
static void probe_block(const FilterCall *call, Py_ssize_t first, int count, const uint32_t *positions)
{
    uint8_t *found = call->other.buf;
    const Py_buffer *views = call->rows.views;
    Py_ssize_t filter_rows = call->rows.count;
    int rounds = call->num_hashes;
    for (int b = 0; b < count; b++) {
        uint8_t hit = 0;
        for (Py_ssize_t r = 0; r < filter_rows && !hit; r++) {
            const uint8_t *bits = views[r].buf;
            hit = 1;
            for (int round = 0; round < rounds && hit; round++) {
                uint32_t bit = positions[round * BLOCK + b];
                hit = (bits[bit >> 3] >> (bit & 7)) & 1;
            }
        }
        found[first + b] = hit;
    }
}

const char keyhash_bloom_add_doc[] =
             "bloom_add(data, offsets, num_hashes, vector_size, rows, row_of)\n\n"
             "Set each key's bits in its row: key i goes to rows[row_of[i]] (row_of: n int32).";

PyObject *keyhash_bloom_add(PyObject *self, PyObject *args)
{
    FilterCall call;
    if (filter_call_get(args, 1, 0, &call) < 0)
        return NULL;
    const int32_t *row_of = call.other.buf;
    int fits = call.other.len == call.keys.n * 4;
    for (Py_ssize_t i = 0; fits && i < call.keys.n; i++)
        fits = row_of[i] >= 0 && row_of[i] < call.rows.count;
    return filter_blocks(&call, fits, "row_of must be one int32 row number per key, below the rows given", add_block);
}

const char keyhash_bloom_contains_doc[] =
             "bloom_contains(data, offsets, num_hashes, vector_size, rows, out)\n\n"
             "out[i] = 1 where some row has every bit of key i (out: n bytes, numpy bool).";

PyObject *keyhash_bloom_contains(PyObject *self, PyObject *args)
{
    FilterCall call;
    if (filter_call_get(args, 0, PyBUF_WRITABLE, &call) < 0)
        return NULL;
    return filter_blocks(&call, call.other.len == call.keys.n, "out must be one byte per key", probe_block);
}
