/* Shared mode (mql_config_set_shared, mql_config_set_mode, mql_mode,
 * mql_config_set_readonly) across
 * processes made with fork(). The parent opens the data directory shared,
 * creates a topic and writes to it with a producer; the
 * children each open the directory with a handle of their own and:
 *
 *   reader     consumes every record (half written before it starts, half
 *              while it polls) and checks each one's partition, offset,
 *              key and value;
 *   writer     writes beside the parent: creates a topic of its own (a
 *              second creation gets MQL_TOPIC_EXISTS) and writes to it;
 *   readonly   opens read-only: a producer and a topic creation fail with
 *              MQL_READ_ONLY, reading works;
 *   exclusive  opens in exclusive mode (the default) while the parent's
 *              shared handle is open: MQL_LOCKED;
 *   late       is forked while the parent's handle is open (the others are
 *              forked before the parent opens anything) and opens and reads
 *              the directory with its own handle.
 *
 * Each child reports by its exit status (the late one through its pipe, see
 * there); the parent waits for every one. */
#define _POSIX_C_SOURCE 200809L
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>
#include <time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define PARTITIONS 2
/* Records written before the reader starts, and as many while it polls. */
#define HALF 100
#define TOTAL (2 * HALF)

/* What a child does once the parent lets it go. */
typedef void (*child_fn)(const char *path, pid_t parent);

/* A child process waiting for a byte on `go` before it runs. */
typedef struct {
    pid_t pid;
    int go;    /* parent's end: write one byte to start the child */
    int ready; /* parent's end: the child writes one byte when told to */
} child;

/* The key and value of record `i`. */
static void record_text(int i, char *key, size_t key_size, char *value, size_t value_size) {
    snprintf(key, key_size, "k-%d", i);
    snprintf(value, value_size, "v-%d-shared", i);
}

static mql_broker *open_mode(const char *path, bool shared, bool readonly) {
    mql_config *cfg;
    CHECK_OK(mql_config_new(&cfg));
    CHECK_OK(mql_config_set_prefault(cfg, false));
    CHECK_OK(mql_config_set_retention_check_interval_ms(cfg, 0));
    CHECK_OK(mql_config_set_shared(cfg, shared));
    CHECK_OK(mql_config_set_readonly(cfg, readonly));
    mql_broker *mq = NULL;
    CHECK_OK(mql_open(path, cfg, &mq));
    mql_config_free(cfg);
    return mq;
}

static void write_byte(int fd) {
    char b = 1;
    CHECK(write(fd, &b, 1) == 1);
}

static void read_byte(int fd) {
    char b;
    CHECK(read(fd, &b, 1) == 1);
}

/* The write end of the child's `ready` pipe (the reader signals on it). */
static int ready_fd = -1;

/* Forks a child that waits for the parent's go, runs `fn` and exits 0 (a
 * failed check exits 1 before). */
static child spawn(child_fn fn, const char *path) {
    int go[2], ready[2];
    CHECK(pipe(go) == 0 && pipe(ready) == 0);
    pid_t parent = getpid();
    fflush(NULL);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(go[1]);
        close(ready[0]);
        ready_fd = ready[1];
        read_byte(go[0]);
        close(go[0]);
        fn(path, parent);
        close(ready[1]);
        exit(0);
    }
    close(go[0]);
    close(ready[1]);
    child c = {pid, go[1], ready[0]};
    return c;
}

/* Waits for the child and checks that it exited with status 0. */
static void reap(child *c, const char *what) {
    int status = 0;
    CHECK(waitpid(c->pid, &status, 0) == c->pid);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
        FAIL_AT("the %s child failed (wait status %#x)", what, status);
    close(c->go);
    close(c->ready);
}

/* Reads from `c` until `want` records arrived, checking each against the
 * records the parent writes: offsets dense per partition, keys and values
 * as written, nothing twice. */
static void consume(mql_consumer *c, int want, int *seen, uint64_t *next) {
    int got = 0;
    int empty_polls = 0;
    while (got < want) {
        mql_message *m = NULL;
        mql_status st = mql_poll(c, 1000, &m);
        if (st == MQL_TIMEOUT) {
            if (++empty_polls > 30) FAIL_AT("no record for 30 s after %d of %d", got, want);
            continue;
        }
        CHECK_OK(st);
        uint32_t p = mql_message_partition(m);
        CHECK(p < PARTITIONS);
        CHECK(mql_message_offset(m) == next[p]);
        next[p]++;
        size_t key_len = 0;
        const char *key = mql_message_key(m, &key_len);
        CHECK(key != NULL && key_len > 2 && key_len < 16 && memcmp(key, "k-", 2) == 0);
        char digits[16];
        memcpy(digits, key + 2, key_len - 2);
        digits[key_len - 2] = '\0';
        int i = atoi(digits);
        CHECK(i >= 0 && i < TOTAL && !seen[i]);
        seen[i] = 1;
        char k[32], v[32];
        record_text(i, k, sizeof k, v, sizeof v);
        CHECK(key_is(m, k) && value_is(m, v));
        mql_message_free(m);
        got++;
    }
}

static void reader(const char *path, pid_t parent) {
    (void)parent;
    mql_broker *mq = open_mode(path, true, false);
    uint32_t n = 0;
    CHECK_OK(mql_topic_partition_count(mq, "t", &n));
    CHECK(n == PARTITIONS);
    mql_consumer *c;
    CHECK_OK(mql_consumer_new(mq, NULL, NULL, &c));
    for (uint32_t p = 0; p < PARTITIONS; p++) {
        CHECK_OK(mql_assign(c, "t", p));
        CHECK_OK(mql_seek_to_beginning(c, "t", p));
    }
    int seen[TOTAL] = {0};
    uint64_t next[PARTITIONS] = {0};
    consume(c, HALF, seen, next);
    /* Now parked in mql_poll while the parent writes the second half. */
    write_byte(ready_fd);
    consume(c, HALF, seen, next);
    for (int i = 0; i < TOTAL; i++) CHECK(seen[i]);
    mql_message *m = NULL;
    CHECK_STATUS(mql_poll(c, 50, &m), MQL_TIMEOUT);
    mql_consumer_free(c);
    CHECK_OK(mql_close(mq));
}

static void second_writer(const char *path, pid_t parent) {
    (void)parent;
    mql_broker *mq = open_mode(path, true, false);
    /* Another process writes too, beside the parent: a topic of its own
     * and a record in it. */
    make_topic(mq, "other", 1);
    CHECK_FAIL(mql_topic_create(mq, "other", NULL), MQL_TOPIC_EXISTS, "other");
    fill(mq, "other", 1, 1);
    CHECK(end_of(mq, "other", 0) == 1);
    CHECK(end_of(mq, "t", 0) + end_of(mq, "t", 1) >= HALF);
    CHECK_OK(mql_close(mq));
}

static void read_only(const char *path, pid_t parent) {
    (void)parent;
    mql_broker *mq = open_mode(path, false, true);
    mql_producer *p = NULL;
    CHECK_FAIL(mql_producer_new(mq, NULL, &p), MQL_READ_ONLY, "read-only");
    CHECK(p == NULL);
    CHECK_FAIL(mql_topic_create(mq, "other", NULL), MQL_READ_ONLY, "read-only");
    uint32_t n = 0;
    CHECK_STATUS(mql_topic_partition_count(mq, "other", &n), MQL_UNKNOWN_TOPIC);
    /* Record 0 went to one of the partitions: the first record of each is
     * readable, and one of them is record 0. */
    int found = 0;
    for (uint32_t part = 0; part < PARTITIONS; part++) {
        if (end_of(mq, "t", part) == 0) continue;
        found += value_at(mq, "t", part, 0, "v-0-shared");
    }
    CHECK(found == 1);
    CHECK_OK(mql_close(mq));
}

static void exclusive(const char *path, pid_t parent) {
    (void)parent;
    mql_config *cfg;
    CHECK_OK(mql_config_new(&cfg));
    CHECK_OK(mql_config_set_mode(cfg, "exclusive"));
    mql_broker *mq = NULL;
    CHECK_FAIL(mql_open(path, cfg, &mq), MQL_LOCKED, "");
    CHECK(mq == NULL);
    mql_config_free(cfg);
}

static void late(const char *path, pid_t parent) {
    (void)parent;
    mql_broker *mq = open_mode(path, true, false);
    uint32_t n = 0;
    CHECK_OK(mql_topic_partition_count(mq, "t", &n));
    CHECK(n == PARTITIONS);
    CHECK(end_of(mq, "t", 0) + end_of(mq, "t", 1) == TOTAL);
    CHECK_OK(mql_close(mq));
    /* The parent's engine was copied into this process without its threads:
     * what they allocated is unreachable here, and the leak checks at exit
     * (LeakSanitizer's, valgrind's) would report it. So the child says it
     * passed through its pipe and ends by SIGKILL, which no check follows. */
    write_byte(ready_fd);
    fflush(NULL);
    raise(SIGKILL);
}

static void send_range(mql_producer *p, int from, int to) {
    for (int i = from; i < to; i++) {
        char k[32], v[32];
        record_text(i, k, sizeof k, v, sizeof v);
        CHECK_OK(mql_send(p, "t", k, strlen(k), v, strlen(v), NULL));
    }
    CHECK_OK(mql_producer_flush(p));
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    char path[4096];
    join_path(path, sizeof path, dir, "data");

    /* Forked before the parent opens anything: nothing of the parent's
     * engine is copied into them. */
    child rd = spawn(reader, path);
    child wr = spawn(second_writer, path);
    child ro = spawn(read_only, path);
    child ex = spawn(exclusive, path);

    mql_broker *mq = open_mode(path, true, false);
    make_topic(mq, "t", PARTITIONS);
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, NULL, &p));
    send_range(p, 0, HALF);

    /* The same process cannot open the directory exclusively either. */
    mql_config *cfg;
    CHECK_OK(mql_config_new(&cfg));
    CHECK_OK(mql_config_set_mode(cfg, "exclusive"));
    mql_broker *other = NULL;
    CHECK_FAIL(mql_open(path, cfg, &other), MQL_LOCKED, "");
    CHECK(other == NULL);

    /* The mode by name: "auto" takes shared mode here (a local filesystem)
     * and shares this process's engine; an unknown name changes nothing. */
    const char *mode = NULL;
    CHECK_OK(mql_mode(mq, &mode));
    CHECK(strcmp(mode, "shared") == 0);
    CHECK_FAIL(mql_config_set_mode(cfg, "both"), MQL_INVALID_ARGUMENT, "mode must be");
    CHECK_FAIL(mql_open(path, cfg, &other), MQL_LOCKED, "");
    CHECK_OK(mql_config_set_mode(cfg, "AUTO"));
    CHECK_OK(mql_open(path, cfg, &other));
    mode = NULL;
    CHECK_OK(mql_mode(other, &mode));
    CHECK(strcmp(mode, "shared") == 0);
    CHECK(end_of(other, "t", 0) + end_of(other, "t", 1) == HALF);
    CHECK_OK(mql_close(other));
    other = NULL;
    CHECK_OK(mql_config_set_mode(cfg, "exclusive"));
    CHECK_FAIL(mql_open(path, cfg, &other), MQL_LOCKED, "");
    CHECK(other == NULL);
    CHECK_FAIL(mql_mode(NULL, &mode), MQL_NULL_ARGUMENT, "");
    CHECK_FAIL(mql_mode(mq, NULL), MQL_NULL_ARGUMENT, "");
    CHECK_FAIL(mql_config_set_mode(cfg, NULL), MQL_NULL_ARGUMENT, "");
    mql_config_free(cfg);

    write_byte(ro.go);
    reap(&ro, "readonly");
    write_byte(ex.go);
    reap(&ex, "exclusive");
    write_byte(wr.go);
    reap(&wr, "second writer");
    CHECK(end_of(mq, "other", 0) == 1);

    /* The reader takes the first half, says so, and polls for the rest. */
    write_byte(rd.go);
    read_byte(rd.ready);
    struct timespec pause = {0, 50 * 1000 * 1000};
    nanosleep(&pause, NULL);
    send_range(p, HALF, TOTAL);
    reap(&rd, "reader");

    child lt = spawn(late, path);
    write_byte(lt.go);
    read_byte(lt.ready); /* its checks passed */
    int status = 0;
    CHECK(waitpid(lt.pid, &status, 0) == lt.pid);
    CHECK(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    close(lt.go);
    close(lt.ready);

    mql_producer_free(p);
    CHECK_OK(mql_close(mq));

    /* Every handle closed: the default is exclusive mode, and says so. */
    CHECK_OK(mql_open(path, NULL, &mq));
    mode = NULL;
    CHECK_OK(mql_mode(mq, &mode));
    CHECK(strcmp(mode, "exclusive") == 0);
    CHECK_OK(mql_close(mq));
    return 0;
}
