#!/bin/bash
# `apptainer` for a machine whose distribution does not package it: runs the real
# Apptainer of a Debian root file system (made by `cargo xtask setup`, see
# xtask/src/apptainer.rs) in a private mount namespace whose root is that file
# system, with the host's data seen at the same paths. Every argument goes to
# Apptainer unchanged, so `apptainer build`, `apptainer exec`, `srun ... apptainer
# exec` and the generated batch scripts behave as with a packaged Apptainer.
#
# Layout (found from this file's real location): DIR/bin/apptainer (this file),
# DIR/rootfs (the Debian tree), DIR/mnt (an empty directory the new root is
# assembled on, in the private namespace only). HPC_APPTAINER_ROOTFS overrides DIR/rootfs.
#
# The new root, an overlay of the Debian tree and a tmpfs:
#   /usr /etc /var /lib* /bin /sbin ...   the Debian tree's (Apptainer, its tools and
#                                          its configuration)
#   /dev /proc /sys /tmp /run /home /root /opt /srv /mnt /media and every other
#   top-level host folder (/work, /scratch, ...)       the host's, at the same paths
#   /var/tmp /var/spool (slurmd's spool, PMIx rendezvous files)   the host's
#   /etc/hosts /etc/resolv.conf /etc/passwd /etc/group /etc/hostname   the host's
#   /.host                                  the host's whole root
# Bind sources under the Debian tree's folders (/usr, /etc, /var, /lib, ...) in
# --bind/-B and APPTAINER_BIND mean the host's files there (the bind model binds the
# host's MPI from /usr/lib/...): they are rewritten to /.host/<real path>:<path>, the
# real path resolved in the host's view (links into /etc/alternatives).
# Needs root (mount namespaces); Apptainer itself runs as it would on the host.
set -euo pipefail

self=$(readlink -f "${BASH_SOURCE[0]}")
top=$(dirname "$(dirname "$self")")
rootfs=${HPC_APPTAINER_ROOTFS:-$top/rootfs}

die() { echo "apptainer (hpc-rs wrapper): $*" >&2; exit 255; }

if [ "${1:-}" != __hpc_enter__ ]; then
    [ -x "$rootfs/usr/bin/apptainer" ] \
        || die "no Apptainer in $rootfs (run \`cargo xtask setup\` with HPC_TEST_CONTAINERS=1)"
    [ "$(id -u)" = 0 ] || die "needs root (it enters a mount namespace); run it as root"
    exec unshare --mount --propagation private -- "$self" __hpc_enter__ "$@"
fi
shift
cwd=$PWD

# The folders the Debian tree provides; everything else at the top comes from the host.
system_dir() {
    case "$1" in usr|etc|var|lib|lib32|lib64|libx32|bin|sbin|boot) return 0 ;; esac
    return 1
}

# A bind spec src[:dst[:opts]] whose source lies in the Debian tree's folders is
# rewritten to the host's file of that name.
rewrite_spec() {
    local spec=$1 src rest top real
    src=${spec%%:*}
    rest=""
    [ "$src" != "$spec" ] && rest=${spec#*:}
    top=${src#/}
    top=${top%%/*}
    if [[ "$src" == /* ]] && system_dir "$top" && [[ "$src" != /.host/* ]]; then
        # Resolved here, in the host's view: a link such as
        # libpsm_infinipath.so.1 -> /etc/alternatives/... points into the host's /etc.
        real=$(readlink -f -- "$src" 2>/dev/null || true)
        [ -n "$real" ] || real=$src
        if [ -n "$rest" ]; then
            printf '/.host%s:%s' "$real" "$rest"
        else
            printf '/.host%s:%s' "$real" "$src"
        fi
    else
        printf '%s' "$spec"
    fi
}
rewrite_list() {
    local list=$1 out="" spec
    local IFS=,
    for spec in $list; do
        [ -n "$spec" ] || continue
        out+="${out:+,}$(rewrite_spec "$spec")"
    done
    printf '%s' "$out"
}

args=()
while [ $# -gt 0 ]; do
    case "$1" in
        -B|--bind)
            [ $# -ge 2 ] || die "$1 needs a value"
            args+=("$1" "$(rewrite_list "$2")"); shift 2 ;;
        --bind=*) args+=("--bind=$(rewrite_list "${1#--bind=}")"); shift ;;
        *) args+=("$1"); shift ;;
    esac
done
for v in APPTAINER_BIND APPTAINER_BINDPATH SINGULARITY_BIND SINGULARITY_BINDPATH; do
    if [ -n "${!v:-}" ]; then export "$v=$(rewrite_list "${!v}")"; fi
done

mnt=$top/mnt
[ -d "$mnt" ] || die "$mnt is missing"
# One overlay mount as the new root (the tree below, a tmpfs above: the cached tree
# stays as it was made, and mount points can be made anywhere). It must be a single
# mount: Apptainer finds its own installation from /proc/self/exe, which a mount of
# the tree's /usr alone would shorten to /lib/... once Apptainer enters its own
# mount namespace.
mount -t tmpfs -o mode=0755,size=64m hpc-apptainer-upper "$mnt"
mkdir "$mnt/upper" "$mnt/work" "$mnt/root"
mount -t overlay -o "lowerdir=$rootfs,upperdir=$mnt/upper,workdir=$mnt/work" hpc-apptainer-root "$mnt/root"
new=$mnt/root
for e in /* /.[!.]*; do
    [ -d "$e" ] && [ ! -L "$e" ] || continue
    n=${e##*/}
    system_dir "$n" && continue
    mkdir -p "$new/$n"
    mount --rbind "$e" "$new/$n"
done
for d in /var/tmp /var/spool; do
    if [ -d "$d" ]; then mkdir -p "$new$d"; mount --rbind "$d" "$new$d"; fi
done
for f in /etc/hosts /etc/resolv.conf /etc/passwd /etc/group /etc/hostname; do
    if [ -e "$f" ]; then
        rm -f "$new$f"
        : > "$new$f"
        mount --bind "$(readlink -f "$f")" "$new$f"
    fi
done
mkdir "$new/.host"
mount --rbind / "$new/.host"
mkdir "$new/.old"
cd "$new"
pivot_root . .old
umount -l /.old
rmdir /.old
cd "$cwd" 2>/dev/null || cd "/.host$cwd" 2>/dev/null || cd /
unset OLDPWD
exec /usr/bin/apptainer "${args[@]}"
