#!/usr/bin/env bash
# A one-node SLURM cluster on this machine from Debian bookworm packages, for the slurm tests.
#   bash scripts/slurm_local.sh start   install the packages if missing (as root), write
#     /etc/slurm/{slurm,slurmdbd}.conf sized from this machine, start munged, mariadbd, slurmdbd,
#     slurmctld, slurmd (directly: no systemd in containers/CI), wait for the node; twice is fine
#   bash scripts/slurm_local.sh stop    end the daemons that start recorded, by pid
#   bash scripts/slurm_local.sh status  each daemon and sinfo; exit 0 only if the node is up
# Logs, pid files, state, accounting database: $GRADLAB_SLURM_DIR (default /tmp/gradlab-slurm).
# slurmdbd is there because submitit learns a job's state from sacct only: without it a job
# killed before writing its result (out of memory, scancel) leaves a Hydra sweep waiting forever.
set -euo pipefail

DIR=${GRADLAB_SLURM_DIR:-/tmp/gradlab-slurm}
NODE=$(hostname -s)
MARK="# written by gradlab scripts/slurm_local.sh"
WAIT_S=${GRADLAB_SLURM_WAIT_S:-60}
export MYSQL_UNIX_PORT=$DIR/mysqld.sock   # slurmdbd's MariaDB client library reads it
DAEMONS=(munged mariadbd slurmdbd slurmctld slurmd)   # in start order

die() { echo "slurm_local: $*" >&2; exit 1; }
say() { echo "slurm_local: $*"; }

install_packages() {  # only when a binary is missing: apt-get needs root and the network
  local b
  for b in munged slurmctld slurmd slurmdbd sbatch sacct mariadbd mariadb-install-db; do
    command -v "$b" >/dev/null && continue
    [ "$(id -u)" = 0 ] || die "$b missing and not root: run as root to install the packages"
    say "installing slurm-wlm, munge, slurmdbd, MariaDB (apt-get, log: $DIR/apt-get.log)"
    # no recommends (34 plugin/-dev packages); MariaDB's core only (mariadb-server is a service)
    { apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        --no-install-recommends slurm-wlm munge slurmdbd mariadb-server-core mariadb-client-core
    } >"$DIR/apt-get.log" 2>&1 || die "apt-get failed: see $DIR/apt-get.log"
    return 0
  done
}

setup_dirs() {  # munged refuses to start unless its key and dirs belong to munge
  mkdir -p "$DIR/state" "$DIR/spool" /etc/slurm /etc/munge /run/munge /var/lib/munge /var/log/munge
  [ -s /etc/munge/munge.key ] || dd if=/dev/urandom of=/etc/munge/munge.key bs=1024 count=1 status=none
  chown munge:munge /etc/munge /etc/munge/munge.key /run/munge /var/lib/munge /var/log/munge
  chmod 0400 /etc/munge/munge.key; chmod 0700 /etc/munge
  # munged runs as munge and writes these two; DIR itself stays root's
  touch "$DIR/munged.log" "$DIR/munged.pid"; chown munge:munge "$DIR/munged.log" "$DIR/munged.pid"
  [ -d "$DIR/mysql/mysql" ] || mariadb-install-db --no-defaults --user=root --skip-test-db \
    --datadir="$DIR/mysql" >"$DIR/mariadb-install.log" 2>&1 || die "see $DIR/mariadb-install.log"
}

put() {  # file mode < content: replaced only when it differs; someone else's file is kept
  cat >"$1.new"; chmod "$2" "$1.new"
  if cmp -s "$1.new" "$1"; then rm -f "$1.new"; return 0; fi
  if [ -f "$1" ] && ! grep -qF "$MARK" "$1"; then cp -p "$1" "$1.bak-gradlab"; say "kept $1.bak-gradlab"; fi
  mv "$1.new" "$1"; say "wrote $1"
  if running slurmctld || running slurmdbd; then say "warning: $1 changed: stop, then start"; fi
}

write_conf() {  # sized from this machine, so a bigger request is refused as on a real cluster
  local cpus mem_mb
  cpus=$(nproc)   # memory: MemTotal less 1 GiB (or 10% if less) for the OS and the daemons
  mem_mb=$(awk '/^MemTotal/ {m=int($2/1024); d=(m/10<1024)?int(m/10):1024; print m-d}' /proc/meminfo)
  put /etc/slurm/slurmdbd.conf 600 <<EOF
$MARK
AuthType=auth/munge
DbdHost=localhost
SlurmUser=root
StorageType=accounting_storage/mysql
StorageUser=root
LogFile=$DIR/slurmdbd.log
PidFile=$DIR/slurmdbd.pid
EOF
  put /etc/slurm/slurm.conf 644 <<EOF
$MARK
ClusterName=gradlab
SlurmctldHost=$NODE(127.0.0.1)
SlurmUser=root
AuthType=auth/munge
# a requeued job may start again cred_expire (default 120 s) later, at the scheduler's next
# pass (default every 60 s; backfill 30 s): here it restarts 11-16 s after scontrol requeue
AuthInfo=cred_expire=10
SchedulerParameters=sched_interval=5,bf_interval=5
# no cgroups in a container: track processes by /proc, bind nothing
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/cons_tres
SelectTypeParameters=CR_Core_Memory
DefMemPerCPU=1024
# refuse at sbatch time what can never run (-c 3 on 2 CPUs) instead of PENDING forever
EnforcePartLimits=ALL
# kill a job over its --mem while it runs (polling /proc), as cgroups would
JobAcctGatherType=jobacct_gather/linux
JobAcctGatherParams=OverMemoryKill
JobAcctGatherFrequency=5
AccountingStorageType=accounting_storage/slurmdbd
JobRequeue=1
ReturnToService=2
MailProg=/bin/true
StateSaveLocation=$DIR/state
SlurmdSpoolDir=$DIR/spool
SlurmctldPidFile=$DIR/slurmctld.pid
SlurmdPidFile=$DIR/slurmd.pid
SlurmctldLogFile=$DIR/slurmctld.log
SlurmdLogFile=$DIR/slurmd.log
# trust these numbers: never drain the node over a hardware mismatch
SlurmdParameters=config_overrides
NodeName=$NODE NodeAddr=127.0.0.1 CPUs=$cpus RealMemory=$mem_mb State=UNKNOWN
PartitionName=debug Nodes=$NODE Default=YES MaxTime=INFINITE State=UP
EOF
}

pid_of() { cat "$DIR/$1.pid" 2>/dev/null || true; }

running() {  # our pid file names a live process of that name (a reused pid is not ours)
  local pid; pid=$(pid_of "$1")
  [ -n "$pid" ] && [ "$(cat "/proc/$pid/comm" 2>/dev/null)" = "$1" ]
}

start_daemon() {  # name command...: each daemon writes its own pid file
  local name=$1; shift
  if running "$name"; then say "$name already running (pid $(pid_of "$name"))"; return 0; fi
  "$@" || die "$name failed to start: see $DIR/$name.log"
  for _ in $(seq 100); do running "$name" && break; sleep 0.1; done
  running "$name" || die "$name did not start: see $DIR/$name.log"
  say "started $name (pid $(pid_of "$name"))"
}

mariadbd_bg() {  # it does not fork: setsid detaches it; no TCP port to clash; InnoDB sizes
  # are the ones slurmdbd checks for
  setsid mariadbd --no-defaults --user=root --datadir="$DIR/mysql" --socket="$MYSQL_UNIX_PORT" \
    --skip-networking --innodb-buffer-pool-size=512M --innodb-lock-wait-timeout=900 \
    --pid-file="$DIR/mariadbd.pid" --log-error="$DIR/mariadbd.log" </dev/null >/dev/null 2>&1 &
}

wait_for() {  # daemon probe...: bounded in time; fails at once if the daemon exited meanwhile
  local name=$1 end=$((SECONDS + WAIT_S)); shift
  until "$@" >/dev/null 2>&1; do
    running "$name" || die "$name exited: $(tail -n 1 "$DIR/$name.log")"
    [ "$SECONDS" -lt "$end" ] || die "$name not ready after ${WAIT_S}s: see $DIR/$name.log"
    sleep 0.2
  done
}

# the probes: a client whose server is down retries for about 10 s, hence the timeouts
munge_ok() { munge -n </dev/null 2>/dev/null | timeout 5 unmunge >/dev/null 2>&1; }
db_ok() { timeout 5 mariadb --no-defaults -u root -e 'select 1'; }
registered() { timeout 5 sacctmgr -n -P list cluster format=cluster | grep -qx gradlab; }
node_state() { timeout 10 sinfo -h -N -n "$NODE" -o %T 2>/dev/null; }
node_up() { [[ "$(node_state)" =~ ^(idle|mixed|allocated|completing) ]]; }

start() {
  mkdir -p "$DIR"
  install_packages; setup_dirs; write_conf
  if ! running munged && munge_ok; then
    say "a munged not started by this script answers: using it"   # a second one would fail
  else
    start_daemon munged runuser -u munge -- munged --log-file="$DIR/munged.log" --pid-file="$DIR/munged.pid"
  fi
  start_daemon mariadbd mariadbd_bg
  wait_for mariadbd db_ok
  start_daemon slurmdbd slurmdbd
  wait_for slurmdbd timeout 5 sacctmgr -n list cluster
  start_daemon slurmctld slurmctld
  wait_for slurmctld timeout 5 sinfo -h
  wait_for slurmctld registered   # slurmctld registers the cluster; until then sacct is empty
  start_daemon slurmd slurmd
  wait_for slurmd node_up
  say "up: partition debug, node $NODE $(node_state); logs, pids, state in $DIR"
}

stop() {  # reverse order: munged last, since the others use it while they shut down
  local i name pid any=0
  for ((i = ${#DAEMONS[@]} - 1; i >= 0; i--)); do
    name=${DAEMONS[i]}; running "$name" || continue
    pid=$(pid_of "$name"); kill "$pid"; any=1
    for _ in $(seq 150); do [ -d "/proc/$pid" ] || break; sleep 0.1; done
    # slurmd ignores SIGTERM while it retries to reach a dead slurmctld
    if [ -d "/proc/$pid" ]; then kill -KILL "$pid"; say "$name (pid $pid) ignored SIGTERM for 15 s: SIGKILL"; fi
    rm -f "$DIR/$name.pid"; say "stopped $name (pid $pid)"
  done
  [ "$any" = 1 ] || say "nothing to stop: no daemon started by this script is running"
  # jobs outlive slurmd by design (it reattaches to them on start): say so, end none
  if pgrep -x slurmstepd >/dev/null; then say "note: job steps still run (slurmstepd): scancel before stop"; fi
}

status() {
  local name rc=0
  for name in "${DAEMONS[@]}"; do
    if running "$name"; then say "$name running (pid $(pid_of "$name"))"
    elif [ "$name" = munged ] && munge_ok; then say "munged running (not started by this script)"
    else say "$name not running"; rc=1; fi
  done
  if timeout 10 sinfo 2>&1; then node_up || rc=1; else rc=1; fi
  say "logs in $DIR"
  return "$rc"
}

case "${1:-}" in
  start | stop | status) "$1" ;;
  *) echo "usage: bash $0 start|stop|status" >&2; exit 2 ;;
esac
