/* A bare TCP echo server for bench/client_vs_sockperf.sh: nothing between the
 * socket and the answer.  Listens on 127.0.0.1 (port from argv[1], 0 = any
 * free port), prints "listening PORT" on stdout, then serves each connection
 * on its own thread: a blocking read of whatever has arrived (up to 64 KiB),
 * written back whole, with TCP_NODELAY.  It knows no framing, so it answers
 * our client's -Z 1 and -Z 0 requests alike (with -R equal to -X), as a
 * kernel-level ping-pong partner, the same work sockperf's and netperf's
 * servers do.  Runs until killed.
 *
 *   cc -O2 -pthread -o bare_echo bench/bare_echo.c && ./bare_echo 0
 */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

static void *serve(void *arg) {
    int fd = (int)(long)arg;
    int one = 1;
    static __thread char buf[65536];
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    for (;;) {
        ssize_t n = read(fd, buf, sizeof buf);
        if (n <= 0)
            break;
        for (ssize_t off = 0; off < n;) {
            ssize_t w = write(fd, buf + off, (size_t)(n - off));
            if (w <= 0)
                goto done;
            off += w;
        }
    }
done:
    close(fd);
    return NULL;
}

int main(int argc, char **argv) {
    struct sockaddr_in addr = {0};
    socklen_t len = sizeof addr;
    int one = 1;
    int lfd = socket(AF_INET, SOCK_STREAM, 0);
    signal(SIGPIPE, SIG_IGN);
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = htons((unsigned short)(argc > 1 ? atoi(argv[1]) : 0));
    if (lfd < 0 || setsockopt(lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(lfd, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(lfd, 64) < 0 ||
        getsockname(lfd, (struct sockaddr *)&addr, &len) < 0) {
        perror("bare_echo");
        return 1;
    }
    printf("listening %u\n", ntohs(addr.sin_port));
    fflush(stdout);
    for (;;) {
        pthread_t t;
        int fd = accept(lfd, NULL, NULL);
        if (fd < 0)
            continue;
        if (pthread_create(&t, NULL, serve, (void *)(long)fd) != 0) {
            close(fd);
            continue;
        }
        pthread_detach(t);
    }
}
