#include "cloudinit.h"

#include <stdlib.h>
#include <string.h>

#include <cjson/cJSON.h>

#include "agent_py.h"
#include "jsonx.h"
#include "util.h"

/* Start the agent as early as possible: bootcmd writes it itself (before
 * write_files, which would drop it only later) and starts it at once, so
 * the interpreter starts while cloud-init still writes the lesson's files,
 * and the agent listens before a quick setup writes its flag (readiness is
 * seen only once the agent listens). `python3 -I -S`: the standard library
 * only, without site-packages' start-up (the agent needs nothing else). The
 * token comes later from write_files: the agent refuses until then, labvm
 * asks again. On systemd guests a transient unit without default
 * dependencies (bootcmd runs inside cloud-init.service, ordered before
 * sysinit.target: waiting would deadlock). */
#define AGENT_EOF "LABVM_AGENT_EOF"
static const char agent_start_fmt[] =
    "umask 022; mkdir -p " GUEST_STATE_DIR " \"$(dirname " GUEST_AGENT_PATH ")\"; "
    "rm -f " GUEST_STATE_DIR "/agent.listening; "
    "cat > " GUEST_AGENT_PATH ".new <<'" AGENT_EOF "'\n%s" AGENT_EOF "\n"
    "chmod 0755 " GUEST_AGENT_PATH ".new && mv -f " GUEST_AGENT_PATH ".new " GUEST_AGENT_PATH "\n"
    "run='exec python3 -I -S " GUEST_AGENT_PATH "'; "
    "if [ -d /run/systemd/system ] && command -v systemd-run >/dev/null 2>&1; then "
    "systemd-run --no-block --unit=labvm-agent -p DefaultDependencies=no -p Restart=always "
    "/bin/sh -c \"$run\"; "
    "else nohup /bin/sh -c \"$run\" >/var/log/labvm-agent.log 2>&1 & fi";

/* Root autologin on the serial console (KubeVirt's console is ttyS0),
 * written in bootcmd, before getty starts, so the first prompt is already a
 * root shell (a restart later would show "login:" until then). The tty is
 * named (%I: agetty opens /dev/ttyS0 itself), not "-" (stdin as the tty):
 * "-" needs the base unit's StandardInput=tty and TTYPath=, which
 * serial-getty@.service has only since systemd v250 (PR #21171); with the
 * older unit (Ubuntu 22.04's 249, EL8's 239) stdin is /dev/null and there is
 * no getty (tests/qemu/t910, the pre-v250 unit tests). %I works with both. */
#define AUTOLOGIN_UNIT                                                                             \
	"[Service]\n"                                                                              \
	"ExecStart=\n"                                                                             \
	"ExecStart=-/sbin/agetty -o '-p -f -- \\\\u' --keep-baud 115200,57600,38400,9600 "         \
	"--autologin root %I $TERM\n"

static const char autologin[] =
    "mkdir -p \"$(dirname " GUEST_AUTOLOGIN ")\"; "
    "cat > " GUEST_AUTOLOGIN " <<'LABVM_EOF'\n" AUTOLOGIN_UNIT "LABVM_EOF\n"
    "if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi";

static const char run_setup[] =
    "mkdir -p " GUEST_STATE_DIR "; : > " GUEST_STATE_DIR "/setup.started; "
    "cd /root 2>/dev/null || cd /; "
    "HOME=/root " GUEST_SETUP_PATH " >" GUEST_SETUP_LOG " 2>&1; "
    "echo $? > " GUEST_STATE_DIR "/setup.rc";

/* The last line: the ready flag, only after a successful setup, and only
 * once the agent listens (it writes agent.listening; at most ~10 s): the
 * flag is what the agent reports, so a flag written while the agent still
 * starts would only wait there for it (a quick setup ends well before the
 * interpreter is up); on a real guest runcmd runs long after bootcmd and
 * this costs nothing. */
static const char ready_flag[] =
    "[ \"$(cat " GUEST_STATE_DIR "/setup.rc 2>/dev/null)\" = 0 ] || exit 1; "
    "i=0; while [ ! -e " GUEST_STATE_DIR "/agent.listening ] && [ $i -lt 1000 ]; do "
    "sleep 0.01; i=$((i+1)); done; "
    "touch " GUEST_STATE_DIR "/ready";

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
	char *start = xasprintf(agent_start_fmt, agent_py);
	jx_push(boot, sh(start));
	free(start);
	files = jx_add_arr(doc, "write_files");
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
