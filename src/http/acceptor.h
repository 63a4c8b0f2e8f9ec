/* The acceptor's part in libmicrohttpd (conns.c), for server.c: with conns.c,
 * the only files that include <microhttpd.h>. */
#ifndef ES_HTTP_ACCEPTOR_H
#define ES_HTTP_ACCEPTOR_H

#include <microhttpd.h>

#include "http/transport.h"

/* Accept on listen_fd (taken over: closed by es_conns_stop_accepting) and hand
 * admitted sockets to daemon, which must run with MHD_USE_NO_LISTEN_SOCKET and
 * es_conns_notify as its MHD_OPTION_NOTIFY_CONNECTION. ES_E_IO naming
 * "listen" if the acceptor thread cannot start. */
int es_conns_run(es_conns *c, int listen_fd, struct MHD_Daemon *daemon, es_err *err);
/* MHD_OPTION_NOTIFY_CONNECTION callback (cls = the es_conns): creates the
 * es_conn of a started connection, releases its slot when it closes. */
void es_conns_notify(void *cls, struct MHD_Connection *connection, void **socket_context,
                     enum MHD_ConnectionNotificationCode code);

#endif
