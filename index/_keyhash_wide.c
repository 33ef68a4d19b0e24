/* A whole block's chains in vector registers, one key a lane: the same arithmetic as murmur_chain and bit_of
 * (_keyhash_bloom.c), every lane at once. A lane past its key's words keeps its hash (a mask), so keys of any
 * lengths share a block. Only with AVX-512, checked when the module loads: with AVX2 (no 64-bit multiply) or SSE2
 * this took longer than the scalar chains. */
#include "_keyhash.h"

#if defined(__x86_64__) && defined(__GNUC__)
/* a vector register's keys (LANES 32-bit lanes), and a block's registers: four chains at once hide a multiply's
 * latency, as the scalar code's block of keys does */
#define LANES 16
#define VECTORS (BLOCK / LANES)

static int wide_cpu; /* set once, when the module loads (wide_init), before any call can read it */

void wide_init(void)
{
    __builtin_cpu_init();
    wide_cpu = __builtin_cpu_supports("avx512f");
}

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
int block_is_wide(const Keys *keys, Py_ssize_t first, int count, int64_t *longest)
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

/* The keys' mixed words laid out word by word, a lane a key (zero past a key's end, where the lane's mask keeps its
 * hash). */
int wide_positions(const Keys *keys, Py_ssize_t first, int64_t longest, int num_hashes, uint64_t magic, uint32_t size,
                   uint32_t *positions, Scratch *scratch)
{
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
    block_positions_wide(scratch->words, (int)longest, &wide, num_hashes, magic, size, positions);
    return 0;
}

#else
void wide_init(void) {}

int block_is_wide(const Keys *keys, Py_ssize_t first, int count, int64_t *longest)
{
    (void)keys, (void)first, (void)count;
    *longest = 0;
    return 0;
}

int wide_positions(const Keys *keys, Py_ssize_t first, int64_t longest, int num_hashes, uint64_t magic, uint32_t size,
                   uint32_t *positions, Scratch *scratch)
{
    (void)keys, (void)first, (void)longest, (void)num_hashes, (void)magic, (void)size, (void)positions, (void)scratch;
    return -1; /* never called: no block is wide */
}
#endif
