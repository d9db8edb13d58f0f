#!/usr/bin/env bash
# A real multi-node Slurm cluster on this one machine, for hpc-grpo's tests.
#
#   bash tests/cluster/sandbox.sh start    # bring it up (no-op if already up)
#   bash tests/cluster/sandbox.sh status   # exit 0 if up, 1 if down
#   bash tests/cluster/sandbox.sh stop     # stop everything start made
#   bash tests/cluster/sandbox.sh restart
#   bash tests/cluster/sandbox.sh node-down NODE  # kill NODE for good: its slurmd and every
#                                                 # process in its namespace (SIGKILL)
#   bash tests/cluster/sandbox.sh node-up NODE    # start its slurmd again; back to idle
#
# What "start" builds (Debian 12, Slurm 22.05 from apt, run as root, no systemd):
#   - munged, MariaDB, slurmdbd and slurmctld in the root network namespace;
#   - nodes node1..node4: one network namespace each (hpcgrpo-nodeN) with its own
#     hostname (UTS namespace) and address 10.200.0.11-14 on bridge hgsbr0
#     (10.200.0.1/24), one slurmd each. The names are in a marked block of /etc/hosts;
#   - partitions debug (default), low (preemptible, requeued) and high (preempts low);
#   - /etc/slurm/slurm.conf -> the generated config, so sbatch/srun/sacct/... need no SLURM_CONF.
# Every start is a fresh cluster: job ids restart at 1 and accounting is empty.
# Nodes share the machine's CPUs: fine for placement and signals, useless for timing.
#
# Environment:
#   HPC_GRPO_SANDBOX_DIR      state, configs and logs (default /tmp/hpc-grpo-sandbox)
#   HPC_GRPO_SANDBOX_TIMEOUT  seconds start waits for the cluster to be ready (default 90)
#   HPC_GRPO_SANDBOX_GPUS_PER_NODE  GPUs each node owns through gres (default 0; see below)
#   HPC_GRPO_SANDBOX_DEBS     folders of carried .deb files (':'-separated) to install from when
#                             the machine has no package registry (tests/cluster/offline-packages.sh)
set -euo pipefail

# Daemons live in /usr/sbin, which a caller's PATH (e.g. a venv) may lack.
export PATH="$PATH:/usr/local/sbin:/usr/sbin:/sbin"

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
readonly SCRIPT_DIR
SANDBOX_DIR="$(realpath -m "${HPC_GRPO_SANDBOX_DIR:-/tmp/hpc-grpo-sandbox}")"
readonly SANDBOX_DIR
readonly START_TIMEOUT="${HPC_GRPO_SANDBOX_TIMEOUT:-90}"

readonly ETC_DIR="$SANDBOX_DIR/etc"
readonly LOG_DIR="$SANDBOX_DIR/log"
readonly RUN_DIR="$SANDBOX_DIR/run"
readonly STATE_DIR="$SANDBOX_DIR/state"
readonly MUNGE_DIR="$SANDBOX_DIR/munge"   # owned by munge: munged runs as that user
readonly MYSQL_DIR="$SANDBOX_DIR/mysql"   # owned by mysql: so is its error log
readonly SLURM_CONF_FILE="$ETC_DIR/slurm.conf"
readonly SYSTEM_SLURM_CONF=/etc/slurm/slurm.conf

# Network. Nothing here may ever leave the machine: the whole /16 is made
# unreachable before any address of it is created, and removed last.
readonly GUARD_ROUTE=10.200.0.0/16
readonly BRIDGE=hgsbr0
readonly BRIDGE_ADDR=10.200.0.1
readonly NODE_NET=10.200.0          # node i gets $NODE_NET.(10+i)
# GPUs: HPC_GRPO_SANDBOX_GPUS_PER_NODE=G (default 0) gives each node G of the machine's GPUs
# through Slurm's gres (gres.conf File=/dev/nvidiaN, so CUDA_VISIBLE_DEVICES in a job shows its
# node's own GPUs), with as many nodes (at most 4) as the GPUs fill. Start records the choice
# in the sandbox directory, so status, stop and restart need no variable.
GPUS_PER_NODE="${HPC_GRPO_SANDBOX_GPUS_PER_NODE:-}"
if [[ -z "$GPUS_PER_NODE" && "${1:-}" != start && -s "$SANDBOX_DIR/gpus_per_node" ]]; then
    GPUS_PER_NODE="$(tr -dc '0-9' <"$SANDBOX_DIR/gpus_per_node")"
fi
GPUS_PER_NODE="${GPUS_PER_NODE:-0}"
[[ "$GPUS_PER_NODE" =~ ^[0-9]+$ ]] || { echo "sandbox: HPC_GRPO_SANDBOX_GPUS_PER_NODE must be a number" >&2; exit 2; }
readonly GPUS_PER_NODE
gpu_devices() { find /dev -maxdepth 1 -name 'nvidia[0-9]*' 2>/dev/null | sort -V; }
node_count() {
    local count=4
    if ((GPUS_PER_NODE > 0)); then
        count=$(($(gpu_devices | wc -l) / GPUS_PER_NODE))
        ((count > 4)) && count=4
    fi
    echo "$count"
}
NODES=()
for ((i = 1; i <= $(node_count); i++)); do NODES+=("node$i"); done
readonly NODES
# CPUs each node advertises: 4 on a CPU machine (tests need no more); with GPUs, the machine's
# cores shared out (at most 16), so a GPU rank gets its data loader and vLLM threads.
NODE_CPUS=4
if ((GPUS_PER_NODE > 0 && ${#NODES[@]} > 0)); then
    NODE_CPUS=$(($(nproc) / ${#NODES[@]}))
    ((NODE_CPUS > 16)) && NODE_CPUS=16
fi
readonly NODE_CPUS
readonly NETNS_PREFIX=hpcgrpo-      # network namespace of node1: hpcgrpo-node1
readonly VETH_PREFIX=hgs-           # root end of node1's veth: hgs-node1 (<= 15 chars)
readonly CTL_ALIAS=sandbox-ctl      # extra /etc/hosts name for the controller address
readonly HOSTS_BEGIN="# >>> hpc-grpo sandbox (tests/cluster/sandbox.sh) >>>"
readonly HOSTS_END="# <<< hpc-grpo sandbox <<<"

# Ports: slurmctld/slurmdbd use Slurm's defaults; MariaDB an unusual one on
# 127.0.0.1 so that it cannot collide with a system MariaDB on 3306.
readonly CTL_PORT=6817
readonly DBD_PORT=6819
readonly DB_PORT=3399

# Cluster tuning (see slurm.conf.tmpl).
readonly SCHED_INTERVAL=1
readonly MIN_JOB_AGE=30
readonly GRACE_TIME=30

# Packages, and one command that proves each is installed.
readonly -a APT_PACKAGES=(slurm-wlm munge slurmdbd mariadb-server iproute2 util-linux)
readonly -a NEEDED_COMMANDS=(slurmctld slurmd slurmdbd sinfo munged mariadbd mariadb-install-db mariadb ip nsenter unshare flock runuser)

log() { printf 'sandbox: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

now() { date +%s.%N; }
elapsed_since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.1f", b - a }'; }

# ---------------------------------------------------------------------------
# Processes. Every daemon writes a pid file; we only ever signal a pid whose
# command name is the one we expect, so a stale pid file can't hit a stranger.
# ---------------------------------------------------------------------------

pidfile_of() {  # pidfile_of DAEMON [NODE]
    case "$1" in
        munged) echo "$MUNGE_DIR/munged.pid" ;;
        mariadbd) echo "$MYSQL_DIR/mariadbd.pid" ;;
        slurmd) echo "$RUN_DIR/slurmd.$2.pid" ;;
        *) echo "$RUN_DIR/$1.pid" ;;
    esac
}

# Prints the pid of DAEMON (NODE for slurmd) if it is running, else fails.
running_pid() {
    local pidfile pid
    pidfile="$(pidfile_of "$@")"
    [[ -s "$pidfile" ]] || return 1
    pid="$(tr -dc '0-9' <"$pidfile")"
    [[ -n "$pid" && "$(cat "/proc/$pid/comm" 2>/dev/null)" == "$1" ]] || return 1
    echo "$pid"
}

# A zombie counts as gone: killed job processes whose parent died wait for
# PID 1 to reap them, which can take a while.
pid_alive() {
    local state
    state="$(sed -n 's/^.*) \(.\).*/\1/p' "/proc/$1/stat" 2>/dev/null)" || return 1
    [[ -n "$state" && "$state" != Z ]]
}

# TERM, wait up to $2 seconds, then KILL.
terminate_pids() {
    local pids=$1 wait_s=$2 pid i
    [[ -n "${pids// /}" ]] || return 0
    # shellcheck disable=SC2086  # word splitting of the pid list is wanted
    kill -TERM $pids 2>/dev/null || true
    for ((i = 0; i < wait_s * 10; i++)); do
        for pid in $pids; do
            pid_alive "$pid" && break
            pid=
        done
        [[ -z "$pid" ]] && return 0
        sleep 0.1
    done
    # shellcheck disable=SC2086
    kill -KILL $pids 2>/dev/null || true
    sleep 0.2
}

# Pids of our running daemons (DAEMON or DAEMON:NODE specs), space separated.
daemon_pids() {
    local spec pid
    for spec in "$@"; do
        # shellcheck disable=SC2086  # "slurmd:node1" -> slurmd node1
        if pid="$(running_pid ${spec/:/ })"; then printf '%s ' "$pid"; fi
    done
}

# Runs a daemon detached (setsid --fork returns at once): its own session,
# stdin from /dev/null, output to a log, and no other inherited descriptor:
# a daemon holding a caller's pipe would make the caller wait for EOF forever,
# and one holding our lock fd 9 would block every later start/stop.
launch() {  # launch LOGFILE CMD...
    local logfile=$1
    shift
    (
        local fd
        for fd in "/proc/$BASHPID/fd"/*; do
            fd="${fd##*/}"
            if ((fd > 2)); then eval "exec $fd>&-"; fi
        done
        exec setsid --fork "$@"
    ) </dev/null >>"$logfile" 2>&1
}

# Fails (and says so) if one of the daemons has written its pid file and died since:
# a daemon that exits at start-up should not cost the whole wait.
not_dead() {  # not_dead DAEMON[:NODE]...
    local spec
    for spec in "$@"; do
        # shellcheck disable=SC2086  # "slurmd:node1" -> slurmd node1
        if [[ -s "$(pidfile_of ${spec/:/ })" ]] && ! running_pid ${spec/:/ } >/dev/null; then
            log "${spec/:/ } exited during start-up"
            return 1
        fi
    done
}

wait_for() {  # wait_for SECONDS DESCRIPTION GUARD CMD...: poll CMD every 0.2 s while GUARD holds
    local limit=$1 what=$2 guard=$3 deadline
    shift 3
    deadline=$(($(date +%s) + limit))
    until "$@" >/dev/null 2>&1; do
        # shellcheck disable=SC2086  # the guard is a command line
        $guard || return 1
        if (($(date +%s) >= deadline)); then
            log "timed out after ${limit}s waiting for $what"
            return 1
        fi
        sleep 0.2
    done
}

# ---------------------------------------------------------------------------
# Packages
# ---------------------------------------------------------------------------

ensure_packages() {
    local cmd missing=()
    for cmd in "${NEEDED_COMMANDS[@]}"; do
        command -v "$cmd" >/dev/null 2>&1 || missing+=("$cmd")
    done
    ((${#missing[@]} == 0)) && return 0
    if [[ -n "${HPC_GRPO_SANDBOX_DEBS:-}" ]]; then
        # A machine without a package registry: .deb files carried from a Debian 12 machine
        # (tests/cluster/offline-packages.sh fetch there), folders separated by ':'.
        log "installing carried packages from $HPC_GRPO_SANDBOX_DEBS (missing: ${missing[*]})"
        local -a dirs
        IFS=: read -r -a dirs <<<"$HPC_GRPO_SANDBOX_DEBS"
        bash "$SCRIPT_DIR/offline-packages.sh" install "${dirs[@]}" >"$LOG_DIR/packages.log" 2>&1 ||
            { tail -n 20 "$LOG_DIR/packages.log" >&2; die "installing the carried packages failed"; }
        for cmd in "${missing[@]}"; do
            command -v "$cmd" >/dev/null 2>&1 || die "$cmd is still missing after installing the carried packages"
        done
        return 0
    fi
    log "installing packages (missing: ${missing[*]})"
    local t0
    t0="$(now)"
    apt-get update -qq >"$LOG_DIR/apt.log" 2>&1 || { tail -n 20 "$LOG_DIR/apt.log" >&2; die "apt-get update failed"; }
    # --no-install-recommends: 9+ packages instead of ~45. The image's policy-rc.d
    # stops the packages' init scripts from starting daemons; we start them ourselves.
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${APT_PACKAGES[@]}" \
        >>"$LOG_DIR/apt.log" 2>&1 || { tail -n 20 "$LOG_DIR/apt.log" >&2; die "apt-get install failed (log: $LOG_DIR/apt.log)"; }
    log "packages installed in $(elapsed_since "$t0")s"
}

# Lmod and a one-module tree, for the tests of a profile's `modules:` (test_cluster_modules.py).
# Additive and idempotent: `start` applies it to a cluster that is already up, too (the nodes
# share this machine's filesystem). Without Lmod those tests skip; the cluster does not need it.
readonly LMOD_INIT=/usr/share/lmod/lmod/init/bash
readonly LMOD_TREE=/etc/lmod/modules                  # on Debian's default MODULEPATH
readonly TEST_MODULE_HOME=/opt/hpc-grpo-test-module/1.0
ensure_lmod() {  # its apt log is kept beside the sandbox's logs (start recreates those)
    if [[ ! -r "$LMOD_INIT" ]]; then
        if [[ -n "${HPC_GRPO_SANDBOX_DEBS:-}" ]]; then
            log "no Lmod on this machine (carried packages): the module tests will skip"
            return 0
        fi
        log "installing lmod"
        if ! { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq \
                --no-install-recommends lmod; } >>"$SANDBOX_DIR/lmod-apt.log" 2>&1; then
            log "WARNING: installing lmod failed (log: $SANDBOX_DIR/lmod-apt.log): the module tests will skip"
            return 0
        fi
    fi
    mkdir -p "$LMOD_TREE/hpc-grpo-test" "$TEST_MODULE_HOME/bin"
    printf '#!/bin/sh\necho "hpc-grpo-test-tool 1.0"\n' >"$TEST_MODULE_HOME/bin/hpc-grpo-test-tool"
    chmod 755 "$TEST_MODULE_HOME/bin/hpc-grpo-test-tool"
    cat >"$LMOD_TREE/hpc-grpo-test/1.0.lua" <<EOF_MODULE
-- Written by tests/cluster/sandbox.sh: what a site module does to a job's environment.
whatis("hpc-grpo test module 1.0")
setenv("HPC_GRPO_TEST_MODULE", "1.0")
prepend_path("PATH", "$TEST_MODULE_HOME/bin")
EOF_MODULE
}

# ---------------------------------------------------------------------------
# Configuration
# ---------------------------------------------------------------------------

node_addr() { echo "$NODE_NET.$((10 + $1))"; }  # node_addr INDEX (1-based)

render() {  # render TEMPLATE OUTPUT: replace @NAME@ fields
    local node_lines="" i gres="" gres_types="# GresTypes: none (no GPUs in this sandbox)"
    if ((GPUS_PER_NODE > 0)); then
        gres=" Gres=gpu:$GPUS_PER_NODE" gres_types="GresTypes=gpu"
    fi
    for i in "${!NODES[@]}"; do
        node_lines+="NodeName=${NODES[i]} NodeAddr=$(node_addr $((i + 1))) NodeHostname=${NODES[i]}$gres"$'\n'
    done
    local ctl_host
    ctl_host="$(hostname -s)"
    awk -v node_lines="${node_lines%$'\n'}" \
        -v ctl_host="$ctl_host" -v bridge_addr="$BRIDGE_ADDR" \
        -v node_range="node[1-${#NODES[@]}]" \
        -v ctl_port="$CTL_PORT" -v dbd_port="$DBD_PORT" -v db_port="$DB_PORT" -v db_pass="$DB_PASS" \
        -v state_dir="$STATE_DIR" -v run_dir="$RUN_DIR" -v log_dir="$LOG_DIR" \
        -v sched_interval="$SCHED_INTERVAL" -v min_job_age="$MIN_JOB_AGE" -v grace_time="$GRACE_TIME" \
        -v gres_types="$gres_types" -v node_cpus="$NODE_CPUS" -v etc_dir="$ETC_DIR" '
        {
            gsub(/@NODE_LINES@/, node_lines); gsub(/@CTL_HOST@/, ctl_host)
            gsub(/@BRIDGE_ADDR@/, bridge_addr); gsub(/@NODE_RANGE@/, node_range)
            gsub(/@CTL_PORT@/, ctl_port); gsub(/@DBD_PORT@/, dbd_port)
            gsub(/@DB_PORT@/, db_port); gsub(/@DB_PASS@/, db_pass)
            gsub(/@STATE_DIR@/, state_dir); gsub(/@RUN_DIR@/, run_dir); gsub(/@LOG_DIR@/, log_dir)
            gsub(/@SCHED_INTERVAL@/, sched_interval); gsub(/@MIN_JOB_AGE@/, min_job_age)
            gsub(/@GRACE_TIME@/, grace_time); gsub(/@GRES_TYPES@/, gres_types)
            gsub(/@NODE_CPUS@/, node_cpus); gsub(/@ETC_DIR@/, etc_dir)
            if ($0 ~ /@[A-Z_]+@/) { print "unfilled field in line: " $0 > "/dev/stderr"; exit 1 }
            print
        }' "$1" >"$2"
}

write_configs() {
    # A fresh random password per start: the database is new every time.
    DB_PASS="$(od -An -N12 -tx1 /dev/urandom | tr -d ' \n')"
    render "$SCRIPT_DIR/slurm.conf.tmpl" "$SLURM_CONF_FILE"
    render "$SCRIPT_DIR/slurmdbd.conf.tmpl" "$ETC_DIR/slurmdbd.conf"
    chmod 600 "$ETC_DIR/slurmdbd.conf"   # slurmdbd refuses a readable one
    write_gres_conf
    write_cgroup_conf
}

# Slurm 22.05 sets up cgroups in slurmd even with task/none and proctrack/linuxproc. On a
# cgroup v1 machine (this project's CI) that needs nothing; on a pure cgroup v2 machine without
# systemd (the lent GPU machine) slurmd asks systemd over dbus for a scope and dies
# ("cannot connect to dbus system daemon ... slurmd initialization failed"). IgnoreSystemd
# makes slurmd create the scope directory itself, CgroupAutomount enables the controllers it
# needs there (both for "development and testing with cgroup/v2", cgroup.conf(5) of 22.05).
write_cgroup_conf() {
    if [[ "$(stat -fc %T /sys/fs/cgroup 2>/dev/null)" == cgroup2fs ]]; then
        printf '%s\n' "# Generated by tests/cluster/sandbox.sh: cgroup v2 without systemd." \
            "CgroupPlugin=cgroup/v2" "IgnoreSystemd=yes" "CgroupAutomount=yes" >"$ETC_DIR/cgroup.conf"
        mkdir -p /sys/fs/cgroup/system.slice   # where slurmd makes NODE_slurmstepd.scope
    fi
}

# gres.conf beside slurm.conf (where slurmd looks): node i owns the machine's GPUs
# i*G .. i*G+G-1 by device file. Slurm 22.05 sets CUDA_VISIBLE_DEVICES to the node-local
# index (0 on every node), which is right where device cgroups hide the other GPUs; the
# sandbox has none (TaskPlugin=task/none), so a TaskProlog turns the index into the device
# number, as the cgroup would by hiding the rest: each node's ranks see only their GPUs.
write_gres_conf() {
    if ((GPUS_PER_NODE == 0)); then
        echo "# TaskProlog: none (no GPUs in this sandbox)" >"$ETC_DIR/task_prolog.conf"
        return 0
    fi
    echo "TaskProlog=$ETC_DIR/task_prolog.sh" >"$ETC_DIR/task_prolog.conf"
    cat >"$ETC_DIR/task_prolog.sh" <<EOF
#!/bin/sh
# Generated by tests/cluster/sandbox.sh: node-local GPU index -> this machine's device number.
[ -n "\${CUDA_VISIBLE_DEVICES:-}" ] || exit 0
base=\$(( (\${SLURMD_NODENAME#node} - 1) * $GPUS_PER_NODE ))
out=
for d in \$(echo "\$CUDA_VISIBLE_DEVICES" | tr , ' '); do out="\$out\${out:+,}\$((base + d))"; done
echo "export CUDA_VISIBLE_DEVICES=\$out"
EOF
    chmod 755 "$ETC_DIR/task_prolog.sh"
    local -a devices
    mapfile -t devices < <(gpu_devices)
    local i k
    {
        echo "# Generated by tests/cluster/sandbox.sh: $GPUS_PER_NODE GPU(s) per node."
        echo "AutoDetect=off"
        for i in "${!NODES[@]}"; do
            for ((k = i * GPUS_PER_NODE; k < (i + 1) * GPUS_PER_NODE; k++)); do
                echo "NodeName=${NODES[i]} Name=gpu File=${devices[k]}"
            done
        done
    } >"$ETC_DIR/gres.conf"
}

# Fresh state and logs for every start (logs of the previous run are replaced).
prepare_dirs() {
    mkdir -p "$SANDBOX_DIR"
    chmod 755 "$SANDBOX_DIR"   # munge and mysql must traverse it
    rm -rf "$ETC_DIR" "$LOG_DIR" "$RUN_DIR" "$STATE_DIR" "$MUNGE_DIR" "$MYSQL_DIR"
    mkdir -p "$ETC_DIR" "$LOG_DIR" "$RUN_DIR" "$STATE_DIR/slurmctld"
    local node
    for node in "${NODES[@]}"; do mkdir -p "$STATE_DIR/slurmd.$node"; done
}

# /etc/slurm/slurm.conf -> our config, so clients work without SLURM_CONF.
# We never overwrite a real config that is not ours.
link_system_config() {
    mkdir -p "$(dirname "$SYSTEM_SLURM_CONF")"
    if [[ -e "$SYSTEM_SLURM_CONF" || -L "$SYSTEM_SLURM_CONF" ]] && [[ "$(readlink "$SYSTEM_SLURM_CONF")" != "$SLURM_CONF_FILE" ]]; then
        if [[ -L "$SYSTEM_SLURM_CONF" && "$(readlink "$SYSTEM_SLURM_CONF")" == */hpc-grpo*/etc/slurm.conf ]]; then
            log "replacing stale sandbox link $SYSTEM_SLURM_CONF -> $(readlink "$SYSTEM_SLURM_CONF")"
        else
            die "$SYSTEM_SLURM_CONF exists and is not ours; move it away first"
        fi
    fi
    ln -sfn "$SLURM_CONF_FILE" "$SYSTEM_SLURM_CONF"
}

unlink_system_config() {
    if [[ -L "$SYSTEM_SLURM_CONF" && "$(readlink "$SYSTEM_SLURM_CONF")" == "$SLURM_CONF_FILE" ]]; then
        rm -f "$SYSTEM_SLURM_CONF"
    fi
}

# ---------------------------------------------------------------------------
# Network: bridge + one namespace per node
# ---------------------------------------------------------------------------

disable_ipv6() {  # no IPv6 link-local chatter on our links; a missing knob is fine
    local knob="/proc/sys/net/ipv6/conf/$1/disable_ipv6"
    if [[ -w "$knob" ]]; then echo 1 >"$knob"; fi
}

setup_network() {
    # First: the guard route, so no address in 10.200/16 can be routed out.
    ip route replace unreachable "$GUARD_ROUTE"
    ip link show "$BRIDGE" >/dev/null 2>&1 || ip link add "$BRIDGE" type bridge
    disable_ipv6 "$BRIDGE"
    ip addr replace "$BRIDGE_ADDR/24" dev "$BRIDGE"
    ip link set "$BRIDGE" up

    local i node ns veth
    for i in "${!NODES[@]}"; do
        node="${NODES[i]}" ns="$NETNS_PREFIX${NODES[i]}" veth="$VETH_PREFIX${NODES[i]}"
        ip netns add "$ns"
        ip link add "$veth" type veth peer name eth0 netns "$ns"
        disable_ipv6 "$veth"
        ip link set "$veth" master "$BRIDGE" up
        # /proc/sys/net shows the namespace of whoever opens it: nsenter, not
        # `ip netns exec` (which remounts /sys; see start_slurmds).
        nsenter --net="/run/netns/$ns" sh -c 'echo 1 >/proc/sys/net/ipv6/conf/eth0/disable_ipv6' 2>/dev/null || true
        ip -n "$ns" addr add "$(node_addr $((i + 1)))/24" dev eth0
        ip -n "$ns" link set lo up
        ip -n "$ns" link set eth0 up
        # No default route: the only reachable network is the bridge.
    done
    add_hosts_block
}

# Processes still inside a node's namespace (slurmstepd, job tasks, ...).
netns_pids() { ip netns pids "$1" 2>/dev/null | tr '\n' ' ' || true; }

teardown_network() {
    local node ns
    remove_hosts_block
    for node in "${NODES[@]}"; do
        ns="$NETNS_PREFIX$node"
        # A namespace outlives `ip netns del` while a process is inside: sweep
        # anything started since teardown's snapshot.
        if [[ -e "/run/netns/$ns" ]]; then terminate_pids "$(netns_pids "$ns")" 1; fi
        ip netns del "$NETNS_PREFIX$node" 2>/dev/null || true
        ip link del "$VETH_PREFIX$node" 2>/dev/null || true
    done
    ip link del "$BRIDGE" 2>/dev/null || true
    # Last: the guard route (only if it is still our unreachable route).
    if ip route show "$GUARD_ROUTE" | grep -q '^unreachable'; then
        ip route del unreachable "$GUARD_ROUTE" 2>/dev/null || true
    fi
}

# /etc/hosts may be a bind mount (containers): rewrite it in place, never replace it.
remove_hosts_block() {
    local tmp
    grep -qF "$HOSTS_BEGIN" /etc/hosts 2>/dev/null || return 0
    tmp="$(mktemp)"
    awk -v b="$HOSTS_BEGIN" -v e="$HOSTS_END" '$0 == b { skip = 1 } !skip { print } $0 == e { skip = 0 }' /etc/hosts >"$tmp"
    cat "$tmp" >/etc/hosts
    rm -f "$tmp"
}

add_hosts_block() {
    local i
    remove_hosts_block
    {
        echo "$HOSTS_BEGIN"
        echo "$BRIDGE_ADDR $CTL_ALIAS"
        for i in "${!NODES[@]}"; do echo "$(node_addr $((i + 1))) ${NODES[i]}"; done
        echo "$HOSTS_END"
    } >>/etc/hosts
}

# ---------------------------------------------------------------------------
# Daemons
# ---------------------------------------------------------------------------

munge_works() { munge -n </dev/null 2>/dev/null | unmunge >/dev/null 2>&1; }

start_munge() {
    # One munged serves every namespace: its socket is a path in the shared filesystem.
    if munge_works; then
        log "munged: using the one already running"
        return 0
    fi
    install -d -o munge -g munge -m 0755 /run/munge
    install -d -o munge -g munge -m 0700 "$MUNGE_DIR"
    if [[ ! -s /etc/munge/munge.key ]]; then
        install -d -o munge -g munge -m 0700 /etc/munge
        mungekey --create --keyfile=/etc/munge/munge.key
        chown munge:munge /etc/munge/munge.key
        chmod 400 /etc/munge/munge.key
    fi
    launch "$LOG_DIR/munged.out" runuser -u munge -- munged \
        --pid-file="$MUNGE_DIR/munged.pid" --log-file="$MUNGE_DIR/munged.log" \
        --seed-file="$MUNGE_DIR/munged.seed"
    wait_for 10 "munged" "not_dead munged" munge_works
}

mariadb_sql() { mariadb --no-defaults --socket="$MYSQL_DIR/mysqld.sock" -u root "$@"; }

start_mariadb() {
    # MariaDB's default InnoDB sizes (128M pool, 96M log) are what slurmdbd asks for.
    install -d -o mysql -g mysql -m 0750 "$MYSQL_DIR"
    mariadb-install-db --no-defaults --user=mysql --datadir="$MYSQL_DIR/data" \
        --auth-root-authentication-method=socket --skip-test-db --skip-name-resolve \
        >"$LOG_DIR/mariadb-install.log" 2>&1 || { tail -n 20 "$LOG_DIR/mariadb-install.log" >&2; return 1; }
    launch "$LOG_DIR/mariadbd.out" mariadbd --no-defaults --user=mysql --datadir="$MYSQL_DIR/data" \
        --socket="$MYSQL_DIR/mysqld.sock" --pid-file="$(pidfile_of mariadbd)" \
        --bind-address=127.0.0.1 --port="$DB_PORT" --skip-name-resolve \
        --log-error="$MYSQL_DIR/error.log" --innodb-lock-wait-timeout=900
    wait_for 30 "mariadbd" "not_dead mariadbd" mariadb_sql -e 'SELECT 1'
    mariadb_sql -e "CREATE USER 'slurm'@'127.0.0.1' IDENTIFIED BY '$DB_PASS';
        GRANT ALL ON slurm_acct_db.* TO 'slurm'@'127.0.0.1';"
}

start_slurmdbd() {
    # slurmdbd has no -f: it finds slurmdbd.conf next to $SLURM_CONF. It forks itself.
    SLURM_CONF="$SLURM_CONF_FILE" launch "$LOG_DIR/slurmdbd.out" slurmdbd
    wait_for 30 "slurmdbd" "not_dead slurmdbd" sacctmgr -n list cluster
}

start_slurmctld() {
    # Registers the cluster with slurmdbd by itself. It forks itself.
    launch "$LOG_DIR/slurmctld.out" slurmctld -f "$SLURM_CONF_FILE"
    wait_for 30 "slurmctld" "not_dead slurmctld" scontrol ping
}

start_slurmds() {
    local node
    for node in "${NODES[@]}"; do
        # nsenter, not `ip netns exec`: the latter remounts /sys, which hides
        # /sys/fs/cgroup and slurmd dies ("No filesystem mounted on /sys/fs/cgroup").
        # unshare --uts gives the node its own hostname. slurmd forks itself.
        # shellcheck disable=SC2016  # $1/$2 are expanded by the inner sh
        launch "$LOG_DIR/slurmd.$node.out" \
            nsenter --net="/run/netns/$NETNS_PREFIX$node" unshare --uts -- \
            sh -c 'hostname "$1" && exec slurmd -f "$2" -N "$1"' sh "$node" "$SLURM_CONF_FILE"
    done
}

all_nodes_idle() {
    local states
    states="$(sinfo -h -N -p debug -o '%N %t')"
    [[ "$(grep -c ' idle$' <<<"$states")" -eq "${#NODES[@]}" ]]
}

accounting_ready() {
    # The cluster is registered in slurmdbd and sacct answers.
    [[ "$(sacctmgr -n -P list cluster sandbox format=cluster 2>/dev/null)" == sandbox ]] &&
        sacct -n -X >/dev/null
}

cluster_ready() { all_nodes_idle && accounting_ready; }

# All daemons alive, namespaces present, config linked. Cheap: no RPC.
is_up() {
    local node
    running_pid slurmctld >/dev/null && running_pid slurmdbd >/dev/null &&
        running_pid mariadbd >/dev/null && munge_works || return 1
    for node in "${NODES[@]}"; do
        running_pid slurmd "$node" >/dev/null && [[ -e "/run/netns/$NETNS_PREFIX$node" ]] || return 1
    done
    [[ "$(readlink "$SYSTEM_SLURM_CONF" 2>/dev/null)" == "$SLURM_CONF_FILE" ]]
}

show_logs() {
    local f
    log "logs are in $LOG_DIR (MariaDB: $MYSQL_DIR/error.log, munged: $MUNGE_DIR/munged.log)"
    for f in "$LOG_DIR"/slurmctld.log "$LOG_DIR"/slurmdbd.log "$LOG_DIR"/slurmd.*.log "$LOG_DIR"/*.out "$MYSQL_DIR/error.log"; do
        [[ -s "$f" ]] || continue
        echo "----- tail of $f" >&2
        tail -n 15 "$f" >&2
    done
    if command -v sinfo >/dev/null && [[ -e "$SLURM_CONF_FILE" ]]; then
        echo "----- sinfo" >&2
        SLURM_CONF="$SLURM_CONF_FILE" timeout 5 sinfo -N >&2 2>&1 || true
    fi
}

# ---------------------------------------------------------------------------
# Commands
# ---------------------------------------------------------------------------

# start wipes subdirectories of the sandbox directory: only use a new or empty
# directory, or one that carries our marker.
claim_sandbox_dir() {
    local marker="$SANDBOX_DIR/.hpc-grpo-sandbox"
    # (.lock: directories made before the marker existed)
    if [[ -d "$SANDBOX_DIR" && ! -e "$marker" && ! -e "$SANDBOX_DIR/.lock" && -n "$(ls -A "$SANDBOX_DIR")" ]]; then
        die "$SANDBOX_DIR is not empty and is not a sandbox directory; pick another HPC_GRPO_SANDBOX_DIR"
    fi
    mkdir -p "$SANDBOX_DIR"
    touch "$marker"
}

# One start/stop at a time (parallel test workers may all call start).
take_lock() {
    claim_sandbox_dir
    exec 9>"$SANDBOX_DIR/.lock"
    flock 9
}

# Only one sandbox can run per machine (fixed namespaces, bridge, ports and
# /etc/slurm/slurm.conf). Refuse to touch one started from another directory.
refuse_foreign_sandbox() {
    local target other pidfile pid
    target="$(readlink "$SYSTEM_SLURM_CONF" 2>/dev/null)" || return 0
    [[ "$target" == "$SLURM_CONF_FILE" || "$target" != */etc/slurm.conf ]] && return 0
    other="${target%/etc/slurm.conf}"
    for pidfile in "$other"/run/*.pid; do
        [[ -s "$pidfile" ]] || continue
        pid="$(tr -dc '0-9' <"$pidfile")"
        if [[ -n "$pid" && "$(cat "/proc/$pid/comm" 2>/dev/null)" == slurm* ]]; then
            die "a sandbox from $other is running; stop it first: HPC_GRPO_SANDBOX_DIR=$other $0 stop"
        fi
    done
}

# Stops whatever of ours is running; safe to call on a half-started or absent cluster.
teardown() {
    local node daemons=(munged mariadbd slurmdbd slurmctld) daemon_list node_procs=""
    for node in "${NODES[@]}"; do
        daemons+=("slurmd:$node")
        if [[ -e "/run/netns/$NETNS_PREFIX$node" ]]; then node_procs+="$(netns_pids "$NETNS_PREFIX$node")"; fi
    done
    daemon_list="$(daemon_pids "${daemons[@]}")"   # our munged only: one we found running has no pid file here
    # Everything is thrown away at the next start, so all get SIGTERM at once:
    # the daemons exit within about 2.5 s together (one by one, 2 s each).
    # Job steps left in the nodes (slurmstepd, srun) ignore SIGTERM: after 3 s they get SIGKILL.
    # shellcheck disable=SC2086  # word splitting of the pid lists is wanted
    kill -TERM $daemon_list $node_procs 2>/dev/null || true
    terminate_pids "$node_procs" 3
    terminate_pids "$daemon_list" 15
    for node in "${daemons[@]}"; do
        # shellcheck disable=SC2086
        rm -f "$(pidfile_of ${node/:/ })"
    done
    teardown_network
    unlink_system_config
}

cmd_start() {
    [[ $EUID -eq 0 ]] || die "must run as root"
    take_lock
    export SLURM_CONF="$SLURM_CONF_FILE"
    ensure_lmod
    if is_up; then
        log "already up (logs: $LOG_DIR)"
        return 0
    fi
    refuse_foreign_sandbox
    local t0
    t0="$(now)"
    teardown   # leftovers of a half-started or crashed cluster
    ((${#NODES[@]} > 0)) || die "HPC_GRPO_SANDBOX_GPUS_PER_NODE=$GPUS_PER_NODE but this machine has $(gpu_devices | wc -l) GPU device(s)"
    prepare_dirs
    echo "$GPUS_PER_NODE" >"$SANDBOX_DIR/gpus_per_node"
    ensure_packages
    write_configs
    link_system_config

    # From here on, a failure shows the logs and tears down what was started.
    trap 'rc=$?; if ((rc != 0)); then log "start failed"; show_logs; log "tearing down"; teardown; fi' EXIT
    local phase
    for phase in setup_network start_munge start_mariadb start_slurmdbd start_slurmctld start_slurmds; do
        "$phase"
        log "$phase done at +$(elapsed_since "$t0")s"
    done
    local all_daemons=(munged mariadbd slurmdbd slurmctld) node
    for node in "${NODES[@]}"; do all_daemons+=("slurmd:$node"); done
    if ! wait_for "$START_TIMEOUT" "${#NODES[@]} idle nodes and sacct" "not_dead ${all_daemons[*]}" cluster_ready; then
        exit 1
    fi
    trap - EXIT
    local gpus=""
    ((GPUS_PER_NODE > 0)) && gpus=", $GPUS_PER_NODE GPU(s) each"
    log "up in $(elapsed_since "$t0")s: nodes ${NODES[*]} ($(node_addr 1)-$(node_addr ${#NODES[@]})$gpus), partitions debug (default), low, high; logs in $LOG_DIR"
}

cmd_stop() {
    [[ $EUID -eq 0 ]] || die "must run as root"
    take_lock
    refuse_foreign_sandbox
    teardown
    log "stopped (logs kept in $LOG_DIR)"
}

cmd_status() {
    local d node pid up=0
    export SLURM_CONF="$SLURM_CONF_FILE"
    is_up && up=1
    for d in munged mariadbd slurmdbd slurmctld; do
        if pid="$(running_pid "$d")"; then echo "$d: running (pid $pid)"; else echo "$d: not running"; fi
    done
    for node in "${NODES[@]}"; do
        if pid="$(running_pid slurmd "$node")"; then echo "slurmd $node: running (pid $pid)"; else echo "slurmd $node: not running"; fi
    done
    if ((up)); then
        timeout 10 sinfo || true
        echo "sandbox: up (logs: $LOG_DIR)"
        return 0
    fi
    echo "sandbox: down"
    return 1
}

known_node() {  # known_node NODE: refuse a name that is not one of ours
    local node
    for node in "${NODES[@]}"; do [[ "$node" == "${1:-}" ]] && return 0; done
    die "no node ${1:-(none)}; nodes: ${NODES[*]}"
}

# A node that dies for good (#60): slurmd and every job process on it SIGKILLed at once, so the
# controller hears nothing until SlurmdTimeout; the namespace and address stay, as a dead
# machine's switch port would answer nothing either (connections are refused at once).
cmd_node_down() {
    [[ $EUID -eq 0 ]] || die "must run as root"
    known_node "${1:-}"
    take_lock
    local pids
    pids="$(daemon_pids "slurmd:$1") $(netns_pids "$NETNS_PREFIX$1")"
    # shellcheck disable=SC2086  # word splitting of the pid list is wanted
    kill -KILL $pids 2>/dev/null || true
    log "node $1 killed (slurmd and $(wc -w <<<"$pids") process(es))"
}

# Back after node-down: slurmd again (the controller then ends what it still holds there) and,
# where SlurmdTimeout has already set the node DOWN, resumed; waits until it is idle.
cmd_node_up() {
    [[ $EUID -eq 0 ]] || die "must run as root"
    known_node "${1:-}"
    take_lock
    export SLURM_CONF="$SLURM_CONF_FILE"
    if ! running_pid slurmd "$1" >/dev/null; then
        # shellcheck disable=SC2016  # $1/$2 are expanded by the inner sh (as start_slurmds)
        launch "$LOG_DIR/slurmd.$1.out" \
            nsenter --net="/run/netns/$NETNS_PREFIX$1" unshare --uts -- \
            sh -c 'hostname "$1" && exec slurmd -f "$2" -N "$1"' sh "$1" "$SLURM_CONF_FILE"
    fi
    local i state
    for ((i = 0; i < START_TIMEOUT * 2; i++)); do
        state="$(sinfo -h -n "$1" -p debug -o '%T' 2>/dev/null || true)"
        case "$state" in
            idle|mixed|allocated) log "node $1 is back ($state)"; return 0 ;;
            down*|drain*|fail*) scontrol update NodeName="$1" State=RESUME 2>/dev/null || true ;;
        esac
        sleep 0.5
    done
    die "node $1 is not idle after ${START_TIMEOUT}s (state: ${state:-unknown})"
}

main() {
    case "${1:-}" in
        node-down) cmd_node_down "${2:-}" ;;
        node-up) cmd_node_up "${2:-}" ;;
        start) cmd_start ;;
        stop) cmd_stop ;;
        restart)
            cmd_stop
            cmd_start
            ;;
        status) cmd_status ;;
        *)
            echo "usage: $0 start|stop|restart|status|node-down NODE|node-up NODE" >&2
            exit 2
            ;;
    esac
}

main "$@"
