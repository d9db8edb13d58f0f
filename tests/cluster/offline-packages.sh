#!/usr/bin/env bash
# The sandbox cluster's Debian packages, carried to a machine without a package registry
# (the lent GPU machine), and installed there without overwriting anything it already has.
#
#   bash tests/cluster/offline-packages.sh fetch DEST [MAX_MIB]   # here (Debian 12, apt works)
#   bash tests/cluster/offline-packages.sh install DIR...          # there, as root
#   (HPC_GRPO_INSTALL_ROOT=DIR installs under DIR instead of /: what the unit test does)
#
# fetch: the Slurm, munge, MariaDB and iproute2 packages sandbox.sh needs, plus the packages of
# every shared library their programs and plugins load (found with ldd on this machine, where
# sandbox.sh installed them), minus the C runtime and the libraries every Linux image has.
# The .deb files are split into DEST/1, DEST/2, ... of at most MAX_MIB each (default 30), so that
# each folder can travel with one device call.
#
# install: unpacks every .deb into a staging tree, folds /lib, /bin and /sbin into /usr when the
# target has a merged /usr, then copies only files that do not exist yet: a library the target
# already has (usually a newer build of the same soname) is kept. Creates the munge and mysql
# users, links the NAME-wlm programs as NAME (Debian's alternatives), runs ldconfig. No maintainer
# scripts run: sandbox.sh starts every daemon itself.
set -euo pipefail

readonly PACKAGES=(slurmd slurmctld slurm-client slurm-wlm-basic-plugins slurmdbd slurm-wlm-mysql-plugin
    munge libmunge2 mariadb-server mariadb-server-core mariadb-client-core mariadb-common libmariadb3 iproute2)
# Present (in a newer build) on every glibc image; carrying an older one could only do harm.
readonly SKIP='^(libc6|libstdc\+\+6|libgcc-s1|libssl3|libsystemd0|libudev1)$'

log() { printf 'offline-packages: %s\n' "$*" >&2; }
die() { log "ERROR: $*"; exit 1; }

library_packages() {  # packages owning the shared libraries that PACKAGES' ELF files load
    local pkg file lib
    for pkg in "${PACKAGES[@]}"; do dpkg -L "$pkg"; done | sort -u | while read -r file; do
        [[ -f "$file" && ! -L "$file" ]] || continue
        [[ "$(head -c4 "$file" 2>/dev/null | tr -d '\0')" == $'\x7fELF' ]] || continue
        ldd "$file" 2>/dev/null | awk '/=> \// { print $3 }'
    done | sort -u | while read -r lib; do
        dpkg -S "$(readlink -f "$lib")" 2>/dev/null || dpkg -S "$lib" 2>/dev/null || true
    done | cut -d: -f1 | sort -u
}

cmd_fetch() {
    local dest=${1:?usage: fetch DEST [MAX_MIB]} max_mib=${2:-30}
    local pkg
    for pkg in "${PACKAGES[@]}"; do
        dpkg -s "$pkg" >/dev/null 2>&1 || die "$pkg is not installed here: run 'bash tests/cluster/sandbox.sh start' once first"
    done
    local all
    all="$( (printf '%s\n' "${PACKAGES[@]}"; library_packages) | grep -Ev "$SKIP" | sort -u)"
    local tmp
    tmp="$(mktemp -d)"
    # shellcheck disable=SC2086  # one package name per word
    (cd "$tmp" && apt-get download $all >/dev/null) || die "apt-get download failed"
    rm -rf "$dest"
    local part=1 used=0 size deb
    mkdir -p "$dest/$part"
    # Largest first, each into the first folder with room (first-fit decreasing).
    while read -r size deb; do
        if ((used + size > max_mib * 1048576 && used > 0)); then
            part=$((part + 1)) used=0
            mkdir -p "$dest/$part"
        fi
        mv "$tmp/$deb" "$dest/$part/"
        used=$((used + size))
    done < <(cd "$tmp" && stat -c '%s %n' ./*.deb | sed 's#\./##' | sort -rn)
    rmdir "$tmp"
    log "$(echo "$all" | wc -l) packages in $part folder(s) under $dest: $(du -sh "$dest" | cut -f1)"
}

cmd_install() {
    (($# > 0)) || die "usage: install DIR..."
    local root="${HPC_GRPO_INSTALL_ROOT:-}"   # empty: the real /
    [[ -n "$root" || $EUID -eq 0 ]] || die "must run as root"
    command -v dpkg-deb >/dev/null || die "dpkg-deb is missing: cannot unpack .deb files here"
    local stage deb dir
    stage="$(mktemp -d)"
    for dir in "$@"; do
        for deb in "$dir"/*.deb; do dpkg-deb -x "$deb" "$stage"; done
    done
    # Merged /usr (Ubuntu 24.04, Debian 12 images): /lib is a link to usr/lib, and copying a
    # staged lib/ directory over it would fail. Fold the staged tree the same way.
    for dir in lib lib64 bin sbin; do
        if [[ -L "$root/$dir" && -d "$stage/$dir" && ! -L "$stage/$dir" ]]; then
            mkdir -p "$stage/usr/$dir"
            cp -a "$stage/$dir/." "$stage/usr/$dir/"
            rm -rf "${stage:?}/$dir"
        fi
    done
    local added
    added="$(cd "$stage" && find . \( -type f -o -type l \) | while read -r f; do
        [[ -e "$root/$f" || -L "$root/$f" ]] && continue
        mkdir -p "$root/$(dirname "$f")"
        cp -a "$f" "$root/$f"
        echo "$f"
    done | wc -l)"
    rm -rf "$stage"
    # What Debian's maintainer scripts would have done with update-alternatives: slurmd,
    # slurmctld and slurmstepd are shipped as NAME-wlm (slurmd runs SBINDIR/slurmstepd itself).
    local wlm
    for wlm in "$root"/usr/sbin/*-wlm; do
        [[ -e "$wlm" && ! -e "${wlm%-wlm}" ]] && ln -s "$(basename "$wlm")" "${wlm%-wlm}"
    done
    if [[ -n "$root" ]]; then
        log "installed $added files under $root (files already present were kept)"
        return 0
    fi
    getent group munge >/dev/null || groupadd --system munge
    getent passwd munge >/dev/null || useradd --system --gid munge --home-dir /nonexistent --shell /usr/sbin/nologin munge
    getent group mysql >/dev/null || groupadd --system mysql
    getent passwd mysql >/dev/null || useradd --system --gid mysql --home-dir /nonexistent --shell /usr/sbin/nologin mysql
    mkdir -p /etc/slurm
    ldconfig
    log "installed $added files (files already present were kept)"
}

case "${1:-}" in
    fetch) shift; cmd_fetch "$@" ;;
    install) shift; cmd_install "$@" ;;
    *) echo "usage: $0 fetch DEST [MAX_MIB] | install DIR..." >&2; exit 2 ;;
esac
