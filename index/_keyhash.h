/* What the key hashing module's files share (_keyhash.c, _keyhash_bloom.c, _keyhash_wide.c). */
#ifndef LAKETIDE_KEYHASH_H
#define LAKETIDE_KEYHASH_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define MURMUR_M 0x5bd1e995u
/* keys hashed round by round together: their chains are independent, so the CPU overlaps them */
#define BLOCK 64

/* Keys as one UTF-8 byte buffer plus n + 1 int64 offsets (hashing.key_bytes), held while a call uses them. */
typedef struct {
    Py_buffer data, offsets;
    const uint8_t *bytes;
    const int64_t *at;
    Py_ssize_t n;
} Keys;

/* The keys' buffers, checked: offsets are n + 1 int64 values, non-decreasing, within the data. */
int keys_get(PyObject *data, PyObject *offsets, Keys *keys);
void keys_release(Keys *keys);

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

/* The mixed words of a block's keys, grown to the longest block (malloc: it is used without the GIL). */
typedef struct {
    uint32_t *words;
    size_t capacity;
} Scratch;

/* Room for `needed` words in the scratch; -1 when it cannot grow. */
static inline int scratch_fit(Scratch *scratch, size_t needed)
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

/* Bloom filters (_keyhash_bloom.c): the module's bloom_add and bloom_contains. */
extern const char keyhash_bloom_add_doc[], keyhash_bloom_contains_doc[];
PyObject *keyhash_bloom_add(PyObject *self, PyObject *args);
PyObject *keyhash_bloom_contains(PyObject *self, PyObject *args);

/* A block of keys hashed in vector registers (_keyhash_wide.c), where the CPU can. wide_init: once, when the module
 * loads. block_is_wide: whether keys [first, first + count) go that way, and their longest key's words.
 * wide_positions: their bits, laid out as block_positions lays them; -1 when the scratch cannot grow. */
void wide_init(void);
int block_is_wide(const Keys *keys, Py_ssize_t first, int count, int64_t *longest);
int wide_positions(const Keys *keys, Py_ssize_t first, int64_t longest, int num_hashes, uint64_t magic, uint32_t size,
                   uint32_t *positions, Scratch *scratch);

#endif
