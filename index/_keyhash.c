/* Key hashing in C: Hadoop's MurmurHash2 as Hudi's bloom filters chain it, and FNV-1a 64; and keys' sort prefixes.
 * Also a write task's sequence numbers (numbered), made straight into a string array's buffers.
 *
 * The same functions as laketide/index/hashing.py's numpy path, bit for bit; that path stays for a
 * laketide that travels without this module (a .zip in spark-submit's --py-files cannot load it).
 * Every function takes the keys as one UTF-8 byte buffer plus int64 offsets (hashing.key_bytes) and
 * releases the GIL while it hashes: a micro-batch's write threads hash their files side by side.
 *
 * Hadoop's MurmurHash (org.apache.hadoop.util.hash.MurmurHash) folds the tail bytes from the end of
 * the key, sign-extended (Java's byte is signed), and HashFunction chains the seed through nbHash
 * rounds: round i hashes the key with round i-1's hash as seed (0 first) and the bit is
 * Math.abs(hash % vectorSize), Java's signed remainder.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MURMUR_M 0x5bd1e995u
/* keys hashed round by round together: their chains are independent, so the CPU overlaps them */
#define BLOCK 64
/* a vector register's keys (LANES 32-bit lanes), and a block's registers: four chains at once hide a multiply's
 * latency, as the scalar code's sixteen keys did */
#define LANES 16
#define VECTORS (BLOCK / LANES)

/* Hadoop's MurmurHash mixes each 4-byte word of a key, and folds its tail, the same way whatever the seed; only
 * the chain through h depends on it. So a key's mixed words are made once and chained through every round: the
 * rounds then cost one multiply a word, not three. */
static inline uint32_t murmur_word(const uint8_t *at)
{
    uint32_t k;
    memcpy(&k, at, 4); /* little-endian, as Hadoop reads the word */
    k *= MURMUR_M;
    k ^= k >> 24;
    return k * MURMUR_M;
}

/* The tail's 1 to 3 bytes folded from the end of the key, sign-extended (Java's byte is signed). */
static inline uint32_t murmur_tail(const uint8_t *rest, int64_t tail)
{
    uint32_t folded = 0;
    for (int64_t j = 0; j < tail; j++)
        folded ^= (uint32_t)(int32_t)(int8_t)rest[j] << (8 * (tail - 1 - j));
    return folded;
}

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
    Py_buffer data, offsets;
    const uint8_t *bytes;
    const int64_t *at;
    Py_ssize_t n;
} Keys;

static void keys_release(Keys *keys)
{
    if (keys->data.obj)
        PyBuffer_Release(&keys->data);
    if (keys->offsets.obj)
        PyBuffer_Release(&keys->offsets);
}

/* The keys' buffers, checked: offsets are n + 1 int64 values, non-decreasing, within the data. */
static int keys_get(PyObject *data, PyObject *offsets, Keys *keys)
{
    memset(keys, 0, sizeof(*keys));
    if (PyObject_GetBuffer(data, &keys->data, PyBUF_C_CONTIGUOUS) < 0)
        return -1;
    if (PyObject_GetBuffer(offsets, &keys->offsets, PyBUF_C_CONTIGUOUS) < 0) {
        keys_release(keys);
        return -1;
    }
    if (keys->offsets.len % 8 != 0 || keys->offsets.len < 8) {
        PyErr_SetString(PyExc_ValueError, "offsets must be n + 1 int64 values");
        keys_release(keys);
        return -1;
    }
    keys->bytes = keys->data.buf;
    keys->at = keys->offsets.buf;
    keys->n = keys->offsets.len / 8 - 1;
    if (keys->at[0] < 0 || keys->at[keys->n] > keys->data.len) {
        PyErr_SetString(PyExc_ValueError, "offsets reach outside the key bytes");
        keys_release(keys);
        return -1;
    }
    for (Py_ssize_t i = 0; i < keys->n; i++) {
        if (keys->at[i + 1] < keys->at[i]) {
            PyErr_SetString(PyExc_ValueError, "offsets must not decrease");
            keys_release(keys);
            return -1;
        }
    }
    return 0;
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

/* A filter's rows: each a contiguous buffer of `size` one-byte booleans (numpy bool arrays). */
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
        if (rows->views[i].len != size) {
            PyErr_Format(PyExc_ValueError, "row %zd holds %zd bytes, not the filter's %zd bits", i,
                         rows->views[i].len, size);
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

/* The mixed words of a block's keys, grown to the longest block (malloc: it is used without the GIL). */
typedef struct {
    uint32_t *words;
    size_t capacity;
} Scratch;

/* Room for `needed` words in the scratch; -1 when it cannot grow. */
static int scratch_fit(Scratch *scratch, size_t needed)
{
    if (needed > scratch->capacity) {
        uint32_t *grown = realloc(scratch->words, needed * sizeof(uint32_t));
        if (!grown)
            return -1;
        scratch->words = grown;
        scratch->capacity = needed;
    }
    return 0;
}

/* A whole block's chains in vector registers, one key a lane: the same arithmetic as murmur_chain and bit_of,
 * every lane at once. A lane past its key's words keeps its hash (a mask), so keys of any lengths share a block.
 * Only with AVX-512, checked when the module loads: with AVX2 (no 64-bit multiply) or SSE2 this took longer than the
 * scalar chains. */
#if defined(__x86_64__) && defined(__GNUC__)
#define WIDE_BUILT 1
static int wide_cpu; /* set once, when the module loads, before any call can read it */
typedef uint32_t u32x16 __attribute__((vector_size(64)));
typedef uint64_t u64x8 __attribute__((vector_size(64)));
typedef uint32_t u32x8 __attribute__((vector_size(32)));

/* A wide block's keys, lane by lane: length in bytes, whole words, tail bytes and the tail folded. */
typedef struct {
    u32x16 lengths[VECTORS], words[VECTORS], tails[VECTORS], folded[VECTORS];
} WideKeys;

/* bit_of on eight lanes, into `out`: Lemire's multiply split into 32-bit halves, each product 32 x 32 -> 64 bits.
 * (Vectors go by pointer: GCC passes a vector argument differently for each instruction set.) */
static inline __attribute__((always_inline)) void bits_of8(const uint32_t *magnitude, uint64_t magic, uint32_t size,
                                                           uint32_t *out)
{
    u32x8 lanes;
    memcpy(&lanes, magnitude, sizeof(lanes));
    u64x8 m = __builtin_convertvector(lanes, u64x8);
    u64x8 low = (m * (magic & 0xffffffffu)) + ((m * (magic >> 32)) << 32); /* magic * m, modulo 2^64 */
    u32x8 bits = __builtin_convertvector(((low >> 32) * size + (((low & 0xffffffffu) * size) >> 32)) >> 32, u32x8);
    memcpy(out, &bits, sizeof(bits));
}

__attribute__((target("avx512f"))) static void block_positions_wide(const uint32_t *mixed, int max_words,
                                                                    const WideKeys *keys, int num_hashes,
                                                                    uint64_t magic, uint32_t size, uint32_t *positions)
{
    u32x16 h[VECTORS] = {{0}};
    for (int round = 0; round < num_hashes; round++) {
        for (int v = 0; v < VECTORS; v++)
            h[v] ^= keys->lengths[v];
        for (int i = 0; i < max_words; i++) {
            for (int v = 0; v < VECTORS; v++) {
                u32x16 word;
                memcpy(&word, mixed + (size_t)i * BLOCK + v * LANES, sizeof(word));
                u32x16 active = (u32x16)(keys->words[v] > (uint32_t)i);
                h[v] = (((h[v] * MURMUR_M) ^ word) & active) | (h[v] & ~active);
            }
        }
        for (int v = 0; v < VECTORS; v++) {
            u32x16 x = h[v], has_tail = (u32x16)(keys->tails[v] != 0);
            x = (((x ^ keys->folded[v]) * MURMUR_M) & has_tail) | (x & ~has_tail);
            x ^= x >> 13;
            x *= MURMUR_M;
            x ^= x >> 15;
            h[v] = x;
            u32x16 negative = (u32x16)((x >> 31) != 0);
            u32x16 magnitude = ((0u - x) & negative) | (x & ~negative);
            uint32_t lanes[LANES];
            memcpy(lanes, &magnitude, sizeof(lanes));
            uint32_t *out = positions + round * BLOCK + v * LANES;
            bits_of8(lanes, magic, size, out);
            bits_of8(lanes + 8, magic, size, out + 8);
        }
    }
}

/* Whether a block's keys go through block_positions_wide: a whole block, with no key so much longer than the others
 * that the lanes would mostly wait for it (each lane runs as many words as the longest key has). */
static int block_is_wide(const Keys *keys, Py_ssize_t first, int count, int64_t *longest)
{
    *longest = 0;
    if (!wide_cpu || count != BLOCK)
        return 0;
    for (int b = 0; b < BLOCK; b++) {
        int64_t words = (keys->at[first + b + 1] - keys->at[first + b]) >> 2;
        *longest = words > *longest ? words : *longest;
    }
    int64_t total = (keys->at[first + BLOCK] - keys->at[first]) >> 2;
    return *longest <= INT32_MAX / BLOCK && *longest * BLOCK <= 2 * total + 2 * BLOCK;
}

/* block_positions for a wide block: the keys' mixed words laid out word by word, a lane a key (zero past a key's
 * end, where the lane's mask keeps its hash). */
static int wide_positions(const FilterCall *call, Py_ssize_t first, int64_t longest, uint32_t *positions,
                          Scratch *scratch)
{
    const Keys *keys = &call->keys;
    if (scratch_fit(scratch, (size_t)longest * BLOCK + 1) < 0)
        return -1;
    WideKeys wide;
    for (int b = 0; b < BLOCK; b++) {
        const uint8_t *key = keys->bytes + keys->at[first + b];
        int64_t length = keys->at[first + b + 1] - keys->at[first + b];
        int v = b / LANES, lane = b % LANES;
        wide.lengths[v][lane] = (uint32_t)length;
        wide.words[v][lane] = (uint32_t)(length >> 2);
        wide.tails[v][lane] = (uint32_t)(length & 3);
        wide.folded[v][lane] = murmur_tail(key + 4 * (length >> 2), length & 3);
        for (int64_t i = 0; i < longest; i++)
            scratch->words[i * BLOCK + b] = i < (length >> 2) ? murmur_word(key + 4 * i) : 0;
    }
    block_positions_wide(scratch->words, (int)longest, &wide, call->num_hashes, call->magic, call->size, positions);
    return 0;
}

#else
#define WIDE_BUILT 0
#endif

/* The bit of every round of keys [first, first + count), count <= BLOCK: positions[round * BLOCK + b]. A wide block
 * goes in vector registers; else the keys' hash chains go round by round side by side, so the CPU overlaps them.
 * -1 when the scratch cannot grow. */
static int block_positions(const FilterCall *call, Py_ssize_t first, int count, uint32_t *positions, Scratch *scratch)
{
    const Keys *keys = &call->keys;
#if WIDE_BUILT
    int64_t longest;
    if (block_is_wide(keys, first, count, &longest))
        return wide_positions(call, first, longest, positions, scratch);
#endif
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
        for (int round = 0; round < rounds; round++)
            bits[positions[round * BLOCK + b]] = 1;
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
            for (int round = 0; round < rounds && hit; round++)
                hit = bits[positions[round * BLOCK + b]] != 0;
        }
        found[first + b] = hit;
    }
}

PyDoc_STRVAR(bloom_add_doc,
             "bloom_add(data, offsets, num_hashes, vector_size, rows, row_of)\n\n"
             "Set each key's bits in its row: key i goes to rows[row_of[i]] (row_of: n int32).");

static PyObject *bloom_add(PyObject *self, PyObject *args)
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

PyDoc_STRVAR(bloom_contains_doc,
             "bloom_contains(data, offsets, num_hashes, vector_size, rows, out)\n\n"
             "out[i] = 1 where some row has every bit of key i (out: n bytes, numpy bool).");

static PyObject *bloom_contains(PyObject *self, PyObject *args)
{
    FilterCall call;
    if (filter_call_get(args, 0, PyBUF_WRITABLE, &call) < 0)
        return NULL;
    return filter_blocks(&call, call.other.len == call.keys.n, "out must be one byte per key", probe_block);
}

/* A call that writes one uint64 per key: its keys and its `out` buffer, checked. */
typedef struct {
    Keys keys;
    Py_buffer out;
} KeysOut;

static int keys_out_get(PyObject *data, PyObject *offsets, PyObject *out, KeysOut *call)
{
    if (keys_get(data, offsets, &call->keys) < 0)
        return -1;
    if (PyObject_GetBuffer(out, &call->out, PyBUF_C_CONTIGUOUS | PyBUF_WRITABLE) < 0) {
        keys_release(&call->keys);
        return -1;
    }
    if (call->out.len != call->keys.n * 8) {
        PyErr_SetString(PyExc_ValueError, "out must be one uint64 per key");
        PyBuffer_Release(&call->out);
        keys_release(&call->keys);
        return -1;
    }
    return 0;
}

static void keys_out_release(KeysOut *call)
{
    PyBuffer_Release(&call->out);
    keys_release(&call->keys);
}

PyDoc_STRVAR(fnv1a64_doc,
             "fnv1a64(data, offsets, out, seeds=None)\n\n"
             "FNV-1a 64 of every key into out (n uint64); from seeds[i] (n uint64), where given, in place of FNV's\n"
             "offset basis: the hash of some bytes followed by the key, the bytes' hash being the seed.");

static PyObject *fnv1a64(PyObject *self, PyObject *args)
{
    PyObject *data, *offsets, *out, *seeds_arg = Py_None;
    Py_buffer seeds_view = {0};
    KeysOut call;
    if (!PyArg_ParseTuple(args, "OOO|O", &data, &offsets, &out, &seeds_arg) ||
        keys_out_get(data, offsets, out, &call) < 0)
        return NULL;
    if (seeds_arg != Py_None) {
        if (PyObject_GetBuffer(seeds_arg, &seeds_view, PyBUF_C_CONTIGUOUS) < 0) {
            keys_out_release(&call);
            return NULL;
        }
        if (seeds_view.len != call.keys.n * 8) {
            PyErr_SetString(PyExc_ValueError, "seeds must be one uint64 per key");
            PyBuffer_Release(&seeds_view);
            keys_out_release(&call);
            return NULL;
        }
    }
    const Keys *keys = &call.keys;
    uint64_t *hashes = call.out.buf;
    const uint64_t *seeds = seeds_view.obj ? seeds_view.buf : NULL;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < keys->n; i++) {
        uint64_t h = seeds ? seeds[i] : UINT64_C(0xcbf29ce484222325);
        for (int64_t at = keys->at[i]; at < keys->at[i + 1]; at++) {
            h ^= keys->bytes[at];
            h *= UINT64_C(0x100000001b3);
        }
        hashes[i] = h;
    }
    Py_END_ALLOW_THREADS
    if (seeds_view.obj)
        PyBuffer_Release(&seeds_view);
    keys_out_release(&call);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(key_prefixes_doc,
             "key_prefixes(data, offsets, skip, out)\n\n"
             "Bytes [skip, skip + 8) of every key as one big-endian uint64 into out (n uint64), zero past its end:\n"
             "in the keys' byte order where they differ there.");

static PyObject *key_prefixes(PyObject *self, PyObject *args)
{
    PyObject *data, *offsets, *out;
    Py_ssize_t skip;
    KeysOut call;
    if (!PyArg_ParseTuple(args, "OOnO", &data, &offsets, &skip, &out))
        return NULL;
    if (skip < 0) {
        PyErr_SetString(PyExc_ValueError, "skip must be >= 0");
        return NULL;
    }
    if (keys_out_get(data, offsets, out, &call) < 0)
        return NULL;
    const Keys *keys = &call.keys;
    uint64_t *prefixes = call.out.buf;
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < keys->n; i++) {
        int64_t from = keys->at[i] + skip, end = keys->at[i + 1];
        uint64_t prefix = 0;
        for (int j = 0; j < 8; j++)
            prefix = (prefix << 8) | (from + j < end ? keys->bytes[from + j] : 0);
        prefixes[i] = prefix;
    }
    Py_END_ALLOW_THREADS
    keys_out_release(&call);
    Py_RETURN_NONE;
}

PyDoc_STRVAR(numbered_doc,
             "numbered(prefix, start, n) -> (offsets, data)\n\n"
             "The strings prefix + str(start + i) for i < n, as an Arrow string array's buffers: n + 1 int32 offsets\n"
             "and the UTF-8 bytes (a write task's sequence numbers, ``{instant}_{task}_{n}``).");

/* Decimal digits of v into out (at most 20), returning their count. */
static int decimal(uint64_t v, char *out)
{
    char reversed[20];
    int count = 0;
    do {
        reversed[count++] = (char)('0' + v % 10);
        v /= 10;
    } while (v);
    for (int i = 0; i < count; i++)
        out[i] = reversed[count - 1 - i];
    return count;
}

/* The decimal digits of all the numbers in [start, end), counted a decade at a time. */
static uint64_t digits_in(uint64_t start, uint64_t end)
{
    uint64_t total = 0, high = 10; /* the numbers below `high` have at most `digits` digits */
    for (int digits = 1; start < end; digits++) {
        uint64_t stop = (digits == 20 || end < high) ? end : high;
        if (stop > start) {
            total += (stop - start) * (uint64_t)digits;
            start = stop;
        }
        if (digits < 19)
            high *= 10;
    }
    return total;
}

static PyObject *numbered(PyObject *self, PyObject *args)
{
    const char *prefix;
    Py_ssize_t prefix_length, n;
    unsigned long long start;
    if (!PyArg_ParseTuple(args, "y#Kn", &prefix, &prefix_length, &start, &n))
        return NULL;
    if (n < 0 || (unsigned long long)n > UINT64_MAX - start) {
        PyErr_SetString(PyExc_ValueError, "n must be >= 0 and start + n within 64 bits");
        return NULL;
    }
    if (n > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "the strings exceed a string array's 2 GiB");
        return NULL;
    }
    uint64_t total = digits_in(start, start + (uint64_t)n);
    total += (uint64_t)prefix_length * (uint64_t)n;
    if (total > INT32_MAX) {
        PyErr_SetString(PyExc_OverflowError, "the strings exceed a string array's 2 GiB");
        return NULL;
    }
    PyObject *offsets = PyBytes_FromStringAndSize(NULL, (n + 1) * (Py_ssize_t)sizeof(int32_t));
    PyObject *data = offsets ? PyBytes_FromStringAndSize(NULL, (Py_ssize_t)total) : NULL;
    if (!data) {
        Py_XDECREF(offsets);
        return NULL;
    }
    int32_t *at = (int32_t *)PyBytes_AS_STRING(offsets);
    char *out = PyBytes_AS_STRING(data);
    int32_t position = 0;
    /* the number's digits kept right-aligned in `counter` and counted up in place: dividing each number down to its
     * digits cost most of the call */
    char counter[20], digits[20];
    int width = decimal(start, digits), first = 20 - width;
    memcpy(counter + first, digits, (size_t)width);
    Py_BEGIN_ALLOW_THREADS
    for (Py_ssize_t i = 0; i < n; i++) {
        at[i] = position;
        memcpy(out + position, prefix, (size_t)prefix_length);
        position += (int32_t)prefix_length;
        memcpy(out + position, counter + first, (size_t)(20 - first));
        position += 20 - first;
        int digit = 19;
        while (digit >= first && counter[digit] == '9')
            counter[digit--] = '0';
        if (digit >= first)
            counter[digit]++;
        else if (first > 0) /* all nines: one digit more (start + n fits in 64 bits, so 20 digits at most) */
            counter[--first] = '1';
    }
    at[n] = position;
    Py_END_ALLOW_THREADS
    return Py_BuildValue("(NN)", offsets, data);
}

static PyMethodDef methods[] = {
    {"bloom_add", bloom_add, METH_VARARGS, bloom_add_doc},
    {"bloom_contains", bloom_contains, METH_VARARGS, bloom_contains_doc},
    {"fnv1a64", fnv1a64, METH_VARARGS, fnv1a64_doc},
    {"key_prefixes", key_prefixes, METH_VARARGS, key_prefixes_doc},
    {"numbered", numbered, METH_VARARGS, numbered_doc},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_keyhash", "Key hashing for bloom filters and the state index, in C.", -1, methods,
};

PyMODINIT_FUNC PyInit__keyhash(void)
{
#if WIDE_BUILT
    __builtin_cpu_init();
    wide_cpu = __builtin_cpu_supports("avx512f");
#endif
    return PyModule_Create(&module);
}
