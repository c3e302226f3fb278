#!/usr/bin/env bash
# Make the Debian base of the image and import it into buildah's storage;
# print its reference. Base images cannot be pulled on the machines that build
# this image, so the base is Debian's own packages: a bookworm minbase (its
# python3 is 3.11) with python3 and ca-certificates, made by mmdebstrap.
#
# Both steps are cached, keyed on everything that decides the tarball's
# content (suite, variant, packages, options): the tarball under
# $IMAGE_CACHE (default .image-cache/, gitignored) and the imported image as
# localhost/llmkube-stager-base:<key>. Delete either to rebuild it (for
# example to pick up Debian security updates: docs/image.md).
set -euo pipefail

suite=bookworm
packages=python3,ca-certificates
cache_dir=${IMAGE_CACHE:-.image-cache}
opts=(
  --variant=minbase
  --include="$packages"
  # Merged /usr through the debootstrap method: the usrmerge package would pull
  # in perl (~50 MB) only to convert a tree that is created merged anyway.
  --hook-dir=/usr/share/mmdebstrap/hooks/merged-usr
  --dpkgopt='path-exclude=/usr/share/man/*'
  --dpkgopt='path-exclude=/usr/share/info/*'
  --dpkgopt='path-exclude=/usr/share/locale/*'
  --dpkgopt='path-include=/usr/share/locale/locale.alias'
  --dpkgopt='path-exclude=/usr/share/doc/*'
  --dpkgopt='path-include=/usr/share/doc/*/copyright'
  # The host's resolver and name would be baked in; runtimes mount their own.
  --customize-hook='rm -f "$1/etc/resolv.conf" "$1/etc/hostname"'
)
key=$(printf '%s\n' "$suite" "${opts[@]}" | sha256sum | cut -c1-16)
ref=localhost/llmkube-stager-base:$key
tarball=$cache_dir/base-$key.tar

if buildah inspect --type image "$ref" >/dev/null 2>&1; then
  echo "$ref"
  exit 0
fi

if [ ! -s "$tarball" ]; then
  mkdir -p "$cache_dir"
  echo "image/base.sh: mmdebstrap $suite ($packages) -> $tarball" >&2
  # Device nodes stay out of the image: every runtime mounts its own /dev.
  if ! mmdebstrap --format=tar "${opts[@]}" "$suite" - 2>"$tarball.log" \
    | mmtarfilter --path-exclude='/dev/*' >"$tarball.partial"; then
    cat "$tarball.log" >&2
    exit 1
  fi
  mv "$tarball.partial" "$tarball"
fi

echo "image/base.sh: importing $tarball as $ref" >&2
ctr=$(buildah from scratch)
trap 'buildah rm "$ctr" >/dev/null 2>&1 || true' EXIT
buildah add --quiet "$ctr" "$tarball" / >/dev/null
buildah config \
  --env LANG=C.UTF-8 \
  --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
  --cmd python3 \
  --label org.opencontainers.image.description="Debian $suite minbase with $packages (image/base.sh)" \
  "$ctr"
buildah commit --quiet --rm "$ctr" "$ref" >/dev/null
trap - EXIT
echo "$ref"
