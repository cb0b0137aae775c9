#!/usr/bin/env bash
# A local base image for kubeflow/Dockerfile where no image registry is reachable (so neither
# `python:3.10-slim` nor any other registry image can be pulled): Debian bookworm from Debian's
# own packages (debootstrap, minbase) with a Python 3.10 copied in, imported as an image.
#
#   kubeflow/build_base_image.sh [TAG]      # default tfx-dynamic-inputs-base:bookworm-py3.10
#   podman build --build-arg BASE_IMAGE=TAG -f kubeflow/Dockerfile -t tfx-dynamic-inputs .
#
# It stands in for `python:3.10-slim`: `python`/`python3`/`python3.10` on PATH (/usr/local/bin)
# and apt against the Debian mirror (the builder stage installs g++ with it).
#
# The Python is an existing CPython 3.10 build for the same Debian release (PYTHON_PREFIX,
# default pyenv's /root/.pyenv/versions/3.10.13), copied to the same path inside: its binaries
# find libpython through a RUNPATH naming that prefix, so it cannot move. Its site-packages are
# left behind (pip and setuptools come from ensurepip in every venv; the host's .pth hooks are
# the host's), and so are the test suite and tkinter (no X libraries in the image).
#
# Idempotent: an existing TAG is kept (`podman rmi TAG` to rebuild). Needs root, debootstrap,
# podman and the Debian mirror (DEBIAN_MIRROR).
set -euo pipefail

TAG=${1:-tfx-dynamic-inputs-base:bookworm-py3.10}
PYTHON_PREFIX=${PYTHON_PREFIX:-/root/.pyenv/versions/3.10.13}
DEBIAN_MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
SUITE=bookworm
# The shared libraries the Python build's extension modules link (ldd of lib-dynload/*.so,
# without tkinter's), and the CA bundle for HTTPS from inside the image.
PACKAGES=ca-certificates,libssl3,zlib1g,libffi8,libsqlite3-0,libbz2-1.0,liblzma5,libreadline8,libncursesw6,libtinfo6,libuuid1,libgdbm6,libexpat1,libnsl2,libtirpc3,libcrypt1

if podman image exists "$TAG"; then
  echo "$TAG exists (podman rmi $TAG to rebuild)"
  exit 0
fi
version=$("$PYTHON_PREFIX/bin/python3.10" -c 'import sys; print("%d.%d" % sys.version_info[:2])')
if [ "$version" != 3.10 ]; then
  echo "error: $PYTHON_PREFIX/bin/python3.10 is Python $version, not 3.10" >&2
  exit 1
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$root" "$DEBIAN_MIRROR"

mkdir -p "$root$PYTHON_PREFIX"
tar -C "$PYTHON_PREFIX" -c \
  --exclude="./lib/python3.10/site-packages/*" \
  --exclude="./lib/python3.10/test" \
  --exclude="./lib/python3.10/tkinter" \
  --exclude="./lib/python3.10/lib-dynload/_tkinter.*" \
  . | tar -C "$root$PYTHON_PREFIX" -x
# The runtime stage runs as an unprivileged user, who must reach the interpreter under /root.
chmod 755 "$root/root"
for name in python python3 python3.10; do
  ln -sf "$PYTHON_PREFIX/bin/python3.10" "$root/usr/local/bin/$name"
done
chroot "$root" /usr/local/bin/python3.10 -c 'import ssl, sqlite3, ctypes, lzma, bz2, zlib, pyexpat, uuid, readline'
# Smaller: the package lists come back with the builder's `apt-get update`.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb

tar -C "$root" -c . | podman import \
  --change 'ENV PATH=/usr/local/bin:/usr/local/sbin:/usr/sbin:/usr/bin:/sbin:/bin' \
  --change 'ENV LANG=C.UTF-8' \
  --change 'CMD ["python3"]' \
  - "$TAG"
echo "built $TAG"
