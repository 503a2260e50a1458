#!/usr/bin/env bash
# Stand-in base images for agentkit's Docker tests, built offline.
#
# THESE ARE STAND-INS, NOT THE REAL IMAGES USERS PULL. CI reaches Debian's and
# PyPI's package registries but no image registry, so the images the test
# Dockerfiles build on (FROM debian:bookworm-slim, FROM python:3.11-slim) are
# made here: a Debian bookworm root from `mmdebstrap --variant=minbase` (plus
# python3 and pip), imported with `docker import` and tagged with those names.
# The root carries this machine's package settings (its apt sources, the
# network settings of its apt configuration, its CA bundle, pip pointed at
# that bundle), so `RUN apt-get install` and `RUN pip install` work in builds.
#
# When Podman is installed, the same images are loaded into its store (which
# Buildah shares).
#
# Usage: .ci/base-images.sh [EXTRA_TAG...]   (as root; docker and mmdebstrap installed)
# An image already made by this version of the script is kept (label
# org.agentkit.stand-in); pass --force to make it again.
set -euo pipefail

TAGS=(debian:bookworm-slim python:3.11-slim)
FORCE=0
for arg in "$@"; do
  if [ "$arg" = --force ]; then FORCE=1; else TAGS+=("$arg"); fi
done
PACKAGES=ca-certificates,python3,python3-pip,python3-venv,python-is-python3
VERSION=$( (cat "$0"; for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list \
  /etc/apt/apt.conf.d/* /etc/ssl/certs/ca-certificates.crt; do [ -f "$f" ] && cat "$f"; done) \
  | sha256sum | cut -c1-16)

have_current() {
  [ "$(docker image inspect -f '{{index .Config.Labels "org.agentkit.stand-in"}}' "$1" 2>/dev/null)" = "$VERSION" ]
}

# Podman and Buildah (one image store, containers-storage) get the same images when
# installed: the local sandbox can make task images with either.
sync_podman() {
  command -v podman >/dev/null || return 0
  local stale=()
  for tag in "${TAGS[@]}"; do
    [ "$(podman image inspect -f '{{index .Labels "org.agentkit.stand-in"}}' "$tag" 2>/dev/null)" = "$VERSION" ] \
      || stale+=("$tag")
  done
  [ ${#stale[@]} -eq 0 ] && return 0
  docker save "${stale[@]}" | podman load --quiet >/dev/null
  echo "base-images: loaded ${stale[*]} into podman's image store"
}

missing=()
for tag in "${TAGS[@]}"; do
  if [ "$FORCE" = 1 ] || ! have_current "$tag"; then missing+=("$tag"); fi
done
if [ ${#missing[@]} -eq 0 ]; then
  echo "base-images: ${TAGS[*]} are current (stand-in $VERSION)"
  sync_podman
  exit 0
fi
if [ "$FORCE" = 0 ]; then
  # One root serves every name: tag the missing names from a current stand-in.
  for tag in "${TAGS[@]}"; do
    if have_current "$tag"; then
      for m in "${missing[@]}"; do docker tag "$tag" "$m"; done
      echo "base-images: tagged ${missing[*]} from $tag (stand-in $VERSION)"
      sync_podman
      exit 0
    fi
  done
fi

work=$(mktemp -d /tmp/agentkit-base-images.XXXXXX)
trap 'rm -rf "$work"' EXIT
mkdir -p "$work/apt.conf.d" "$work/sources"
for f in /etc/apt/sources.list.d/*.sources /etc/apt/sources.list.d/*.list; do
  [ -f "$f" ] && cp "$f" "$work/sources/"
done
for f in /etc/apt/apt.conf.d/*; do
  # network and index settings only: hooks (Invoke) name programs the root does not have
  [ -f "$f" ] && ! grep -q Invoke "$f" && cp "$f" "$work/apt.conf.d/"
done
sources=("$work"/sources/*)
if [ ! -e "${sources[0]}" ]; then sources=(http://deb.debian.org/debian); fi

cat > "$work/customize.sh" <<CUSTOMIZE
#!/bin/sh
set -e
root="\$1"
cp "$work"/apt.conf.d/* "\$root/etc/apt/apt.conf.d/" 2>/dev/null || true
# (the sources given to mmdebstrap are already in sources.list.d)
if [ -f /etc/ssl/certs/ca-certificates.crt ]; then
  cp /etc/ssl/certs/ca-certificates.crt "\$root/etc/ssl/certs/ca-certificates.crt"
fi
printf '[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n' > "\$root/etc/pip.conf"
# pip installs into the system Python, as in the python images
rm -f "\$root"/usr/lib/python3*/EXTERNALLY-MANAGED
rm -rf "\$root"/var/lib/apt/lists/* "\$root"/var/cache/apt/*.bin
CUSTOMIZE
chmod +x "$work/customize.sh"

echo "base-images: making ${missing[*]} (mmdebstrap minbase bookworm + $PACKAGES)"
mmdebstrap --quiet --variant=minbase --include="$PACKAGES" \
  --customize-hook="$work/customize.sh \"\$1\"" \
  bookworm "$work/root.tar" "${sources[@]}"
first=${missing[0]}
docker import \
  --change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change "LABEL org.agentkit.stand-in=$VERSION" \
  --change 'CMD ["bash"]' \
  "$work/root.tar" "$first" >/dev/null
for tag in "${missing[@]:1}"; do docker tag "$first" "$tag"; done
echo "base-images: tagged ${missing[*]} (stand-in $VERSION)"
sync_podman
