#include "cloudinit.h"

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "agent_py.h"
#include "jsonx.h"
#include "util.h"

/* Start the agent as early as possible; it polls for its own file, since
 * bootcmd runs before write_files (every 20 ms: a lab whose setup is quick
 * writes its flag moments later, and readiness is seen only once the agent
 * listens). On systemd guests a transient unit
 * without default dependencies (bootcmd runs inside cloud-init.service,
 * ordered before sysinit.target: waiting would deadlock). */
static const char agent_start[] =
    "mkdir -p " GUEST_STATE_DIR "; "
    "run='while [ ! -e " GUEST_AGENT_PATH " ]; do sleep 0.02; done; exec python3 " GUEST_AGENT_PATH
    "'; "
    "if [ -d /run/systemd/system ] && command -v systemd-run >/dev/null 2>&1; then "
    "systemd-run --no-block --unit=labvm-agent -p DefaultDependencies=no -p Restart=always "
    "/bin/sh -c \"$run\"; "
    "else nohup /bin/sh -c \"$run\" >/var/log/labvm-agent.log 2>&1 & fi";

/* Root autologin on the serial console (KubeVirt's console is ttyS0),
 * written in bootcmd, before getty starts, so the first prompt is already a
 * root shell (a restart later would show "login:" until then). */
#define AUTOLOGIN_UNIT                                                                             \
	"[Service]\n"                                                                              \
	"ExecStart=\n"                                                                             \
	"ExecStart=-/sbin/agetty -o '-p -f -- \\\\u' --keep-baud 115200,57600,38400,9600 "         \
	"--autologin root - $TERM\n"

static const char autologin[] =
    "mkdir -p \"$(dirname " GUEST_AUTOLOGIN ")\"; "
    "cat > " GUEST_AUTOLOGIN " <<'LABVM_EOF'\n" AUTOLOGIN_UNIT "LABVM_EOF\n"
    "if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi";

static const char run_setup[] =
    "mkdir -p " GUEST_STATE_DIR "; : > " GUEST_STATE_DIR "/setup.started; "
    "cd /root 2>/dev/null || cd /; "
    "HOME=/root " GUEST_SETUP_PATH " >" GUEST_SETUP_LOG " 2>&1; "
    "echo $? > " GUEST_STATE_DIR "/setup.rc";

/* The last line: the ready flag, only after a successful setup. */
static const char ready_flag[] =
    "[ \"$(cat " GUEST_STATE_DIR "/setup.rc 2>/dev/null)\" = 0 ] && touch " GUEST_STATE_DIR
    "/ready";

static cJSON *sh(const char *script)
{
	cJSON *a = jx_arr();
	jx_push_str(a, "sh");
	jx_push_str(a, "-c");
	jx_push_str(a, script);
	return a;
}

static void add_file(cJSON *files, const char *path, const char *content, const char *mode)
{
	cJSON *f = jx_obj();
	jx_add_str(f, "path", path);
	jx_add_str(f, "content", content);
	jx_add_str(f, "permissions", mode);
	jx_add_str(f, "owner", "root:root");
	jx_push(files, f);
}

char *cloudinit_build(const struct lesson *l, const char *agent_token)
{
	return cloudinit_build_hosts(l, agent_token, NULL);
}

char *cloudinit_build_hosts(const struct lesson *l, const char *agent_token, const char *hosts)
{
	cJSON *doc = jx_obj();
	cJSON *files, *run;
	char *setup, *json, *out;

	cJSON *boot = jx_add_arr(doc, "bootcmd");
	jx_push(boot, sh(autologin));
	jx_push(boot, sh(agent_start));
	files = jx_add_arr(doc, "write_files");
	add_file(files, GUEST_AGENT_PATH, agent_py, "0755");
	add_file(files, GUEST_TOKEN_PATH, agent_token, "0600");
	for (size_t i = 0; i < l->nfiles; i++)
		add_file(files, l->files[i].path, l->files[i].content, l->files[i].mode);
	if (l->setup && strncmp(l->setup, "#!", 2) == 0)
		setup = xstrdup(l->setup);
	else
		setup = xasprintf("#!/bin/sh\n%s\n", l->setup ? l->setup : "# no setup\nexit 0");
	add_file(files, GUEST_SETUP_PATH, setup, "0700");
	run = jx_add_arr(doc, "runcmd");
	if (hosts) {
		/* the session's machines by name (once, even if runcmd runs again) */
		char *h = xasprintf("grep -q '^# labvm session machines' /etc/hosts 2>/dev/null || "
		                    "cat >> /etc/hosts <<'LABVM_EOF'\n# labvm session machines\n"
		                    "%sLABVM_EOF\n",
		                    hosts);
		jx_push(run, sh(h));
		free(h);
	}
	jx_push(run, sh(run_setup));
	jx_push(run, sh(ready_flag)); /* the last line */
	json = jx_print(doc);
	out = xasprintf("#cloud-config\n%s\n", json);
	cJSON_free(json);
	free(setup);
	cJSON_Delete(doc);
	return out;
}
