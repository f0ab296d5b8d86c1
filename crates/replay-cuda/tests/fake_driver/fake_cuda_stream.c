/* Fakes streams and events: synchronisation, queries, capture, records and waits. */
#include "fake_cuda_internal.h"

struct stream legacy;
struct stream* streams; /* every created stream (never the legacy one) */
static __thread int thread_mode = MODE_GLOBAL;
int blocking_frees;
char fail_record_after[64];
int fail_record_armed;
static int fail_default_waits;
int fail_host_registers;

/* Null, CU_STREAM_LEGACY (1) and CU_STREAM_PER_THREAD (2) are all the one default stream. */
struct stream* S(void* s) {
    return (uintptr_t)s > 2 ? (struct stream*)s : &legacy;
}

/* cuStreamWaitEvent calls, in order: the waiting stream and the stream the event was recorded
 * on (fake_cuda_stream_waits, fake_cuda_stream_wait_at). */
#define MAX_WAITS 4096
static struct {
    void* stream;
    void* event_stream;
} waits[MAX_WAITS];
static int nwaits;

/* Called with `lock` held: invalidates every capture a prohibited call by this thread would
 * break, and says whether the call is prohibited. */
int prohibited_locked(void) {
    if (thread_mode == MODE_RELAXED) {
        return 0;
    }
    int hit = 0;
    pthread_t self = pthread_self();
    for (struct stream* st = streams; st; st = st->next_stream) {
        if (st->capture != CAP_ACTIVE) {
            continue;
        }
        int own = pthread_equal(st->owner, self);
        if ((own && st->capture_mode != MODE_RELAXED)
            || (!own && thread_mode == MODE_GLOBAL && st->capture_mode == MODE_GLOBAL)) {
            st->capture = CAP_INVALIDATED;
            hit = 1;
        }
    }
    return hit;
}

void wait_until(u64 t) {
    while (now_ns() < t) {
        struct timespec ts = {0, 100000};
        nanosleep(&ts, NULL);
    }
}

CUresult cuCtxSynchronize(void) {
    CUresult r = unsafe_call();
    if (r != OK) {
        return r;
    }
    wait_until(device_busy_until());
    return OK;
}

CUresult cuStreamSynchronize(void* s) {
    CUresult r = unsafe_call();
    if (r != OK) {
        return r;
    }
    wait_until(S(s)->busy_until);
    return OK;
}

CUresult cuStreamQuery(void* s) {
    CUresult r = unsafe_call();
    if (r != OK) {
        return r;
    }
    struct stream* st = S(s);
    r = submit_to(st);
    if (r == CAPTURED) {
        pthread_mutex_lock(&lock);
        st->capture = CAP_INVALIDATED;
        pthread_mutex_unlock(&lock);
        return E_CAPTURE_UNSUPPORTED;
    }
    if (r != OK) {
        return r;
    }
    return now_ns() >= st->busy_until ? OK : E_NOT_READY;
}

CUresult cuThreadExchangeStreamCaptureMode(int* mode) {
    int m = *mode;
    *mode = thread_mode;
    thread_mode = m;
    return OK;
}

CUresult cuStreamBeginCapture_v2(void* s, int mode) {
    if (!s) {
        return E_CAPTURE_UNSUPPORTED;
    }
    struct stream* st = s;
    pthread_mutex_lock(&lock);
    if (st->capture != CAP_NONE) {
        pthread_mutex_unlock(&lock);
        return E_INVALID_VALUE;
    }
    st->capture = CAP_ACTIVE;
    st->capture_mode = mode;
    st->owner = pthread_self();
    st->graph = calloc(1, sizeof(struct graph));
    pthread_mutex_unlock(&lock);
    return OK;
}

CUresult cuStreamEndCapture(void* s, void** graph) {
    struct stream* st = S(s);
    pthread_mutex_lock(&lock);
    int c = st->capture;
    struct graph* g = st->graph;
    st->capture = CAP_NONE;
    st->graph = NULL;
    pthread_mutex_unlock(&lock);
    if (c == CAP_NONE) {
        return E_CAPTURE_UNMATCHED;
    }
    if (c == CAP_INVALIDATED) {
        free(g);
        *graph = NULL;
        return E_CAPTURE_INVALIDATED;
    }
    *graph = g;
    return OK;
}

CUresult cuStreamIsCapturing(void* s, int* status) {
    pthread_mutex_lock(&lock);
    CUresult r = OK;
    *status = CAP_NONE;
    if ((uintptr_t)s <= 2) {
        for (struct stream* o = streams; o; o = o->next_stream) {
            if (o->capture != CAP_NONE && !o->nonblocking) {
                r = E_CAPTURE_IMPLICIT;
            }
        }
    } else {
        *status = ((struct stream*)s)->capture;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

int fake_cuda_blocking_frees(void) {
    pthread_mutex_lock(&lock);
    int n = blocking_frees;
    pthread_mutex_unlock(&lock);
    return n;
}

void fake_cuda_fail_record_after(const char* kernel) {
    pthread_mutex_lock(&lock);
    snprintf(fail_record_after, sizeof fail_record_after, "%s", kernel);
    fail_record_armed = 0;
    pthread_mutex_unlock(&lock);
}

CUresult cuStreamCreate(void** s, unsigned flags) {
    struct stream* st = calloc(1, sizeof *st);
    st->nonblocking = (flags & 1) != 0;
    pthread_mutex_lock(&lock);
    st->next_stream = streams;
    streams = st;
    pthread_mutex_unlock(&lock);
    *s = st;
    return OK;
}

CUresult cuStreamDestroy_v2(void* s) {
    if (s) {
        pthread_mutex_lock(&lock);
        for (struct stream** pp = &streams; *pp; pp = &(*pp)->next_stream) {
            if (*pp == s) {
                *pp = ((struct stream*)s)->next_stream;
                break;
            }
        }
        pthread_mutex_unlock(&lock);
        free(((struct stream*)s)->graph);
        free(s);
    }
    return OK;
}

CUresult cuEventCreate(void** e, unsigned flags) {
    (void)flags;
    *e = calloc(1, sizeof(struct event));
    return OK;
}

CUresult cuEventRecord(void* e, void* s) {
    struct event* ev = e;
    pthread_mutex_lock(&lock);
    int fail = fail_record_armed;
    fail_record_armed = 0;
    pthread_mutex_unlock(&lock);
    if (fail) {
        return E_UNKNOWN;
    }
    struct stream* st = S(s);
    CUresult r = submit_to(st);
    if (r == CAPTURED) {
        ev->captured = st;
        ev->recorded = 1;
        return OK;
    }
    if (r != OK) {
        return r;
    }
    u64 t = now_ns();
    u64 b = st->busy_until;
    ev->at = b > t ? b : t;
    ev->recorded = 1;
    ev->captured = NULL;
    ev->on = st;
    __atomic_add_fetch(&st->records, 1, __ATOMIC_SEQ_CST);
    return OK;
}

/* How many events were recorded on stream `s` (null or a special handle: the default one). */
int fake_cuda_records_on(void* s) {
    return __atomic_load_n(&S(s)->records, __ATOMIC_SEQ_CST);
}

/* Work submitted to `s` later runs after the event's work: the stream is busy until then. */
CUresult cuStreamWaitEvent(void* s, void* e, unsigned flags) {
    (void)flags;
    struct event* ev = e;
    struct stream* st = S(s);
    CUresult sticky = sticky_now();
    if (sticky != OK) {
        return sticky;
    }
    pthread_mutex_lock(&lock);
    if (st == &legacy && fail_default_waits > 0) {
        fail_default_waits--;
        pthread_mutex_unlock(&lock);
        return E_INVALID_VALUE;
    }
    if (ev->at > st->busy_until) {
        st->busy_until = ev->at;
    }
    if (nwaits < MAX_WAITS) {
        waits[nwaits].stream = s;
        waits[nwaits].event_stream = ev->on;
        nwaits++;
    }
    pthread_mutex_unlock(&lock);
    return OK;
}

/* The next n cuStreamWaitEvent calls on the default stream fail; returns how many of the
 * failures armed before were left unused. */
int fake_cuda_fail_default_waits(int n) {
    pthread_mutex_lock(&lock);
    int left = fail_default_waits;
    fail_default_waits = n;
    pthread_mutex_unlock(&lock);
    return left;
}

/* The next n cuMemHostRegister calls fail; returns how many armed before were left unused. */
int fake_cuda_fail_host_registers(int n) {
    pthread_mutex_lock(&lock);
    int left = fail_host_registers;
    fail_host_registers = n;
    pthread_mutex_unlock(&lock);
    return left;
}

int fake_cuda_stream_waits(void) {
    pthread_mutex_lock(&lock);
    int n = nwaits;
    pthread_mutex_unlock(&lock);
    return n;
}

/* The i-th cuStreamWaitEvent: the waiting stream and the event's stream; 0 if out of range. */
int fake_cuda_stream_wait_at(int i, void** stream, void** event_stream) {
    pthread_mutex_lock(&lock);
    int ok = i >= 0 && i < nwaits;
    if (ok) {
        *stream = waits[i].stream;
        *event_stream = waits[i].event_stream;
    }
    pthread_mutex_unlock(&lock);
    return ok;
}

CUresult cuEventQuery(void* e) {
    struct event* ev = e;
    if (ev->captured) {
        /* An event recorded into a capture cannot be queried: the capture is invalidated. */
        pthread_mutex_lock(&lock);
        for (struct stream* st = streams; st; st = st->next_stream) {
            if (st == ev->captured && st->capture == CAP_ACTIVE) {
                st->capture = CAP_INVALIDATED;
            }
        }
        pthread_mutex_unlock(&lock);
        fprintf(stderr, "fake_cuda: query of an event recorded in a stream capture\n");
        return E_CAPTURE_UNSUPPORTED;
    }
    CUresult r = unsafe_call();
    if (r != OK) {
        return r;
    }
    return now_ns() >= ev->at ? OK : E_NOT_READY;
}

CUresult cuEventElapsedTime_v2(float* ms, void* a, void* b) {
    struct event* x = a;
    struct event* y = b;
    *ms = (float)((double)(y->at - x->at) / 1e6);
    return OK;
}

CUresult cuEventDestroy_v2(void* e) {
    free(e);
    return OK;
}
