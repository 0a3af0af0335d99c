/* Several writer processes on one shared data directory, through the C
 * API: children made with fork() each open the directory in shared mode
 * (mql_config_set_shared) and send RECORDS records to the one partition of
 * topic "w", their values "w<child>-<i>" for i = 0, 1, 2, ...; released at
 * once once every one holds a producer (each says so with a byte on its
 * `ready` pipe, then waits for a byte on its `go` pipe). The parent then reads the
 * partition with a handle of its own: every record of every child is
 * there once, in the order its child sent them, and the offsets are dense.
 *
 * The scenario runs with one writer child, then with two. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define RECORDS 1000
#define MAX_WRITERS 2

/* Child `id`: takes a producer, writes a byte to `ready`, waits for a byte
 * on `go`, then sends its records one by one, each offset past the one
 * before (other writers' records may come between), and closes. Exits 0,
 * or 1 through a failed check (its `ready` then closes unwritten). */
static void writer(const char *path, int id, int ready, int go) {
    mql_broker *mq = open_shared(path);
    mql_producer *p = NULL;
    CHECK_OK(mql_producer_new(mq, NULL, &p));
    char b = 1;
    CHECK(write(ready, &b, 1) == 1);
    close(ready);
    CHECK(read(go, &b, 1) == 1);
    close(go);
    uint64_t last = 0;
    for (int i = 0; i < RECORDS; i++) {
        char v[32];
        snprintf(v, sizeof v, "w%d-%d", id, i);
        mql_metadata md;
        CHECK_OK(mql_send(p, "w", NULL, 0, v, strlen(v), &md));
        CHECK(md.partition == 0 && !md.duplicate);
        CHECK(i == 0 || md.offset > last);
        last = md.offset;
    }
    CHECK_OK(mql_producer_flush(p));
    mql_producer_free(p);
    CHECK_OK(mql_close(mq));
    exit(0);
}

/* Reads every record of w/0 and checks them against `writers` children's
 * sends. */
static void check_log(const char *path, int writers) {
    mql_broker *mq = open_shared(path);
    uint64_t total = (uint64_t)writers * RECORDS;
    CHECK(end_of(mq, "w", 0) == total);
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, NULL, NULL, &c));
    CHECK_OK(mql_assign(c, "w", 0));
    CHECK_OK(mql_seek_to_beginning(c, "w", 0));
    int next[MAX_WRITERS] = {0};
    for (uint64_t offset = 0; offset < total; offset++) {
        mql_message *m = NULL;
        CHECK_OK(mql_poll(c, 5000, &m));
        CHECK(mql_message_partition(m) == 0);
        if (mql_message_offset(m) != offset)
            FAIL_AT("offset %llu where %llu was due", (unsigned long long)mql_message_offset(m),
                    (unsigned long long)offset);
        size_t len = 0;
        const char *v = mql_message_value(m, &len);
        char text[32];
        CHECK(v != NULL && len > 0 && len < sizeof text);
        memcpy(text, v, len);
        text[len] = '\0';
        int id = -1, i = -1;
        CHECK(sscanf(text, "w%d-%d", &id, &i) == 2);
        CHECK(id >= 0 && id < writers);
        if (i != next[id])
            FAIL_AT("at %llu: %s where w%d-%d was due", (unsigned long long)offset, text, id,
                    next[id]);
        next[id]++;
        mql_message_free(m);
    }
    for (int id = 0; id < writers; id++) CHECK(next[id] == RECORDS);
    mql_message *m = NULL;
    CHECK_STATUS(mql_poll(c, 50, &m), MQL_TIMEOUT);
    mql_consumer_free(c);
    CHECK_OK(mql_close(mq));
}

/* `writers` writer children on the data directory dir/name. */
static void run(const char *dir, const char *name, int writers) {
    char path[4096];
    join_path(path, sizeof path, dir, name);
    /* Forked before the parent opens anything: nothing of the parent's
     * engine is copied into them. */
    mql_broker *mq = open_shared(path);
    make_topic(mq, "w", 1);
    CHECK_OK(mql_close(mq));
    /* The parent's handle is closed before the fork: nothing of its engine
     * is copied into the children. */
    pid_t pids[MAX_WRITERS];
    int go[MAX_WRITERS], ready[MAX_WRITERS];
    for (int id = 0; id < writers; id++) {
        int g[2], r[2];
        CHECK(pipe(g) == 0 && pipe(r) == 0);
        fflush(NULL);
        pid_t pid = fork();
        CHECK(pid >= 0);
        if (pid == 0) {
            for (int j = 0; j < id; j++) {
                close(go[j]);
                close(ready[j]);
            }
            close(g[1]);
            close(r[0]);
            writer(path, id, r[1], g[0]);
        }
        close(g[0]);
        close(r[1]);
        pids[id] = pid;
        go[id] = g[1];
        ready[id] = r[0];
    }
    /* Every child holds a producer (a child that failed closed its pipe
     * unwritten: its exit status says why), then all go at once. */
    for (int id = 0; id < writers; id++) {
        char b;
        if (read(ready[id], &b, 1) != 1) break;
    }
    for (int id = 0; id < writers; id++) {
        char b = 1;
        (void)!write(go[id], &b, 1);
        close(go[id]);
        close(ready[id]);
    }
    for (int id = 0; id < writers; id++) {
        int status = 0;
        CHECK(waitpid(pids[id], &status, 0) == pids[id]);
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
            FAIL_AT("%s: writer %d failed (wait status %#x)", name, id, status);
    }
    check_log(path, writers);
    printf("%s: %d writer process(es), %d records each: all there, in order\n", name, writers,
           RECORDS);
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    /* A go byte to a child that already failed must not end the parent. */
    signal(SIGPIPE, SIG_IGN);
    run(dir, "one", 1);
    run(dir, "two", MAX_WRITERS);
    return 0;
}
