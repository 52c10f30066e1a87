#!/bin/sh
# The launch agent of the network-namespace hosts (tests/dist/netns_hosts.sh):
# mpirun calls it where it would call ssh (--mca plm_rsh_agent), as
#
#   netns_agent.sh [OPTIONS...] HOST COMMAND...
#
# (HOST is kiln-hI, COMMAND the orted command line as words that ssh would
# join with spaces for the remote shell). It enters HOST's network namespace
# kiln-hI-$KILN_NETNS_TAG with a UTS namespace of its own whose hostname is
# HOST, and runs COMMAND there under sh in a fresh environment (PATH, HOME,
# KILN_NETNS_TAG and nothing else, as an ssh login gets): whatever the ranks
# need must come through mpirun's -x, exactly as on real hosts.
#
# With KILN_NETNS_PRIVATE=DIR (an existing directory) in mpirun's
# environment, HOST sees DIR.HOST in place of DIR (a bind mount in its own
# mount namespace, which `ip netns exec` makes): what a remote rank writes to
# DIR lands there, as on a host without a shared disk.
while [ $# -gt 0 ]; do
  case $1 in
    -*) shift ;;  # ssh-style options (none by default): ignored
    *) break ;;
  esac
done
host=$1
shift
case $host in
  kiln-h[0-9] | kiln-h[0-9][0-9]) ;;
  *) echo "netns_agent: unknown host '$host' (the hosts are kiln-h0, kiln-h1, ...)" >&2; exit 255 ;;
esac
[ -n "${KILN_NETNS_TAG:-}" ] || { echo "netns_agent: KILN_NETNS_TAG is not set" >&2; exit 255; }
ns=$host-$KILN_NETNS_TAG
private=${KILN_NETNS_PRIVATE:-}
# shellcheck disable=SC2016 # expanded by the inner sh
exec ip netns exec "$ns" unshare --uts sh -c '
  host=$1 private=$2
  shift 2
  hostname "$host" || exit 255
  if [ -n "$private" ]; then
    mkdir -p "$private.$host" && mount --bind "$private.$host" "$private" || exit 255
  fi
  exec env -i PATH="$PATH" HOME="${HOME:-/}" KILN_NETNS_TAG="$KILN_NETNS_TAG" sh -c "$*"
' netns-agent "$host" "$private" "$@"
