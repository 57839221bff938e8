/* The Cordon egress CA and the TLS contexts of the intercepting relay (relay-tls.c).
 *
 * $CORDON_EGRESS_CA_DIR (set by the controller; a sandbox cannot reach the proxy's
 * environment) holds ca.key (EC P-256, 0600) and ca.crt, made here the first time, under a
 * lock, in a 0700 directory. Sandboxes trust ca.crt (the controller binds a bundle with it into
 * them); the key never leaves this process. Leaf certificates are minted per SNI name, signed
 * by the CA, with one key made at start, and cached (LEAF_CACHE_MAX, least recently used
 * replaced). Upstream, the real server is verified against the host's CA bundle (loaded now:
 * after seccomp no file can be opened), plus $CORDON_EGRESS_UPSTREAM_CA when set (a test
 * hook, read from the same environment only the controller sets), and its name checked. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509v3.h>

#include "basic/cleanup.h"
#include "net/egress/egress.h"

#define LEAF_CACHE_MAX 256
#define LEAF_DAYS 7
#define CA_DAYS 3650

struct leaf {
	char name[256];
	X509 *crt;
	uint64_t used;
};

struct egress_tls {
	EVP_PKEY *ca_key, *leaf_key;
	X509 *ca;
	SSL_CTX *server, *client;
	struct leaf cache[LEAF_CACHE_MAX];
	uint64_t clock;
};

static int set_serial(X509 *x)
{
	uint8_t b[16];
	if (getrandom(b, sizeof(b), 0) != sizeof(b))
		return -1;
	b[0] &= 0x7f;
	BIGNUM *bn = BN_bin2bn(b, sizeof(b), NULL);
	int ok = bn && BN_to_ASN1_INTEGER(bn, X509_get_serialNumber(x)) != NULL;
	BN_free(bn);
	return ok ? 0 : -1;
}

static int add_ext(X509 *x, X509 *issuer, int nid, const char *value)
{
	X509V3_CTX ctx;
	X509V3_set_ctx(&ctx, issuer, x, NULL, NULL, 0);
	X509_EXTENSION *ext = X509V3_EXT_conf_nid(NULL, &ctx, nid, value);
	int ok = ext && X509_add_ext(x, ext, -1);
	X509_EXTENSION_free(ext);
	return ok ? 0 : -1;
}

/* A certificate for @cn with @key, signed by @issuer_key (itself when @issuer is NULL). */
static X509 *make_cert(const char *cn, EVP_PKEY *key, X509 *issuer, EVP_PKEY *issuer_key, long days,
		       bool ca)
{
	X509 *x = X509_new();
	if (!x || !X509_set_version(x, 2) || set_serial(x) < 0 ||
	    !X509_gmtime_adj(X509_getm_notBefore(x), -3600) ||
	    !X509_gmtime_adj(X509_getm_notAfter(x), days * 86400L) || !X509_set_pubkey(x, key))
		goto fail;
	X509_NAME *n = X509_get_subject_name(x);
	if (!X509_NAME_add_entry_by_txt(n, "CN", MBSTRING_UTF8, (const unsigned char *)cn, -1, -1, 0) ||
	    !X509_set_issuer_name(x, issuer ? X509_get_subject_name(issuer) : n))
		goto fail;
	char san[300];
	snprintf(san, sizeof(san), "DNS:%s", cn);
	if (ca ? add_ext(x, x, NID_basic_constraints, "critical,CA:TRUE,pathlen:0") < 0 ||
			 add_ext(x, x, NID_key_usage, "critical,keyCertSign,cRLSign") < 0 ||
			 add_ext(x, x, NID_subject_key_identifier, "hash") < 0
	       : add_ext(x, issuer, NID_basic_constraints, "critical,CA:FALSE") < 0 ||
			 add_ext(x, issuer, NID_key_usage, "critical,digitalSignature") < 0 ||
			 add_ext(x, issuer, NID_ext_key_usage, "serverAuth") < 0 ||
			 add_ext(x, issuer, NID_subject_alt_name, san) < 0 ||
			 add_ext(x, issuer, NID_authority_key_identifier, "keyid") < 0)
		goto fail;
	if (!X509_sign(x, issuer_key, EVP_sha256()))
		goto fail;
	return x;
fail:
	X509_free(x);
	return NULL;
}

static int write_pem(int dir, const char *name, mode_t mode, int (*fn)(FILE *, void *), void *obj)
{
	char tmp[64];
	snprintf(tmp, sizeof(tmp), ".%s.tmp", name);
	(void)unlinkat(dir, tmp, 0);
	int fd = openat(dir, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, mode);
	FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
	if (!f) {
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	int ok = fn(f, obj) && fflush(f) == 0 && fsync(fileno(f)) == 0;
	fclose(f);
	if (!ok || renameat(dir, tmp, dir, name) < 0)
		return -EIO;
	return 0;
}

static int pem_key(FILE *f, void *k)
{
	return PEM_write_PrivateKey(f, k, NULL, NULL, 0, NULL, NULL);
}

static int pem_crt(FILE *f, void *x)
{
	return PEM_write_X509(f, x);
}

static FILE *open_in(int dir, const char *name)
{
	int fd = openat(dir, name, O_RDONLY | O_CLOEXEC | O_NOFOLLOW);
	FILE *f = fd >= 0 ? fdopen(fd, "r") : NULL;
	if (!f && fd >= 0)
		close(fd);
	return f;
}

/* Loads the CA from @dir, or makes it there: the key first, the certificate last, so that a
 * certificate on disk always has its key. */
static int ca_load_or_make(struct egress_tls *t, const char *path)
{
	(void)mkdir(path, 0700);
	_cleanup_close_ int dir = open(path, O_RDONLY | O_DIRECTORY | O_CLOEXEC | O_NOFOLLOW);
	struct stat st;
	if (dir < 0 || fstat(dir, &st) < 0 || (st.st_mode & 077) || st.st_uid != geteuid()) {
		fprintf(stderr, "cordon-egress: CA directory %s: missing, or open to others\n", path);
		return -EPERM;
	}
	_cleanup_close_ int lock = openat(dir, "lock", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lock < 0 || flock(lock, LOCK_EX) < 0)
		return -errno;
	FILE *kf = open_in(dir, "ca.key"), *cf = kf ? open_in(dir, "ca.crt") : NULL;
	if (cf) {
		t->ca_key = PEM_read_PrivateKey(kf, NULL, NULL, NULL);
		t->ca = PEM_read_X509(cf, NULL, NULL, NULL);
	}
	if (kf)
		fclose(kf);
	if (cf) {
		fclose(cf);
		if (!t->ca_key || !t->ca || !X509_check_private_key(t->ca, t->ca_key)) {
			fprintf(stderr, "cordon-egress: %s/ca.key and ca.crt do not make a CA\n", path);
			return -EINVAL;
		}
		return 0;
	}
	t->ca_key = EVP_EC_gen("P-256");
	t->ca = t->ca_key ? make_cert("Cordon egress CA", t->ca_key, NULL, t->ca_key, CA_DAYS, true) : NULL;
	if (!t->ca || write_pem(dir, "ca.key", 0600, pem_key, t->ca_key) < 0 ||
	    write_pem(dir, "ca.crt", 0644, pem_crt, t->ca) < 0) {
		fprintf(stderr, "cordon-egress: cannot make the CA in %s\n", path);
		return -EIO;
	}
	return 0;
}

/* Offers http/1.1 only: the relay reads HTTP/1.1 requests; a client offering only h2 gets no
 * ALPN and speaks HTTP/1.1 as TLS without ALPN means. */
static int alpn_select(SSL *ssl, const unsigned char **out, unsigned char *outlen, const unsigned char *in,
		       unsigned int inlen, void *arg)
{
	(void)ssl;
	(void)arg;
	for (unsigned i = 0; i < inlen; i += 1u + in[i])
		if (in[i] == 8 && i + 9 <= inlen && memcmp(in + i + 1, "http/1.1", 8) == 0) {
			*out = in + i + 1;
			*outlen = 8;
			return SSL_TLSEXT_ERR_OK;
		}
	return SSL_TLSEXT_ERR_NOACK;
}

static int contexts(struct egress_tls *t)
{
	t->server = SSL_CTX_new(TLS_server_method());
	t->client = SSL_CTX_new(TLS_client_method());
	if (!t->server || !t->client || !SSL_CTX_set_min_proto_version(t->server, TLS1_2_VERSION) ||
	    !SSL_CTX_set_min_proto_version(t->client, TLS1_2_VERSION))
		return -ENOMEM;
	SSL_CTX_set_alpn_select_cb(t->server, alpn_select, NULL);
	SSL_CTX_set_options(t->server, SSL_OP_NO_RENEGOTIATION | SSL_OP_NO_TICKET);
	SSL_CTX_set_options(t->client, SSL_OP_NO_RENEGOTIATION);
	SSL_CTX_set_verify(t->client, SSL_VERIFY_PEER, NULL);
	/* The bundle file only: a hashed directory would be read lazily, after seccomp. */
	const char *env = getenv(X509_get_default_cert_file_env());
	const char *bundle = env ? env : X509_get_default_cert_file();
	const char *extra = getenv("CORDON_EGRESS_UPSTREAM_CA");
	int n = SSL_CTX_load_verify_locations(t->client, bundle, NULL);
	if (extra && !SSL_CTX_load_verify_locations(t->client, extra, NULL)) {
		fprintf(stderr, "cordon-egress: CORDON_EGRESS_UPSTREAM_CA: cannot load %s\n", extra);
		return -EINVAL;
	}
	if (!n && !extra) {
		fprintf(stderr, "cordon-egress: no CA bundle at %s: upstream TLS cannot be verified\n", bundle);
		return -ENOENT;
	}
	ERR_clear_error();
	return 0;
}

int tls_setup(struct egress *e)
{
	const char *dir = getenv("CORDON_EGRESS_CA_DIR");
	if (!dir || !*dir)
		return 0;
	OPENSSL_init_ssl(OPENSSL_INIT_LOAD_CONFIG, NULL);
	/* glibc reads /etc/localtime on the first gmtime_r() too (certificate times): now, while
	 * files may be opened. A CA made here did it; one loaded from disk would not have. */
	tzset();
	time_t now = time(NULL);
	struct tm tm;
	gmtime_r(&now, &tm);
	struct egress_tls *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	int r = ca_load_or_make(t, dir);
	if (r >= 0 && !(t->leaf_key = EVP_EC_gen("P-256")))
		r = -ENOMEM;
	if (r < 0) {
		free(t); /* the process is about to end */
		return r;
	}
	e->tls = t;
	return 0;
}

int tls_contexts(struct egress *e)
{
	return e->tls ? contexts(e->tls) : 0;
}

static X509 *leaf_for(struct egress_tls *t, const char *name)
{
	struct leaf *victim = &t->cache[0];
	for (size_t i = 0; i < LEAF_CACHE_MAX; i++) {
		struct leaf *l = &t->cache[i];
		if (l->crt && strcmp(l->name, name) == 0) {
			l->used = ++t->clock;
			return l->crt;
		}
		if (l->used < victim->used)
			victim = l;
	}
	X509 *x = make_cert(name, t->leaf_key, t->ca, t->ca_key, LEAF_DAYS, false);
	if (!x)
		return NULL;
	X509_free(victim->crt);
	snprintf(victim->name, sizeof(victim->name), "%s", name);
	victim->crt = x;
	victim->used = ++t->clock;
	return x;
}

SSL *tls_new_server(struct egress_tls *t, const char *name)
{
	X509 *x = leaf_for(t, name);
	SSL *ssl = x ? SSL_new(t->server) : NULL;
	if (ssl && (!SSL_use_certificate(ssl, x) || !SSL_use_PrivateKey(ssl, t->leaf_key))) {
		SSL_free(ssl);
		return NULL;
	}
	return ssl;
}

SSL *tls_new_client(struct egress_tls *t, const char *name)
{
	static const unsigned char alpn[] = "\x08http/1.1";
	SSL *ssl = SSL_new(t->client);
	if (ssl && (!SSL_set_tlsext_host_name(ssl, name) || !SSL_set1_host(ssl, name) ||
		    SSL_set_alpn_protos(ssl, alpn, sizeof(alpn) - 1) != 0)) {
		SSL_free(ssl);
		return NULL;
	}
	return ssl;
}
