#!/usr/bin/env bash
# Hosts made of Linux network namespaces, for multi-host mpirun tests on one
# machine (docs/distributed.md, "Multi-host on one machine").
#
# Sourced (tests/netns_dist.sh), it defines
#   netns_up N      N hosts kiln-h0 .. kiln-h(N-1): network namespaces
#                   kiln-hI-TAG (TAG: this shell's PID), each with lo and an
#                   eth0 at 10.213.0.(I+1)/24, all on a bridge in a further
#                   namespace kiln-sw-TAG. Nothing is added to the machine's
#                   own network namespace, and no address outside
#                   10.213.0.0/24 exists in the hosts: they reach each other
#                   and nothing else. Also writes the hostfile $NETNS_HOSTFILE
#                   and sets the EXIT trap that calls netns_down.
#   netns_mpirun MPIRUN [ARGS...]   (netns_mpirun_argv MPIRUN: the same as
#                   the array NETNS_ARGV, to put behind `timeout`)
#                   runs MPIRUN ARGS in kiln-h0 (mpirun on the first host)
#                   with the options that make the namespaces hosts:
#                   the hostfile, the launch agent (tests/dist/netns_agent.sh,
#                   `ip netns exec` where mpirun would ssh), OpenMPI's TCP
#                   transport on 10.213.0.0/24 only (btl tcp,self: no shared
#                   memory between hosts; pml ob1: no UCX), no tree spawn.
#   netns_in I CMD  runs CMD in host I (its namespace and hostname).
#   netns_pids I    the PIDs of the processes in host I (`ip netns pids`).
#   netns_down      kills what is left in the hosts (SIGKILL, by PID, only
#                   processes inside these namespaces) and deletes them.
#   netns_skip_unless_permitted
#                   exits 77 (ctest's skip status) with a message unless
#                   `ip netns add` and `unshare --uts` work here (root or
#                   CAP_NET_ADMIN + CAP_SYS_ADMIN, no seccomp filter on setns).
# Every ip command is bounded by a timeout. netns_up first removes namespaces
# that an earlier, killed run left (kiln-h*-PID and kiln-sw-PID whose PID is
# gone), and its hostfile /tmp/kiln-netns-PID.hosts.
#
# Run as a program it brings up HOSTS hosts, runs one mpirun across them and
# tears everything down:
#   tests/dist/netns_hosts.sh HOSTS MPIRUN [MPIRUN_ARGS...]
#   e.g. tests/dist/netns_hosts.sh 2 mpirun --allow-run-as-root -np 2 hostname
NETNS_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
NETNS_AGENT=$NETNS_DIR/netns_agent.sh
NETNS_SUBNET=10.213.0.0/24
NETNS_TAG=$$
NETNS_N=0
NETNS_HOSTFILE=
netns_t() { timeout -k 2 10 "$@"; }

netns_skip_unless_permitted() {
  local probe=kiln-probe-$NETNS_TAG why
  for tool in ip unshare timeout; do
    command -v $tool >/dev/null || { echo "SKIP: no '$tool' command: network-namespace hosts are not available here"; exit 77; }
  done
  if ! why=$(netns_t ip netns add "$probe" 2>&1); then
    echo "SKIP: network namespaces are not permitted here ('ip netns add' says: $why); the multi-host test needs root or CAP_NET_ADMIN + CAP_SYS_ADMIN"
    exit 77
  fi
  if ! why=$(netns_t ip netns exec "$probe" unshare --uts true 2>&1); then
    netns_t ip netns del "$probe"
    echo "SKIP: cannot enter a network namespace with its own hostname here ('ip netns exec ... unshare --uts' says: $why)"
    exit 77
  fi
  netns_t ip netns del "$probe"
}

# Namespaces of earlier runs whose shell is gone (a run killed by SIGKILL,
# e.g. by ctest's TIMEOUT, cannot run its trap).
netns_remove_stale() {
  local ns pid p
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}'); do
    [[ $ns =~ ^kiln-(h[0-9]+|sw|probe)-([0-9]+)$ ]] || continue
    pid=${BASH_REMATCH[2]}
    [[ $pid == "$NETNS_TAG" ]] && continue
    kill -0 "$pid" 2>/dev/null && continue
    for p in $(ip netns pids "$ns" 2>/dev/null); do kill -KILL "$p" 2>/dev/null; done
    netns_t ip netns del "$ns" 2>/dev/null && echo "netns: removed $ns, left by an earlier run (PID $pid is gone)"
  done
  for f in /tmp/kiln-netns-*.hosts; do
    [[ $f =~ ^/tmp/kiln-netns-([0-9]+)\.hosts$ ]] || continue
    kill -0 "${BASH_REMATCH[1]}" 2>/dev/null || rm -f "$f"
  done
}

netns_down() {
  local i ns p n=0 pass all=() left empty=0 killed=()
  for ((i = 0; i < NETNS_N; i++)); do all+=(kiln-h$i-$NETNS_TAG); done
  all+=(kiln-sw-$NETNS_TAG)
  # kiln-h0 (mpirun, the launcher) first; passes until every host is empty,
  # since a launch under way (an agent between fork and setns) can still
  # start a process on a later host: done after two empty passes in a row.
  for ((pass = 0; pass < 50; pass++)); do
    left=0
    for ns in "${all[@]}"; do
      for p in $(ip netns pids "$ns" 2>/dev/null); do
        kill -KILL "$p" 2>/dev/null && n=$((n + 1)) && killed+=("$p")
        left=1
      done
    done
    if ((left == 0)); then
      ((++empty == 2)) && break
    else
      empty=0
    fi
    sleep 0.2
  done
  ((n > 0)) && echo "netns: killed $n process(es) left in the hosts"
  for ((pass = 0; pass < 50; pass++)); do  # until they are gone (reaped), 10 s at most
    left=0
    for p in "${killed[@]}"; do [[ -e /proc/$p ]] && left=1; done
    ((left == 0)) && break
    sleep 0.2
  done
  for ns in "${all[@]}"; do
    # Deleting the namespace removes its interfaces (the veth pairs with it).
    [[ -e /run/netns/$ns ]] && { netns_t ip netns del "$ns" || echo "netns: could not delete $ns"; }
  done
  [[ -n $NETNS_HOSTFILE ]] && rm -f "$NETNS_HOSTFILE"
  NETNS_N=0
}

netns_up() {
  local n=$1 i h
  netns_remove_stale
  trap netns_down EXIT
  trap 'exit 130' INT
  trap 'exit 143' TERM
  NETNS_N=$n
  netns_t ip netns add kiln-sw-$NETNS_TAG || return 1
  netns_t ip netns exec kiln-sw-$NETNS_TAG sh -c 'for f in /proc/sys/net/ipv6/conf/all/disable_ipv6 \
      /proc/sys/net/ipv6/conf/default/disable_ipv6; do [ -w "$f" ] && echo 1 >"$f"; done; true' || return 1
  netns_t ip -n kiln-sw-$NETNS_TAG link add br0 type bridge || return 1
  netns_t ip -n kiln-sw-$NETNS_TAG link set br0 up || return 1
  NETNS_HOSTFILE=/tmp/kiln-netns-$NETNS_TAG.hosts
  : >"$NETNS_HOSTFILE" || return 1
  for ((i = 0; i < n; i++)); do
    h=kiln-h$i-$NETNS_TAG
    netns_t ip netns add "$h" || return 1
    # IPv4 on 10.213.0.0/24 only: no IPv6 link-local addresses either.
    netns_t ip netns exec "$h" sh -c 'for f in /proc/sys/net/ipv6/conf/all/disable_ipv6 \
      /proc/sys/net/ipv6/conf/default/disable_ipv6; do [ -w "$f" ] && echo 1 >"$f"; done; true' || return 1
    # eth0 in the host, its peer hI on the bridge: created straight inside
    # the namespaces, never in the machine's own.
    netns_t ip link add eth0 netns "$h" type veth peer name h$i netns kiln-sw-$NETNS_TAG || return 1
    netns_t ip -n kiln-sw-$NETNS_TAG link set h$i master br0 up || return 1
    netns_t ip -n "$h" addr add 10.213.0.$((i + 1))/24 dev eth0 || return 1
    netns_t ip -n "$h" link set eth0 up || return 1
    netns_t ip -n "$h" link set lo up || return 1
    echo "kiln-h$i slots=1" >>"$NETNS_HOSTFILE"
  done
}

netns_in() {
  local i=$1
  shift
  ip netns exec kiln-h$i-$NETNS_TAG unshare --uts sh -c 'hostname "$0" && exec "$@"' kiln-h$i "$@"
}

netns_pids() { ip netns pids kiln-h$1-$NETNS_TAG 2>/dev/null; }

# netns_mpirun_argv MPIRUN: sets NETNS_ARGV to the command line that runs
# MPIRUN in kiln-h0 with the options above; append mpirun's own arguments
# (e.g. timeout 60 "${NETNS_ARGV[@]}" -np 2 PROGRAM).
netns_mpirun_argv() {
  NETNS_ARGV=(ip netns exec kiln-h0-$NETNS_TAG unshare --uts sh -c 'hostname "$0" && exec "$@"' kiln-h0
    env KILN_NETNS_TAG=$NETNS_TAG "$1"
    --hostfile "$NETNS_HOSTFILE" --mca plm rsh --mca plm_rsh_agent "$NETNS_AGENT" --mca plm_rsh_no_tree_spawn 1
    --mca pml ob1 --mca btl tcp,self --mca btl_tcp_if_include $NETNS_SUBNET --mca oob_tcp_if_include $NETNS_SUBNET)
}

netns_mpirun() {
  netns_mpirun_argv "$1"
  shift
  "${NETNS_ARGV[@]}" "$@"
}

if [[ ${BASH_SOURCE[0]} == "$0" ]]; then
  set -uo pipefail
  (($# >= 2)) || { echo "usage: $0 HOSTS MPIRUN [MPIRUN_ARGS...]" >&2; exit 2; }
  hosts=$1
  shift
  netns_skip_unless_permitted
  netns_up "$hosts" || { echo "netns: could not build $hosts hosts"; exit 1; }
  netns_mpirun "$@"
fi
