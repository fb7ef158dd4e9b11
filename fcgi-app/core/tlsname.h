/* tlsname.h - the name a TLS client checks the API server's certificate
 * against, set by labvm rather than by libwebsockets.
 *
 * libwebsockets 4.1.6 (lib/tls/openssl/openssl-client.c,
 * lws_ssl_client_bio_create) cuts the host it verifies at its first ':' to
 * drop a port, so an IPv6 literal in kube_api ("fd00::1") is checked as
 * "fd00" (refused) and "::1" as "" (no name checked at all: any certificate
 * of the CA passes). tlsname_pin() makes every verification on the SSL_CTX
 * check host itself: its IP address (IP SAN) when it is an IPv4 or IPv6
 * literal, else its DNS name, after the usual chain checks. Verification is
 * never turned off. */
#ifndef LABVM_CORE_TLSNAME_H
#define LABVM_CORE_TLSNAME_H

#include <openssl/ssl.h>

/* host (no brackets, no port) must outlive ctx. 0 ok, -1 failure. */
int tlsname_pin(SSL_CTX *ctx, const char *host);

#endif
