/* Shared mode's check after a crash, through the C API: a writer child
 * (made with fork()) sends ten records in shared mode and is killed with
 * SIGKILL; one byte of its last record is flipped in the segment file; the
 * next process to open the directory alone checks every partition, cuts the
 * damaged batch and says so in mql_partition_recovery, and every record
 * before it reads back. */
#define _GNU_SOURCE
#include <signal.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include "check.h"

#define RECORDS 10

static void writer(const char *path, int ready) {
    mql_broker *mq = open_shared(path);
    make_topic(mq, "t", 1);
    mql_producer *p;
    CHECK_OK(mql_producer_new(mq, NULL, &p));
    for (int i = 0; i < RECORDS; i++) {
        char v[16];
        snprintf(v, sizeof v, "v-%05d", i);
        CHECK(send_to(p, "t", 0, v) == (uint64_t)i);
    }
    CHECK_OK(mql_flush(mq));
    CHECK(write(ready, "R", 1) == 1);
    for (;;) pause();
}

/* Flips a byte in the middle of `value` in the partition's first segment. */
static void flip_in_value(const char *path, const char *value) {
    char log[4096];
    join_path(log, sizeof log, path, "topics/t/0/00000000000000000000.log");
    FILE *f = fopen(log, "r+b");
    CHECK(f != NULL);
    CHECK(fseek(f, 0, SEEK_END) == 0);
    long len = ftell(f);
    CHECK(len > 0);
    char *buf = malloc((size_t)len);
    CHECK(buf != NULL);
    rewind(f);
    CHECK(fread(buf, 1, (size_t)len, f) == (size_t)len);
    char *at = memmem(buf, (size_t)len, value, strlen(value));
    CHECK(at != NULL);
    long pos = (long)(at - buf) + (long)strlen(value) / 2;
    char flipped = (char)(buf[pos] ^ 0x20);
    CHECK(fseek(f, pos, SEEK_SET) == 0);
    CHECK(fwrite(&flipped, 1, 1, f) == 1);
    CHECK(fclose(f) == 0);
    free(buf);
}

int main(int argc, char **argv) {
    const char *dir = scratch_dir(argc, argv);
    char path[4096];
    join_path(path, sizeof path, dir, "data");
    int fds[2];
    CHECK(pipe(fds) == 0);
    pid_t pid = fork();
    CHECK(pid >= 0);
    if (pid == 0) {
        close(fds[0]);
        writer(path, fds[1]);
    }
    close(fds[1]);
    char c;
    CHECK(read(fds[0], &c, 1) == 1);
    CHECK(kill(pid, SIGKILL) == 0);
    int status;
    CHECK(waitpid(pid, &status, 0) == pid && WIFSIGNALED(status));
    close(fds[0]);

    flip_in_value(path, "v-00009");
    mql_broker *mq = open_shared(path);
    CHECK(end_of(mq, "t", 0) == RECORDS - 1);
    mql_recovery_stats r;
    CHECK_OK(mql_partition_recovery(mq, "t", 0, &r));
    CHECK(r.dropped_batches == 1 && r.truncated_bytes > 0);
    for (int i = 0; i < RECORDS - 1; i++) {
        char v[16];
        snprintf(v, sizeof v, "v-%05d", i);
        CHECK(value_at(mq, "t", 0, (uint64_t)i, v));
    }
    CHECK_OK(mql_close(mq));
    return 0;
}
