#!/bin/sh
# lvn-bridge-gc: delete the session bridges that labvm's multi-machine
# sessions leave on a Kubernetes node.
#
# With session_network = same-node (the default), each multi-machine session
# gets a NetworkAttachmentDefinition for the CNI "bridge" plugin, whose bridge
# is "lvn" + 12 hex characters of the session id. The plugin makes that bridge
# on the node when the session's first VM starts there, and never deletes it
# (containernetworking/plugins#282): one empty bridge stays per session on
# each node that hosted one. labvm cannot reach the nodes, so this is the
# operator's part: run this as root on every node, in the node's own network
# namespace, e.g. from cron every 10 minutes:
#
#   */10 * * * * root /usr/local/sbin/lvn-bridge-gc
#
# or from a privileged hostNetwork DaemonSet (hostNetwork: true, capability
# NET_ADMIN, /sys of the host network namespace; busybox's sh and ip do).
#
# A bridge is deleted only when its name is labvm's (lvn + 12 lowercase hex),
# it is a bridge, and it had no port at two looks LVN_GC_GRACE seconds apart
# (default 10): a bridge the plugin has just made for a VM that is starting
# gets its port within that time. Nothing else is touched. Prints each
# bridge it deletes; exit status 0 unless a delete failed.
set -u
GRACE=${LVN_GC_GRACE:-10}

candidates() {
	for d in /sys/class/net/lvn*; do
		[ -d "$d/bridge" ] || continue
		n=${d##*/}
		h=${n#lvn}
		[ ${#h} -eq 12 ] || continue
		case $h in *[!0-9a-f]*) continue ;; esac
		# no port: brif/ is empty
		[ -z "$(ls -A "$d/brif" 2>/dev/null)" ] || continue
		echo "$n"
	done
}

first=$(candidates)
[ -n "$first" ] || exit 0
sleep "$GRACE"
rc=0
for n in $(candidates); do
	case " $(echo $first) " in
	*" $n "*)
		if ip link delete "$n" type bridge; then
			echo "deleted $n"
		else
			rc=1
		fi
		;;
	esac
done
exit $rc
