#!/bin/sh
# setup.sh: makes this checkout ready to run: installs the Debian 12 packages
# that are missing (nothing when all are there), generates ./configure when it
# is missing or older than configure.ac / a *.am file, configures into ./build
# (out of tree) once, and builds with `make -j2`. Safe to run again: a ready
# checkout does no apt work and no configure, and make rebuilds what changed.
# Works as root with no stdin; as another user it uses sudo for apt-get.
# Environment: CONFIGURE_FLAGS (e.g. "--enable-sanitizers") for a first configure,
# MAKE_JOBS (default 2).
set -eu
cd "$(dirname "$0")/.."

packages="openmpi-bin libopenmpi-dev libhdf5-openmpi-dev hdf5-tools check libopenblas-dev zlib1g-dev
autoconf automake libtool libtool-bin pkg-config gnuplot-nox gcc make"

missing=
for p in $packages; do
    status=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    case $status in *" installed") ;; *) missing="$missing $p" ;; esac
done
if [ -n "$missing" ]; then
    echo "setup: installing$missing"
    sudo=
    if [ "$(id -u)" != 0 ]; then
        command -v sudo >/dev/null 2>&1 || { echo "setup: need root (or sudo) to install:$missing" >&2; exit 1; }
        sudo="sudo -n"
    fi
    export DEBIAN_FRONTEND=noninteractive
    $sudo apt-get update -q </dev/null
    # shellcheck disable=SC2086
    $sudo apt-get install -y -q --no-install-recommends $missing </dev/null
else
    echo "setup: packages present"
fi

# ./configure: (re)generate when missing or older than its inputs
regen=
if [ ! -x configure ] || [ ! -f Makefile.in ]; then
    regen="configure is missing"
elif [ -n "$(find . -path ./build -prune -o \( -name configure.ac -o -name '*.am' \) -newer configure -print 2>/dev/null | head -n 1)" ]; then
    regen="configure is older than configure.ac or a .am file"
fi
if [ -n "$regen" ]; then
    echo "setup: autoreconf -fi ($regen)"
    autoreconf -fi </dev/null
fi

if [ -f config.status ]; then
    echo "setup: this source tree was configured in place; run 'make distclean' here first" >&2
    exit 1
fi
mkdir -p build
if [ ! -f build/config.status ]; then
    echo "setup: configuring into build/"
    # shellcheck disable=SC2086
    (cd build && ../configure ${CONFIGURE_FLAGS:-} </dev/null)
fi
echo "setup: make -j${MAKE_JOBS:-2} in build/"
make -C build -j"${MAKE_JOBS:-2}" </dev/null
