/* The error text is per thread: two threads fail differently at the same
 * time, and each reads back its own error; the main thread sees none. */
#define _POSIX_C_SOURCE 200809L
#include <pthread.h>

#include "check.h"

static mql_broker *mq;
static pthread_barrier_t failed, checked;

struct job {
    const char *topic;      /* what the thread creates or deletes */
    int create;             /* create (bad name) or delete (unknown topic) */
    mql_status want;
    const char *want_text;
    int ok;
};

static void *run(void *arg) {
    struct job *j = arg;
    CHECK(mql_last_error_code() == MQL_OK);
    CHECK(strcmp(mql_last_error(), "") == 0);
    mql_status st = j->create ? mql_topic_create(mq, j->topic, NULL) : mql_topic_delete(mq, j->topic);
    CHECK(st == j->want);
    /* Both threads have failed before either reads its error. */
    pthread_barrier_wait(&failed);
    const char *text = mql_last_error();
    CHECK(mql_last_error_code() == j->want);
    CHECK(strstr(text, j->want_text) != NULL);
    /* Successes on this thread do not disturb it. */
    uint32_t n;
    CHECK_OK(mql_topic_partition_count(mq, "exists", &n));
    CHECK(mql_last_error() == text);
    CHECK(strstr(mql_last_error(), j->want_text) != NULL);
    pthread_barrier_wait(&checked);
    /* A new failure replaces it. */
    CHECK(mql_topic_create(mq, "exists", NULL) == MQL_TOPIC_EXISTS);
    CHECK(mql_last_error_code() == MQL_TOPIC_EXISTS);
    CHECK(strstr(mql_last_error(), "already exists") != NULL);
    j->ok = 1;
    return NULL;
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    CHECK_OK(mql_open(dir, NULL, &mq));
    CHECK_OK(mql_topic_create(mq, "exists", NULL));

    struct job a = {"bad name!", 1, MQL_INVALID_TOPIC_NAME, "invalid topic name \"bad name!\"", 0};
    struct job b = {"missing-topic", 0, MQL_UNKNOWN_TOPIC, "unknown topic \"missing-topic\"", 0};
    CHECK(pthread_barrier_init(&failed, NULL, 2) == 0);
    CHECK(pthread_barrier_init(&checked, NULL, 2) == 0);
    pthread_t ta, tb;
    CHECK(pthread_create(&ta, NULL, run, &a) == 0);
    CHECK(pthread_create(&tb, NULL, run, &b) == 0);
    CHECK(pthread_join(ta, NULL) == 0);
    CHECK(pthread_join(tb, NULL) == 0);
    CHECK(a.ok && b.ok);
    pthread_barrier_destroy(&failed);
    pthread_barrier_destroy(&checked);

    /* The main thread never failed. */
    CHECK(mql_last_error_code() == MQL_OK);
    CHECK(strcmp(mql_last_error(), "") == 0);
    CHECK_OK(mql_close(mq));
    puts("thread_errors: ok");
    return 0;
}
