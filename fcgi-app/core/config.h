/* config.h - labvm.conf, shared by every labvm binary.
 *
 * `key = value` lines, '#' comments. The path comes from $LABVM_CONF (default
 * /etc/labvm/labvm.conf). Every key has a default (see config.c's table);
 * unknown keys are an error, so a typo never silently falls back. */
#ifndef LABVM_CORE_CONFIG_H
#define LABVM_CORE_CONFIG_H

#include <stddef.h>

#define CFG_DEFAULT_PATH "/etc/labvm/labvm.conf"

struct cfg {
	char *environment; /* value of <prefix>/environment */
	char *namespace_;  /* lab namespace */
	char *kube_api;    /* https://host:port, no trailing slash */
	char *kube_token_file;
	char *kube_ca_file;
	int kube_timeout_ms;
	char *database; /* libpq conninfo: SECRET */
	int vm_capacity;
	int pod_capacity; /* lab Pods at once, counted apart from the VMs */
	int retry_after_s;
	int queue_lapse_s; /* a place in line lapses after this long without a poll */
	char *lessons_dir;
	char *label_prefix;
	char *ticket_key_file;
	int ticket_ttl_s;
	int fcgi_threads;
	char *fcgi_listen;       /* "" = fd 0 */
	int stream_max;          /* open event streams per labvm.fcgi process */
	int stream_max_per_user; /* open event streams per user, every process (sql/011) */
	int stream_drivers;      /* threads per process that move watched starts on */
	int stream_keepalive_s;  /* comment line on an idle event stream */
	char *base_path;         /* URL prefix in front of /api and /console ("" by default) */
	int agent_port;
	int agent_ready_timeout_ms;
	int agent_run_timeout_s; /* default per grader step */
	char *console_listen;    /* host:port of labvm-console */
	char *console_path;      /* URL path the browser uses, e.g. /console/ */
	int console_ping_s;
	int console_linger_s; /* keep a console's upstream open this long after its last browser */
	int console_max_per_session; /* browser connections sharing one console */
	int orphan_grace_s;
	int pool_max_age_s;    /* a pool VM older than this is replaced */
	int pool_yield_wait_s; /* a cold start waits this long for a yielded pool seat */
	int pool_yield_hold_s; /* the pool does not grow this long after yielding a seat */
	char *log_level;
	/* issue #13: no student and no slow dependency stalls the class */
	int grade_timeout_s; /* upper bound of one whole grade */
	int start_rate_max;  /* starts per user per window (0: no limit) */
	int start_rate_window_s;
	int capacity_lock_timeout_ms; /* wait for the capacity lock at most this long */
	int db_idle_tx_timeout_s;     /* idle_in_transaction_session_timeout */
	char *console_user_from; /* "forwarded": the front end's Forwarded remote_user; "none" */
	char *log_format;        /* text | json (core/log.c) */
	char
	    *operators; /* REMOTE_USERs allowed /api/metrics and /api/operator (comma/space list) */
	char *teachers; /* REMOTE_USERs who teach every lesson (issue #29; comma/space list) */
	int teacher_extend_max_minutes; /* one teacher's extend adds at most this much */
	/* the L2 network of a multi-machine session: "same-node" (a CNI bridge
	 * NAD and a required pod affinity on the session id, so that every
	 * machine runs on one node) or "ovn-layer2" (an OVN-Kubernetes layer2
	 * secondary network, which spans the nodes; no affinity) */
	char *session_network;
	int session_net_ovn; /* session_network is "ovn-layer2" (set by cfg_load) */
	/* issue #28: a ready session nobody uses ends after idle_minutes (a
	 * lesson's own idle_minutes wins; 0 = never), and the student is warned
	 * idle_warning_s before an idle end or an expiry */
	int idle_minutes;
	int idle_warning_s;

	/* label keys "<label_prefix>/<name>", built by cfg_load(); lab_pod marks
	 * the lab Pods labvm creates (only they carry it: see manifest.h) */
	struct {
		char *lab_session, *session_id, *environment, *lesson, *image, *machine, *pool,
		    *lesson_hash, *lab_pod;
	} label;

	/* loaded from files by cfg_load() when asked for */
	unsigned char *ticket_key; /* SECRET */
	size_t ticket_key_len;
};

enum cfg_needs {
	CFG_NEED_TICKET_KEY = 1 << 0,
};

/* Load and validate. On error returns -1 with a message in err. */
int cfg_load(const char *path, struct cfg *c, unsigned needs, char *err, size_t errlen);
/* The smallest orphan grace that cannot race a start in flight: the longest
 * submission (lock waits, the cluster calls of one start of `machines`
 * machines: 4N + 3, and one more for the session network when N > 1) plus a
 * margin. cfg_load() checks the one-machine figure; where the lessons are
 * known (labvm.fcgi --check and start, the reaper) the largest lesson's
 * (lab.h lab_min_orphan_grace_s). */
int cfg_min_orphan_grace_machines(const struct cfg *c, long machines);
int cfg_min_orphan_grace_s(const struct cfg *c);
/* Path of the config file: $LABVM_CONF or the default. */
const char *cfg_path(void);

void cfg_free(struct cfg *c);

#endif
