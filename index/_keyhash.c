/* Key hashing in C: FNV-1a 64 (the state index's key hash) and keys' sort prefixes here, Hadoop's MurmurHash2 as
 * Hudi's bloom filters chain it in _keyhash_bloom.c (with AVX-512, a block of keys at once: _keyhash_wide.c); and a
 * write task's sequence numbers (numbered), made straight into a string array's buffers.
 *
 * The same functions as laketide/index/hashing.py's numpy path, bit for bit; that path stays for a
 * laketide that travels without this module (a .zip in spark-submit's --py-files cannot load it).
 * Every function takes the keys as one UTF-8 byte buffer plus int64 offsets (hashing.key_bytes) and
 * releases the GIL while it hashes: a micro-batch's write threads hash their files side by side.
 */
#include "_keyhash.h"

void keys_release(Keys *keys)
{
    if (keys->data.obj)
        PyBuffer_Release(&keys->data);
    if (keys->offsets.obj)
        PyBuffer_Release(&keys->offsets);
}

int keys_get(PyObject *data, PyObject *offsets, Keys *keys)
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

/* The decimal digits of v written right-aligned, ending just before `end` (at most 20); their count. */
static int decimal_before(uint64_t v, char *end)
{
    int count = 0;
    do {
        *--end = (char)('0' + v % 10);
        v /= 10;
        count++;
    } while (v);
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
    char counter[20];
    int first = 20 - decimal_before(start, counter + 20);
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
    {"bloom_add", keyhash_bloom_add, METH_VARARGS, keyhash_bloom_add_doc},
    {"bloom_contains", keyhash_bloom_contains, METH_VARARGS, keyhash_bloom_contains_doc},
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
    wide_init();
    return PyModule_Create(&module);
}
