/* tlsname.c - see tlsname.h. */
#include "tlsname.h"

#include <openssl/x509_vfy.h>

/* The chain's verification (SSL_CTX_set_cert_verify_callback: instead of
 * X509_verify_cert, with the SSL's parameters already copied in): the
 * identity the client set up is replaced by host's, then OpenSSL verifies as
 * always (the chain, the dates, the name; the client's verify callback
 * still sees every step). */
static int verify(X509_STORE_CTX *x, void *arg)
{
	const char *host = arg;
	X509_VERIFY_PARAM *p = X509_STORE_CTX_get0_param(x);
	if (!p || !X509_VERIFY_PARAM_set1_host(p, NULL, 0) ||
	    !X509_VERIFY_PARAM_set1_ip(p, NULL, 0))
		return 0;
	if (X509_VERIFY_PARAM_set1_ip_asc(p, host) != 1 &&
	    X509_VERIFY_PARAM_set1_host(p, host, 0) != 1)
		return 0;
	return X509_verify_cert(x);
}

int tlsname_pin(SSL_CTX *ctx, const char *host)
{
	if (!ctx || !host || !*host)
		return -1;
	SSL_CTX_set_cert_verify_callback(ctx, verify, (void *)host);
	return 0;
}
