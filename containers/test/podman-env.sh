# Sourced by the container test scripts: points Podman at its own containers.conf and
# storage.conf under a work directory, with the settings this kind of machine needs
# (runc rather than crun, cgroupfs, no network namespace by default, ulimits that do
# not need CAP_SYS_RESOURCE, file event log).
#
#   . containers/test/podman-env.sh DIR [DRIVER]     # DRIVER: vfs (default) or overlay
#
# Exports CONTAINERS_CONF and CONTAINERS_STORAGE_CONF; storage lives in DIR/graph and
# DIR/run, so tests never touch the machine's own Podman storage.
hpc_podman_env() {
    local pdir=$1 driver=${2:-vfs}
    mkdir -p "$pdir/graph" "$pdir/run"
    cat > "$pdir/containers.conf" <<CONF
[containers]
default_ulimits = ["nofile=20000:20000", "nproc=4096:4096"]
netns = "none"
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
    cat > "$pdir/storage.conf" <<CONF
[storage]
driver = "$driver"
graphroot = "$pdir/graph"
runroot = "$pdir/run"
CONF
    export CONTAINERS_CONF=$pdir/containers.conf
    export CONTAINERS_STORAGE_CONF=$pdir/storage.conf
}
hpc_podman_env "$@"
