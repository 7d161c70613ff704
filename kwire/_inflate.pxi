# lz4 and zstd for v2 batches, off the GIL and on a second core.
#
# The reference C libraries (liblz4, libzstd) are loaded at import with dlopen: the system's
# (Debian: liblz4-1, libzstd1) or, failing that, the copy inside the `lz4` wheel.  When neither
# is there, batches decompress through cramjam as before (kwire.records.NATIVE_DECOMPRESSION
# says which).
#
# Decoding a Fetch answer of several compressed batches, the decoder hands them to a worker
# thread (plain pthread: it never touches a Python object) that decompresses ahead into a ring
# of _PIPE_SLOTS blocks while this thread decodes the records of the previous block:
#
#   worker:  [inflate b0][inflate b1][inflate b2]      [inflate b3] ...   (waits for a free slot)
#   decoder:             [decode b0 ][decode b1 ][decode b2 ][decode b3 ] ...
#
# The decoder still checks each batch's CRC before it reads the block, so a corrupt batch
# fails exactly as without the worker; the worker only ever reads the (held) input buffer
# and writes its own slots.  A batch that does not fit a slot is decompressed by the decoder
# itself (growing its scratch block), as is everything when the worker could not start.

from libc.stdlib cimport malloc, free
from posix.unistd cimport getpid

cdef extern from *:
    """
    #include <dlfcn.h>
    #include <pthread.h>
    #include <stdlib.h>
    #include <string.h>

    /* the few entry points we call; both libraries keep them ABI-stable */
    typedef size_t (*kw_lz4f_create_fn)(void**, unsigned);
    typedef size_t (*kw_lz4f_free_fn)(void*);
    typedef size_t (*kw_lz4f_decompress_fn)(void*, void*, size_t*, const void*, size_t*, const void*);
    typedef void (*kw_lz4f_reset_fn)(void*);
    typedef unsigned (*kw_iserror_fn)(size_t);
    typedef const char* (*kw_errname_fn)(size_t);
    typedef void* (*kw_zstd_create_fn)(void);
    typedef size_t (*kw_zstd_free_fn)(void*);
    typedef size_t (*kw_zstd_decompress_fn)(void*, void*, size_t, const void*, size_t);
    typedef int (*kw_zstd_errcode_fn)(size_t);

    #define KW_LZ4F_VERSION 100
    #define KW_ZSTD_DST_TOO_SMALL 70      /* ZSTD_error_dstSize_tooSmall */
    #define KW_TOO_SMALL (-2)
    #define KW_FAILED (-1)

    static struct {
        int lz4, zstd;
        kw_lz4f_create_fn lz4f_create; kw_lz4f_free_fn lz4f_free;
        kw_lz4f_decompress_fn lz4f_decompress; kw_lz4f_reset_fn lz4f_reset;
        kw_iserror_fn lz4f_iserror; kw_errname_fn lz4f_errname;
        kw_zstd_create_fn zstd_create; kw_zstd_free_fn zstd_free;
        kw_zstd_decompress_fn zstd_decompress; kw_iserror_fn zstd_iserror;
        kw_errname_fn zstd_errname; kw_zstd_errcode_fn zstd_errcode;
    } kw_z;

    static int kw_z_load_lz4(const char* path) {
        void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h) return 0;
        kw_z.lz4f_create = (kw_lz4f_create_fn)dlsym(h, "LZ4F_createDecompressionContext");
        kw_z.lz4f_free = (kw_lz4f_free_fn)dlsym(h, "LZ4F_freeDecompressionContext");
        kw_z.lz4f_decompress = (kw_lz4f_decompress_fn)dlsym(h, "LZ4F_decompress");
        kw_z.lz4f_reset = (kw_lz4f_reset_fn)dlsym(h, "LZ4F_resetDecompressionContext");
        kw_z.lz4f_iserror = (kw_iserror_fn)dlsym(h, "LZ4F_isError");
        kw_z.lz4f_errname = (kw_errname_fn)dlsym(h, "LZ4F_getErrorName");
        kw_z.lz4 = kw_z.lz4f_create && kw_z.lz4f_free && kw_z.lz4f_decompress && kw_z.lz4f_reset
                   && kw_z.lz4f_iserror && kw_z.lz4f_errname;
        return kw_z.lz4;
    }

    static int kw_z_load_zstd(const char* path) {
        void* h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (!h) return 0;
        kw_z.zstd_create = (kw_zstd_create_fn)dlsym(h, "ZSTD_createDCtx");
        kw_z.zstd_free = (kw_zstd_free_fn)dlsym(h, "ZSTD_freeDCtx");
        kw_z.zstd_decompress = (kw_zstd_decompress_fn)dlsym(h, "ZSTD_decompressDCtx");
        kw_z.zstd_iserror = (kw_iserror_fn)dlsym(h, "ZSTD_isError");
        kw_z.zstd_errname = (kw_errname_fn)dlsym(h, "ZSTD_getErrorName");
        kw_z.zstd_errcode = (kw_zstd_errcode_fn)dlsym(h, "ZSTD_getErrorCode");
        kw_z.zstd = kw_z.zstd_create && kw_z.zstd_free && kw_z.zstd_decompress
                    && kw_z.zstd_iserror && kw_z.zstd_errname && kw_z.zstd_errcode;
        return kw_z.zstd;
    }

    /* One decompression context of each kind (a context serves one thread at a time). */
    typedef struct { void* lz4; void* zstd; } kw_zctx;

    static void kw_zctx_free(kw_zctx* c) {
        if (c->lz4) kw_z.lz4f_free(c->lz4);
        if (c->zstd) kw_z.zstd_free(c->zstd);
        c->lz4 = c->zstd = NULL;
    }

    /* codec 3 (lz4 frames) or 4 (zstd frames) from src[0:n] into dst[0:cap].  Returns the
       size produced, KW_TOO_SMALL when dst is too small, or KW_FAILED with *msg set. */
    static Py_ssize_t kw_inflate(kw_zctx* c, int codec, const unsigned char* src, size_t n,
                                 unsigned char* dst, size_t cap, const char** msg) {
        if (codec == 4) {
            size_t r;
            if (n == 0) { *msg = "empty zstd payload"; return KW_FAILED; }
            if (!c->zstd && !(c->zstd = kw_z.zstd_create())) { *msg = "out of memory"; return KW_FAILED; }
            r = kw_z.zstd_decompress(c->zstd, dst, cap, src, n);
            if (kw_z.zstd_iserror(r)) {
                if (kw_z.zstd_errcode(r) == KW_ZSTD_DST_TOO_SMALL) return KW_TOO_SMALL;
                *msg = kw_z.zstd_errname(r);
                return KW_FAILED;
            }
            return (Py_ssize_t)r;
        } else {
            size_t in_pos = 0, out_pos = 0;
            if (!c->lz4) {
                if (kw_z.lz4f_iserror(kw_z.lz4f_create(&c->lz4, KW_LZ4F_VERSION))) {
                    c->lz4 = NULL; *msg = "out of memory"; return KW_FAILED;
                }
            } else {
                kw_z.lz4f_reset(c->lz4);
            }
            for (;;) {
                size_t in_sz = n - in_pos, out_sz = cap - out_pos;
                size_t r = kw_z.lz4f_decompress(c->lz4, dst + out_pos, &out_sz, src + in_pos, &in_sz, NULL);
                if (kw_z.lz4f_iserror(r)) { *msg = kw_z.lz4f_errname(r); return KW_FAILED; }
                in_pos += in_sz;
                out_pos += out_sz;
                if (r == 0) {                       /* a frame ended */
                    if (in_pos == n) return (Py_ssize_t)out_pos;
                    continue;                       /* another frame follows */
                }
                if (out_pos == cap) return KW_TOO_SMALL;
                if (in_pos == n) { *msg = "truncated lz4 frame"; return KW_FAILED; }
                if (in_sz == 0 && out_sz == 0) { *msg = "lz4 decoder made no progress"; return KW_FAILED; }
            }
        }
    }

    /* --- the worker ------------------------------------------------------------------- */
    #define KW_PIPE_SLOTS 8

    typedef struct {
        const unsigned char* src;
        size_t n;
        Py_ssize_t entry;                   /* position of the batch (for matching) */
        int codec;
        int status;                         /* 0 pending, 1 done, KW_TOO_SMALL, KW_FAILED */
        Py_ssize_t produced;
        const char* msg;
    } kw_job;

    typedef struct {
        pthread_t thread;
        pthread_mutex_t mu;
        pthread_cond_t cv;
        kw_job* jobs;
        int njobs;
        int done;                           /* jobs finished by the worker */
        int released;                       /* jobs whose slot the decoder gave back */
        int worker_wants;                   /* the worker sleeps until released reaches this */
        int cancel;
        unsigned char* slot[KW_PIPE_SLOTS];
        size_t slot_cap;
        int nslots;                         /* slots in use (2..KW_PIPE_SLOTS) */
        kw_zctx ctx;
    } kw_pipe;

    static void* kw_pipe_run(void* arg) {
        kw_pipe* p = (kw_pipe*)arg;
        int j;
        for (j = 0; j < p->njobs; j++) {
            kw_job* job = &p->jobs[j];
            const char* msg = NULL;
            Py_ssize_t r;
            pthread_mutex_lock(&p->mu);
            if (j - p->released >= p->nslots) {
                /* the ring is full: sleep until half of it is free, not for every slot */
                p->worker_wants = j - p->nslots / 2;
                while (!p->cancel && p->released < p->worker_wants)
                    pthread_cond_wait(&p->cv, &p->mu);
                p->worker_wants = 0;
            }
            if (p->cancel) { pthread_mutex_unlock(&p->mu); break; }
            pthread_mutex_unlock(&p->mu);
            r = kw_inflate(&p->ctx, job->codec, job->src, job->n, p->slot[j % p->nslots],
                           p->slot_cap, &msg);
            pthread_mutex_lock(&p->mu);
            job->produced = r;
            job->msg = msg;
            job->status = r >= 0 ? 1 : (int)r;
            __atomic_store_n(&p->done, j + 1, __ATOMIC_RELEASE);
            pthread_cond_broadcast(&p->cv);
            pthread_mutex_unlock(&p->mu);
        }
        return NULL;
    }

    /* 0 when the worker runs; the caller filled jobs/njobs/slot/slot_cap/nslots */
    static int kw_pipe_start(kw_pipe* p) {
        p->done = p->released = p->cancel = p->worker_wants = 0;
        p->ctx.lz4 = p->ctx.zstd = NULL;
        if (pthread_mutex_init(&p->mu, NULL)) return -1;
        if (pthread_cond_init(&p->cv, NULL)) { pthread_mutex_destroy(&p->mu); return -1; }
        if (pthread_create(&p->thread, NULL, kw_pipe_run, p)) {
            pthread_cond_destroy(&p->cv); pthread_mutex_destroy(&p->mu); return -1;
        }
        return 0;
    }

    static void kw_pipe_wait(kw_pipe* p, int j) {
        int spin;
        /* the worker is usually about to finish: look a few times before sleeping */
        for (spin = 0; spin < 2000; spin++) {
            if (__atomic_load_n(&p->done, __ATOMIC_ACQUIRE) > j) return;
        }
        pthread_mutex_lock(&p->mu);
        while (p->done <= j) pthread_cond_wait(&p->cv, &p->mu);
        pthread_mutex_unlock(&p->mu);
    }

    static void kw_pipe_release(kw_pipe* p, int upto) {
        pthread_mutex_lock(&p->mu);
        if (upto > p->released) p->released = upto;
        if (p->worker_wants && p->released >= p->worker_wants)
            pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }

    static void kw_pipe_stop(kw_pipe* p) {
        pthread_mutex_lock(&p->mu);
        p->cancel = 1;
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
        pthread_join(p->thread, NULL);
        pthread_cond_destroy(&p->cv);
        pthread_mutex_destroy(&p->mu);
        kw_zctx_free(&p->ctx);
    }
    """
    int kw_z_load_lz4(const char* path)
    int kw_z_load_zstd(const char* path)
    ctypedef struct kw_zctx:
        void* lz4
        void* zstd
    void kw_zctx_free(kw_zctx* c) nogil
    Py_ssize_t kw_inflate(kw_zctx* c, int codec, const uint8_t* src, size_t n, uint8_t* dst,
                          size_t cap, const char** msg) nogil
    int KW_TOO_SMALL
    int KW_FAILED
    int KW_PIPE_SLOTS
    ctypedef struct kw_job:
        const uint8_t* src
        size_t n
        Py_ssize_t entry
        int codec
        int status
        Py_ssize_t produced
        const char* msg
    ctypedef struct kw_pipe:
        kw_job* jobs
        int njobs
        uint8_t* slot[8]
        size_t slot_cap
        int nslots
    int kw_pipe_start(kw_pipe* p) nogil
    void kw_pipe_wait(kw_pipe* p, int j) nogil
    void kw_pipe_release(kw_pipe* p, int upto) nogil
    void kw_pipe_stop(kw_pipe* p) nogil


cdef enum:
    _PIPE_MIN_SLOT = 1024 * 1024
    _PIPE_MAX_SLOT = 16 * 1024 * 1024   # bigger batches are decompressed by the decoder itself


def _load_native_decompressors():
    # The system libraries first, then the ones inside the lz4 wheel (its extension exports
    # the LZ4F_* symbols).  Returns which codecs are native.
    import glob
    import os
    names = {"lz4": ["liblz4.so.1", "liblz4.1.dylib", "liblz4.dylib"],
             "zstd": ["libzstd.so.1", "libzstd.1.dylib", "libzstd.dylib"]}
    try:
        import lz4.frame as _lz4_frame
        names["lz4"] += glob.glob(os.path.join(os.path.dirname(_lz4_frame.__file__), "_frame*"))
    except ImportError:
        pass
    native = []
    if os.environ.get("KWIRE_NATIVE_DECOMPRESSION", "1") != "0":
        for path in names["lz4"]:
            if kw_z_load_lz4(os.fsencode(path)):
                native.append("lz4")
                break
        for path in names["zstd"]:
            if kw_z_load_zstd(os.fsencode(path)):
                native.append("zstd")
                break
    return tuple(native)


NATIVE_DECOMPRESSION = _load_native_decompressors()
cdef bint _NATIVE_LZ4 = "lz4" in NATIVE_DECOMPRESSION
cdef bint _NATIVE_ZSTD = "zstd" in NATIVE_DECOMPRESSION
# compressed bytes ahead that make a worker worth starting (a thread costs ~30 us)
import os as _os
cdef Py_ssize_t _pipe_min_bytes = (128 * 1024 if _os.environ.get("KWIRE_DECOMPRESSION_WORKER", "1") != "0"
                                   else -1)
cdef Py_ssize_t _pipe_starts = 0        # workers started so far (tests check the path ran)


def _worker_starts():
    return _pipe_starts


def _decompression_settings(native=None, worker_min_bytes=None):
    """For tests and benchmarks: switch the native libraries off/on (when loaded) and set
    the compressed size from which a worker starts (-1: never).  Returns the previous
    (native, worker_min_bytes)."""
    global _NATIVE_LZ4, _NATIVE_ZSTD, _pipe_min_bytes
    previous = (_NATIVE_LZ4 or _NATIVE_ZSTD, _pipe_min_bytes)
    if native is not None:
        _NATIVE_LZ4 = bool(native) and "lz4" in NATIVE_DECOMPRESSION
        _NATIVE_ZSTD = bool(native) and "zstd" in NATIVE_DECOMPRESSION
    if worker_min_bytes is not None:
        _pipe_min_bytes = worker_min_bytes
    return previous


cdef inline bint _native(int codec) noexcept:
    return (codec == 3 and _NATIVE_LZ4) or (codec == 4 and _NATIVE_ZSTD)
