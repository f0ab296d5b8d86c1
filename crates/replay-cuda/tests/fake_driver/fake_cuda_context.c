/* Fakes contexts: the primary one, the current one, and others made by cuCtxCreate. */
#include "fake_cuda_internal.h"

CUresult cuDevicePrimaryCtxRetain(void** ctx, CUdevice d) {
    (void)d;
    *ctx = &ctx_token;
    return OK;
}

CUresult cuDevicePrimaryCtxRelease_v2(CUdevice d) {
    (void)d;
    return OK;
}

CUresult cuCtxSetCurrent(void* ctx) {
    current_ctx = ctx;
    return OK;
}

CUresult cuCtxGetCurrent(void** ctx) {
    *ctx = current_ctx;
    return OK;
}

/* cuCtxCreate makes a context other than the primary one. cuDevicePrimaryCtxReset counts the
 * resets (fake_cuda_primary_resets). */
static int primary_resets;
static int other_ctx_token;

CUresult cuCtxCreate_v2(void** ctx, unsigned flags, CUdevice d) {
    (void)flags;
    (void)d;
    *ctx = &other_ctx_token;
    current_ctx = *ctx;
    return OK;
}

CUresult cuCtxDestroy_v2(void* ctx) {
    if (ctx == current_ctx) {
        current_ctx = NULL;
    }
    return OK;
}

CUresult cuDevicePrimaryCtxGetState(CUdevice d, unsigned* flags, int* active) {
    (void)d;
    *flags = 0;
    *active = 1;
    return OK;
}

CUresult cuDevicePrimaryCtxReset_v2(CUdevice d) {
    (void)d;
    pthread_mutex_lock(&lock);
    primary_resets += 1;
    pthread_mutex_unlock(&lock);
    return OK;
}

int fake_cuda_primary_resets(void) {
    return primary_resets;
}
