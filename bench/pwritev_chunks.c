/* How the kernel takes 256 MiB of 1 MiB records written at unaligned file
 * offsets: one write(2) per record at aligned offsets (the sizes bench's
 * baseline), or pwritev of each record in chunks of CHUNK bytes into a
 * file grown with posix_fallocate and mapped MAP_SHARED (as a segment).
 *
 *   cc -O2 -o /tmp/pwritev_chunks bench/pwritev_chunks.c
 *   for i in 1 2 3 4 5; do for c in 0 131072 1048576; do /tmp/pwritev_chunks $c; done; done
 *
 * CHUNK 0 is write(2). Prints MB/s; run interleaved, compare medians. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    size_t chunk = argc > 1 ? strtoul(argv[1], NULL, 10) : 0;
    const size_t rec = 1 << 20, records = 256, framing = 73;
    char *value = malloc(rec);
    for (size_t i = 0; i < rec; i++) value[i] = (char)(i * 31 + 7);
    char path[64];
    snprintf(path, sizeof path, "/tmp/pwritev-chunks-%d", (int)getpid());
    int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
    if (fd < 0) return perror("open"), 1;
    if (chunk && mmap(NULL, (size_t)300 << 20, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) == MAP_FAILED)
        return perror("mmap"), 1;
    double t = now();
    off_t pos = framing, allocated = 0;
    for (size_t r = 0; r < records; r++) {
        if (!chunk) {
            if (write(fd, value, rec) != (ssize_t)rec) return perror("write"), 1;
            continue;
        }
        while (pos + (off_t)rec > allocated) {
            allocated = allocated ? allocated * 2 : 2 << 20;
            if (posix_fallocate(fd, 0, allocated)) return perror("fallocate"), 1;
        }
        for (size_t c = 0; c < rec; c += chunk) {
            struct iovec io = {value + c, chunk < rec - c ? chunk : rec - c};
            if (pwritev(fd, &io, 1, pos + (off_t)c) != (ssize_t)io.iov_len) return perror("pwritev"), 1;
        }
        pos += rec + framing;
    }
    double secs = now() - t;
    printf("chunk %zu: %.0f MB/s\n", chunk, records * rec / secs / 1e6);
    unlink(path);
    return 0;
}
