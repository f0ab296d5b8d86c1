/*
 * A fake CUPTI (libcupti.so.13) for the launch cross-check's tests: one subscriber at a time,
 * as CUPTI without its multi-subscriber mode (a second cuptiSubscribe answers
 * CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED, 39), cuptiUnsubscribe, cuptiEnableCallback
 * and cuptiGetResultString. fake_cupti_subscribers() says how many are subscribed.
 */
#include <pthread.h>
#include <stddef.h>

static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static int subscribed;
static int token;

int cuptiSubscribe(void** subscriber, void* callback, void* userdata) {
    (void)callback;
    (void)userdata;
    pthread_mutex_lock(&lock);
    if (subscribed) {
        pthread_mutex_unlock(&lock);
        return 39;
    }
    subscribed = 1;
    *subscriber = &token;
    pthread_mutex_unlock(&lock);
    return 0;
}

int cuptiUnsubscribe(void* subscriber) {
    pthread_mutex_lock(&lock);
    int r = (subscribed && subscriber == &token) ? 0 : 1;
    if (r == 0) {
        subscribed = 0;
    }
    pthread_mutex_unlock(&lock);
    return r;
}

int cuptiEnableCallback(unsigned enable, void* subscriber, unsigned domain, unsigned cbid) {
    (void)enable;
    (void)domain;
    (void)cbid;
    return subscriber == &token ? 0 : 1;
}

int cuptiGetResultString(int code, const char** out) {
    *out = code == 39 ? "CUPTI_ERROR_MULTIPLE_SUBSCRIBERS_NOT_SUPPORTED" : "CUPTI_ERROR_UNKNOWN";
    return 0;
}

int fake_cupti_subscribers(void) {
    pthread_mutex_lock(&lock);
    int n = subscribed;
    pthread_mutex_unlock(&lock);
    return n;
}
