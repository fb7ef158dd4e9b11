/* config.c - the table-driven labvm.conf parser (pgbouncer style). */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <openssl/crypto.h>

#include "log.h"
#include "util.h"

enum cfg_type { CFG_STR, CFG_INT };

struct cfg_key {
	const char *name;
	enum cfg_type type;
	size_t off;
	const char *def;
	int min, max; /* CFG_INT bounds */
};

#define S(name, def)                                                                               \
	{                                                                                          \
#name, CFG_STR, offsetof(struct cfg, name), def, 0, 0                              \
	}
#define I(name, def, min, max)                                                                     \
	{                                                                                          \
#name, CFG_INT, offsetof(struct cfg, name), def, min, max                          \
	}

static const struct cfg_key keys[] = {
    S(environment, "dev"),
    {"namespace", CFG_STR, offsetof(struct cfg, namespace_), "labs", 0, 0},
    S(kube_api, "https://kubernetes.default.svc"),
    S(kube_token_file, "/var/run/secrets/kubernetes.io/serviceaccount/token"),
    S(kube_ca_file, "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"),
    I(kube_timeout_ms, "10000", 100, 600000),
    S(database, "postgresql:///labvm"),
    I(vm_capacity, "8", 0, 100000),
    I(pod_capacity, "32", 0, 100000),
    I(retry_after_s, "30", 1, 3600),
    I(queue_lapse_s, "90", 5, 86400),
    S(lessons_dir, "/etc/labvm/lessons"),
    S(label_prefix, "labvm.io"),
    S(ticket_key_file, "/etc/labvm/ticket.key"),
    I(ticket_ttl_s, "30", 5, 3600),
    I(fcgi_threads, "4", 1, 256),
    S(fcgi_listen, ""),
    I(stream_max, "512", 1, 100000),
    I(stream_max_per_user, "4", 1, 1000),
    I(stream_drivers, "4", 1, 256),
    I(stream_keepalive_s, "15", 1, 3600),
    S(base_path, ""),
    I(agent_port, "8899", 1, 65535),
    I(agent_ready_timeout_ms, "1500", 100, 60000),
    I(agent_run_timeout_s, "30", 1, 300),
    S(console_listen, "127.0.0.1:7682"),
    S(console_path, "/console/"),
    I(console_ping_s, "10", 1, 600),
    I(console_linger_s, "120", 0, 86400),
    I(console_max_per_session, "8", 1, 100000),
    I(orphan_grace_s, "300", 0, 86400),
    I(pool_max_age_s, "86400", 60, 30 * 86400),
    I(pool_yield_wait_s, "10", 0, 120),
    I(pool_yield_hold_s, "60", 0, 3600),
    S(log_level, "info"),
    I(grade_timeout_s, "120", 5, 3600),
    I(start_rate_max, "10", 0, 100000),
    I(start_rate_window_s, "600", 1, 86400),
    I(capacity_lock_timeout_ms, "5000", 100, 600000),
    I(db_idle_tx_timeout_s, "60", 2, 3600),
    S(console_user_from, "forwarded"),
    S(operators, ""),
    S(teachers, ""),
    I(teacher_extend_max_minutes, "60", 1, 24 * 60),
    S(log_format, "text"),
    S(session_network, "same-node"),
    I(idle_minutes, "0", 0, 24 * 60),
    I(idle_warning_s, "60", 1, 3600),
};

#define NKEYS (sizeof keys / sizeof keys[0])

const char *cfg_path(void)
{
	const char *p = getenv("LABVM_CONF");
	return p && *p ? p : CFG_DEFAULT_PATH;
}

static char *trim(char *s)
{
	while (isspace((unsigned char)*s))
		s++;
	util_rstrip(s);
	return s;
}

static int set_value(struct cfg *c, const struct cfg_key *k, const char *v, char *err,
                     size_t errlen)
{
	char *slot = (char *)c + k->off;
	if (k->type == CFG_STR) {
		char **p = (char **)(void *)slot;
		free(*p);
		*p = xstrdup(v);
		return 0;
	}
	char *end;
	errno = 0;
	long n = strtol(v, &end, 10);
	if (errno || end == v || *end || n < k->min || n > k->max) {
		snprintf(err, errlen, "%s: '%s' is not a number in %d..%d", k->name, v, k->min,
		         k->max);
		return -1;
	}
	*(int *)(void *)slot = (int)n;
	return 0;
}

int cfg_min_orphan_grace_machines(const struct cfg *c, long machines)
{
	/* two lock waits and the cluster calls of one start of N machines: a
	 * golden-disk check per machine, two counts, the session network (N > 1),
	 * a Secret, a VM and the Secret's owner per machine (3N), and the look
	 * for a VM whose create got no answer: 4N + 3 (+1), 7 for one machine */
	long n = machines < 1 ? 1 : machines;
	long calls = n + 2 + (n > 1) + 3 * n + 1;
	long long ms = 2LL * c->capacity_lock_timeout_ms + (long long)calls * c->kube_timeout_ms;
	long long s = ms / 1000 + 10;
	return s > 86400 * 30 ? 86400 * 30 : (int)s;
}

int cfg_min_orphan_grace_s(const struct cfg *c)
{
	return cfg_min_orphan_grace_machines(c, 1);
}

static int validate(struct cfg *c, char *err, size_t errlen)
{
	if (!util_label_value_ok(c->environment) || !*c->environment) {
		snprintf(err, errlen, "environment: '%s' is not a valid label value",
		         c->environment);
		return -1;
	}
	if (!util_dns_label_ok(c->namespace_)) {
		snprintf(err, errlen, "namespace: '%s' is not a valid namespace", c->namespace_);
		return -1;
	}
	if (strncmp(c->kube_api, "https://", 8) != 0) {
		snprintf(err, errlen, "kube_api: '%s' must start with https://", c->kube_api);
		return -1;
	}
	size_t n = strlen(c->kube_api);
	while (n > 8 && c->kube_api[n - 1] == '/')
		c->kube_api[--n] = '\0';
	n = strlen(c->base_path);
	while (n && c->base_path[n - 1] == '/')
		c->base_path[--n] = '\0';
	if (!*c->label_prefix || strlen(c->label_prefix) > 200 || strchr(c->label_prefix, '/')) {
		snprintf(err, errlen, "label_prefix: '%s' is not a DNS subdomain", c->label_prefix);
		return -1;
	}
	if (strcmp(c->console_user_from, "forwarded") != 0 &&
	    strcmp(c->console_user_from, "none") != 0) {
		snprintf(err, errlen, "console_user_from: '%s' is not \"forwarded\" or \"none\"",
		         c->console_user_from);
		return -1;
	}
	if (c->db_idle_tx_timeout_s * 1000L < 2L * c->kube_timeout_ms) {
		snprintf(err, errlen,
		         "db_idle_tx_timeout_s: %d s is shorter than two cluster calls "
		         "(kube_timeout_ms %d): a start waiting on the cluster would lose its "
		         "transaction",
		         c->db_idle_tx_timeout_s, c->kube_timeout_ms);
		return -1;
	}
	if (c->orphan_grace_s < cfg_min_orphan_grace_s(c)) {
		snprintf(err, errlen,
		         "orphan_grace_s: %d is shorter than the longest start (%d s with "
		         "kube_timeout_ms %d and capacity_lock_timeout_ms %d): the reaper would "
		         "delete the objects of a start in flight",
		         c->orphan_grace_s, cfg_min_orphan_grace_s(c), c->kube_timeout_ms,
		         c->capacity_lock_timeout_ms);
		return -1;
	}
	if (strcmp(c->session_network, "same-node") != 0 &&
	    strcmp(c->session_network, "ovn-layer2") != 0) {
		snprintf(err, errlen,
		         "session_network: '%s' is not \"same-node\" or \"ovn-layer2\"",
		         c->session_network);
		return -1;
	}
	c->session_net_ovn = strcmp(c->session_network, "ovn-layer2") == 0;
	if (c->idle_minutes && c->idle_minutes * 60L <= c->idle_warning_s) {
		snprintf(err, errlen,
		         "idle_minutes: %d min is not longer than idle_warning_s (%d s): the "
		         "warning would come before anyone could be idle",
		         c->idle_minutes, c->idle_warning_s);
		return -1;
	}
	enum log_level lv;
	if (log_level_parse(c->log_level, &lv) < 0) {
		snprintf(err, errlen, "log_level: '%s' is not one of err, warn, info, debug",
		         c->log_level);
		return -1;
	}
	log_set_level(lv);
	if (log_set_format(c->log_format) < 0) {
		snprintf(err, errlen, "log_format: '%s' is not one of text, json", c->log_format);
		return -1;
	}
	return 0;
}

static int load_ticket_key(struct cfg *c, char *err, size_t errlen)
{
	size_t len;
	char *k = util_read_file(c->ticket_key_file, 4096, &len);
	if (!k) {
		snprintf(err, errlen, "ticket_key_file %s: %s", c->ticket_key_file,
		         strerror(errno));
		return -1;
	}
	util_rstrip(k);
	len = strlen(k);
	if (len < 32) {
		free(k);
		snprintf(err, errlen, "ticket_key_file %s: key shorter than 32 bytes",
		         c->ticket_key_file);
		return -1;
	}
	c->ticket_key = (unsigned char *)k;
	c->ticket_key_len = len;
	return 0;
}

static int load(const char *path, struct cfg *c, unsigned needs, char *err, size_t errlen)
{
	FILE *f;
	char line[4096];
	int lineno = 0;

	memset(c, 0, sizeof *c);
	for (size_t i = 0; i < NKEYS; i++)
		if (set_value(c, &keys[i], keys[i].def, err, errlen) < 0)
			return -1;
	f = fopen(path, "re");
	if (!f) {
		snprintf(err, errlen, "%s: %s", path, strerror(errno));
		return -1;
	}
	while (fgets(line, sizeof line, f)) {
		lineno++;
		char *s = trim(line);
		if (!*s || *s == '#')
			continue;
		char *eq = strchr(s, '=');
		if (!eq) {
			snprintf(err, errlen, "%s:%d: expected key = value", path, lineno);
			fclose(f);
			return -1;
		}
		*eq = '\0';
		char *k = trim(s), *v = trim(eq + 1);
		size_t i;
		for (i = 0; i < NKEYS; i++)
			if (strcmp(keys[i].name, k) == 0)
				break;
		if (i == NKEYS) {
			snprintf(err, errlen, "%s:%d: unknown key '%s'", path, lineno, k);
			fclose(f);
			return -1;
		}
		char sub[256];
		if (set_value(c, &keys[i], v, sub, sizeof sub) < 0) {
			snprintf(err, errlen, "%s:%d: %s", path, lineno, sub);
			fclose(f);
			return -1;
		}
	}
	fclose(f);
	if (validate(c, err, errlen) < 0)
		return -1;
	if ((needs & CFG_NEED_TICKET_KEY) && load_ticket_key(c, err, errlen) < 0)
		return -1;
	c->label.lab_session = xasprintf("%s/lab-session", c->label_prefix);
	c->label.session_id = xasprintf("%s/session-id", c->label_prefix);
	c->label.environment = xasprintf("%s/environment", c->label_prefix);
	c->label.lesson = xasprintf("%s/lesson", c->label_prefix);
	c->label.image = xasprintf("%s/image", c->label_prefix);
	c->label.machine = xasprintf("%s/machine", c->label_prefix);
	c->label.pool = xasprintf("%s/pool", c->label_prefix);
	c->label.lesson_hash = xasprintf("%s/lesson-hash", c->label_prefix);
	c->label.lab_pod = xasprintf("%s/lab-pod", c->label_prefix);
	return 0;
}

/* On an error nothing is kept: what was set before it is freed. */
int cfg_load(const char *path, struct cfg *c, unsigned needs, char *err, size_t errlen)
{
	if (load(path, c, needs, err, errlen) < 0) {
		cfg_free(c);
		return -1;
	}
	return 0;
}

void cfg_free(struct cfg *c)
{
	for (size_t i = 0; i < NKEYS; i++)
		if (keys[i].type == CFG_STR) {
			char **p = (char **)(void *)((char *)c + keys[i].off);
			free(*p);
			*p = NULL;
		}
	free(c->label.lab_session);
	free(c->label.session_id);
	free(c->label.environment);
	free(c->label.lesson);
	free(c->label.image);
	free(c->label.machine);
	free(c->label.pool);
	free(c->label.lesson_hash);
	free(c->label.lab_pod);
	memset(&c->label, 0, sizeof c->label);
	if (c->ticket_key) {
		OPENSSL_cleanse(c->ticket_key, c->ticket_key_len);
		free(c->ticket_key);
		c->ticket_key = NULL;
	}
}
