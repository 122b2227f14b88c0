#!/bin/sh
# Entry point of a test-cluster container: start munge, then the Slurm daemon of the
# node's role in the foreground. ROLE is `ctl` or `compute`.
set -eu
role=$1
install -d -o munge -g munge -m 0700 /run/munge /var/lib/munge /var/log/munge
install -o munge -g munge -m 0400 /cluster/munge.key /etc/munge/munge.key
runuser -u munge -- /usr/sbin/munged --force
mkdir -p /shared/log /var/spool/slurmctld /var/spool/slurmd
case "$role" in
    ctl) exec slurmctld -D -f /cluster/slurm.conf ;;
    compute) exec slurmd -D -f /cluster/slurm.conf -N "$(hostname)" ;;
    *) echo "unknown role $role" >&2; exit 64 ;;
esac
