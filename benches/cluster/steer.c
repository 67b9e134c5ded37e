/* steer.c: an LD_PRELOAD shim that spreads the load generator's clients over the nodes of
 * a cluster.
 *
 * `ferromq bench` connects every client to one port. With `source_addresses = N` it binds
 * client n to 127.0.0.(1 + n % N) before connecting (subscribers first, then publishers),
 * so the source address says which node the client should reach. This shim wraps libc's
 * connect(): a TCP connect to 127.0.0.1:<first port of FERROMQ_STEER_PORTS> from a socket
 * bound to 127.0.0.k goes to 127.0.0.1:<k-th port of the list> instead; every other
 * connect is passed through untouched. It runs once per connection, never per message.
 *
 *     FERROMQ_STEER_PORTS=21883,21884,21885 LD_PRELOAD=./steer.so python ...
 *
 * Build: cc -shared -fPIC -O2 -o steer.so steer.c -ldl
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#define MAX_NODES 254

typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);

static connect_fn real_connect;
static unsigned short ports[MAX_NODES]; /* host order; ports[0] is the one connected to */
static int nodes;

__attribute__((constructor)) static void steer_init(void) {
    real_connect = (connect_fn)dlsym(RTLD_NEXT, "connect");
    const char *list = getenv("FERROMQ_STEER_PORTS");
    while (list != NULL && *list != '\0' && nodes < MAX_NODES) {
        char *end;
        long port = strtol(list, &end, 10);
        if (end == list || port <= 0 || port > 65535) {
            nodes = 0; /* a malformed list steers nothing */
            return;
        }
        ports[nodes++] = (unsigned short)port;
        list = *end == ',' ? end + 1 : end;
    }
}

int connect(int fd, const struct sockaddr *addr, socklen_t len) {
    if (real_connect == NULL) {
        errno = ENOSYS;
        return -1;
    }
    if (nodes > 0 && addr != NULL && addr->sa_family == AF_INET &&
        len >= (socklen_t)sizeof(struct sockaddr_in)) {
        const struct sockaddr_in *to = (const struct sockaddr_in *)addr;
        struct sockaddr_in local;
        socklen_t local_len = sizeof local;
        if (to->sin_addr.s_addr == htonl(INADDR_LOOPBACK) && ntohs(to->sin_port) == ports[0] &&
            getsockname(fd, (struct sockaddr *)&local, &local_len) == 0 &&
            local.sin_family == AF_INET) {
            unsigned int k = ntohl(local.sin_addr.s_addr) & 0xffu; /* 127.0.0.k */
            if ((ntohl(local.sin_addr.s_addr) >> 24) == 127 && k >= 1 && k <= (unsigned int)nodes) {
                struct sockaddr_in steered = *to;
                steered.sin_port = htons(ports[k - 1]);
                return real_connect(fd, (const struct sockaddr *)&steered, sizeof steered);
            }
        }
    }
    return real_connect(fd, addr, len);
}
