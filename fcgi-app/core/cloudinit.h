/* cloudinit.h - the cloud-init user-data of a lab VM.
 *
 * Always delivered through a Secret (KubeVirt refuses inline user-data over
 * 2048 bytes; one path for every size). The document is "#cloud-config\n"
 * followed by JSON (YAML is a superset of JSON), built with cJSON:
 *
 *   bootcmd:     the serial-console root autologin drop-in (before getty
 *                starts), then write the guest agent (a here-document) and
 *                start it at once (systemd-run on systemd guests, a
 *                background process otherwise), so that it listens before
 *                a quick setup writes the flag
 *   write_files: the agent's per-VM token (0600), the lesson's files, the
 *                setup script
 *   runcmd:      run the setup (log for the agent, exit code recorded), and
 *                LAST create the ready flag, only if setup exited 0
 *
 * Paths shared with the agent (fcgi-app/guest/agent.py). */
#ifndef LABVM_CORE_CLOUDINIT_H
#define LABVM_CORE_CLOUDINIT_H

#include "lesson.h"

#define GUEST_AGENT_PATH "/opt/labvm/agent.py"
#define GUEST_TOKEN_PATH "/etc/labvm/agent-token"
#define GUEST_SETUP_PATH "/opt/labvm/setup.sh"
#define GUEST_SETUP_LOG  "/var/log/labvm-setup.log"
#define GUEST_STATE_DIR  "/var/lib/labvm"
#define GUEST_AUTOLOGIN  "/etc/systemd/system/serial-getty@ttyS0.service.d/autologin.conf"

/* The user-data document (malloc'd), or NULL on allocation failure. */
char *cloudinit_build(const struct lesson *l, const char *agent_token);
/* The same for a machine of a session of several: `hosts` (lines
 * "ADDRESS NAME", one per machine of the session) is added to /etc/hosts in
 * the first runcmd, before the setup runs. */
char *cloudinit_build_hosts(const struct lesson *l, const char *agent_token, const char *hosts);

#endif
