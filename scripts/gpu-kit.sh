#!/usr/bin/env bash
# gpu-kit.sh: builds the GPU check kit here, for a GPU machine that has only the
# CUDA toolkit and driver, cuBLAS and PyTorch (with its NCCL): no Open MPI, HDF5,
# OpenBLAS, Check, compiler, package manager or network.
#
#   scripts/gpu-kit.sh             build the kit into gpu-kit/ (git-ignored)
#   scripts/gpu-kit.sh --selftest  build it if needed, then prove it needs no
#                                  Debian package: in a bare Debian root (a
#                                  debootstrap --variant=minbase chroot, cached
#                                  in /var/cache/meshgrad-selftest) run.sh must
#                                  exit 77 saying no GPU is visible, and the
#                                  kit's mpirun must train the digits on 2 ranks;
#                                  then, here, run.sh --rehearse (the CPU in the
#                                  GPU's place) must reach its table
#   on the GPU machine:            gpu-kit/run.sh  (see scripts/gpu-kit/README.md)
#
# The kit: meshgrad built --with-cuda for sm_80 and sm_90 in build-kit/ (its own
# out-of-tree build; OpenBLAS linked statically into libmeshgrad, so only the
# BLAS it uses travels), the programs the check runs (meshgrad, test_cuda.mpi,
# test_cuda_ops.mpi, train_ckpt_tool), Open MPI's mpirun/orted with its plugins
# (lib/openmpi) and help files (share/openmpi), relocated by env.sh with
# OPAL_PREFIX, PMIx's plugins and help files, every other library that ldd
# finds for these and the plugins (lib/), the digits and Moby-Dick (GPT) data
# sets, and the scripts of scripts/gpu-kit/ with scripts/gpt-pytorch.py. No CUDA library and no glibc: the GPU machine has
# them; env.sh finds cudart, cuBLAS and NCCL there. Everything stripped; the
# kit must stay under 60 MiB (it fails otherwise). MANIFEST lists every file,
# the Debian package it came from, and the smallest glibc it needs.
#
# Environment: MG_KIT_BUILD (build dir, default build-kit), MG_KIT_DIR (default
# gpu-kit), CUDA_HOME (default /usr/local/cuda), MAKE_JOBS (default 2),
# MG_SELFTEST_ROOT (default /var/cache/meshgrad-selftest), DEBIAN_MIRROR
# (default http://deb.debian.org/debian).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 1
top=$(pwd)
build=${MG_KIT_BUILD:-build-kit}
kit=${MG_KIT_DIR:-gpu-kit}
cuda=${CUDA_HOME:-/usr/local/cuda}
jobs=${MAKE_JOBS:-2}
arch="-gencode arch=compute_80,code=sm_80 -gencode arch=compute_90,code=sm_90"
max_mib=60
multiarch=/usr/lib/x86_64-linux-gnu
ompi_plugins=$multiarch/openmpi/lib/openmpi3
pmix_dir=$multiarch/pmix2
openblas_a=$multiarch/openblas-pthread/libopenblas.a

say() { echo "gpu-kit: $*"; }
die() {
    say "error: $*" >&2
    exit 1
}

usage() { sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; }

selftest=0
case ${1:-} in
"") ;;
--selftest) selftest=1 ;;
-h | --help) usage; exit 0 ;;
*) usage >&2; die "unknown argument '$1' (give nothing, --selftest or --help)" ;;
esac

# ---- what the build needs ---------------------------------------------------------
need_packages() {
    local missing=
    for f in "$openblas_a" /usr/bin/orterun /usr/bin/orted "$ompi_plugins" "$pmix_dir/lib/pmix" \
        /usr/share/openmpi "$cuda/bin/nvcc"; do
        [ -e "$f" ] || missing="$missing $f"
    done
    for t in readelf strip ldd dpkg-query; do command -v "$t" >/dev/null || missing="$missing $t"; done
    [ -z "$missing" ] || die "missing:$missing (run scripts/setup.sh for the Debian packages; the CUDA
toolkit goes in $cuda, or set CUDA_HOME)"
}

# ---- 1. build ---------------------------------------------------------------------------
build_meshgrad() {
    mkdir -p "$build"
    if [ ! -x configure ] || [ -n "$(find . -path "./$build" -prune -o -path ./build -prune -o \
        \( -name configure.ac -o -name '*.am' \) -newer configure -print 2>/dev/null | head -n 1)" ]; then
        say "autoreconf -fi"
        autoreconf -fi >"$build/autoreconf.log" 2>&1 || die "autoreconf failed (see $build/autoreconf.log)"
    fi
    if [ ! -f "$build/config.status" ] || [ configure -nt "$build/config.status" ] ||
        ! grep -q nonexistent/meshgrad-kit "$build/config.status"; then
        say "configure in $build (--with-cuda, sm_80 + sm_90, static OpenBLAS)"
        # the prefix is never used (the kit is staged, and env.sh sets the paths)
        (cd "$build" && "$top/configure" -q --with-cuda="$cuda" --prefix=/nonexistent/meshgrad-kit \
            CUDA_ARCH_FLAGS="$arch" OPENBLAS_CFLAGS="$(pkg-config --cflags openblas)" \
            OPENBLAS_LIBS="$openblas_a -lpthread") >"$build/configure.log" 2>&1 ||
            die "configure failed (see $build/configure.log)"
        # a new configuration: nothing built under the old one stays (libtool
        # keeps the old prefix in its .la files until they are linked again)
        make -C "$build" clean >/dev/null 2>&1
    fi
    say "make -j$jobs in $build"
    # `all` first: automake's `all` runs a sub-make, which would race another target
    { nice -n 10 make -C "$build" -j"$jobs" all &&
        nice -n 10 make -C "$build" -j"$jobs" tests/test_cuda.mpi tests/test_cuda_ops.mpi tests/train_ckpt_tool; } \
        >"$build/make.log" 2>&1 || { tail -n 30 "$build/make.log"; die "build failed (see $build/make.log)"; }
    if grep -q 'warning:' "$build/make.log"; then
        grep 'warning:' "$build/make.log" | head -n 10
        die "the build has warnings (see $build/make.log)"
    fi
    rm -rf "$build/stage"
    make -C "$build" install DESTDIR="$top/$build/stage" >"$build/install.log" 2>&1 ||
        die "make install failed (see $build/install.log)"
}

# ---- 2. assemble ------------------------------------------------------------------------
is_elf() { [ -f "$1" ] && [ "$(head -c 4 "$1" | od -An -c | tr -d ' ')" = '177ELF' ]; }

# the libtool program PATH in the build: the real binary (.libs/NAME) when there is one
real_program() {
    local d=${1%/*} n=${1##*/}
    if is_elf "$build/$d/.libs/$n"; then echo "$build/$d/.libs/$n"; else echo "$build/$1"; fi
}

# libraries the kit must not carry: glibc's and the CUDA ones (the machine has them)
platform_lib() {
    case $1 in
    linux-vdso.so.* | ld-linux-x86-64.so.* | libc.so.* | libm.so.* | libpthread.so.* | libdl.so.* | \
        librt.so.* | libresolv.so.* | libutil.so.* | libanl.so.* | libnsl.so.* | libmvec.so.*) return 0 ;;
    libcuda.so.* | libcudart.so.* | libcublas.so.* | libcublasLt.so.* | libnccl.so.* | libnvidia-*) return 0 ;;
    esac
    return 1
}

# Open MPI plugins that need a network fabric library (UCX, libfabric, PSM,
# verbs) or OpenSHMEM: a one-node kit leaves them out (shared memory and TCP
# remain), with the reason in MANIFEST.
fabric_plugin() {
    readelf -d "$1" 2>/dev/null | grep -Eq 'NEEDED.*\[(libucp|libucs|libuct|libucm|libfabric|libpsm|libibverbs|librdmacm|libefa|liboshmem|libmca_common_(ucx|ofi|verbs))'
}

# take SRC DEST: copies a file of this system into the kit (DEST relative to
# it), noting where it came from for MANIFEST
take() {
    cp -L "$1" "$tmp/$2" && chmod u+w "$tmp/$2"
    echo "$2 $1" >>"$tmp/.origins"
}

take_tree() { # SRC_DIR DEST: every file under SRC_DIR, same layout
    local f
    (cd "$1" && find . -type f | sed 's|^\./||') | while read -r f; do
        mkdir -p "$(dirname "$tmp/$2/$f")" && take "$1/$f" "$2/$f"
    done
}

copy_lib() { # PATH: into $tmp/lib under its soname (or file name)
    local src=$1 name
    name=$(readelf -d "$src" 2>/dev/null | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
    [ -n "$name" ] || name=${src##*/}
    [ -e "$tmp/lib/$name" ] || take "$src" "lib/$name"
}

# every library the ELF files under the kit load (ldd, with the kit first on the
# path), added until nothing new comes; a library ldd cannot find fails the build
close_libraries() {
    local round=0 added=1 f lib path
    while [ $added -eq 1 ] && [ $round -lt 10 ]; do
        added=0
        round=$((round + 1))
        while IFS= read -r f; do
            while read -r lib path; do
                [ -n "$lib" ] || continue
                platform_lib "$lib" && continue
                [ "$lib" = libmeshgrad.so.0 ] && continue
                if [ "$path" = "not" ]; then die "ldd: $f needs $lib, which is not installed here"; fi
                [ -e "$tmp/lib/$lib" ] && continue
                copy_lib "$path"
                added=1
            done < <(LD_LIBRARY_PATH="$tmp/lib:$tmp/lib/openmpi" ldd "$f" 2>/dev/null |
                awk '/=>/ { print $1, ($3 == "not" ? "not" : $3) }')
        done < <(find "$tmp" -type f \( -name '*.so*' -o -path '*/bin/*' \) | while read -r x; do is_elf "$x" && echo "$x"; done)
    done
}

assemble() {
    tmp=$kit.new
    rm -rf "$tmp"
    mkdir -p "$tmp/bin" "$tmp/lib/openmpi" "$tmp/lib/pmix" "$tmp/share" "$tmp/etc" "$tmp/data" "$tmp/scripts"
    : >"$tmp/.origins"
    # meshgrad and its library, installed; the test programs from the build
    local stage=$build/stage/nonexistent/meshgrad-kit
    cp "$stage/bin/meshgrad" "$tmp/bin/"
    copy_lib "$(readlink -f "$stage/lib/libmeshgrad.so.0")"
    for p in tests/test_cuda.mpi tests/test_cuda_ops.mpi tests/train_ckpt_tool; do
        cp "$(real_program "$p")" "$tmp/bin/${p##*/}"
    done
    # Open MPI: launcher, daemon, plugins (no fabric ones), help files, defaults
    take /usr/bin/orterun bin/orterun
    take /usr/bin/orted bin/orted
    ln -s orterun "$tmp/bin/mpirun"
    ln -s orterun "$tmp/bin/mpiexec"
    : >"$tmp/.left_out"
    for p in "$ompi_plugins"/mca_*.so; do
        if fabric_plugin "$p"; then echo "${p##*/}" >>"$tmp/.left_out"; else take "$p" "lib/openmpi/${p##*/}"; fi
    done
    take_tree /usr/share/openmpi share/openmpi
    take /etc/openmpi/openmpi-mca-params.conf etc/openmpi-mca-params.conf
    # PMIx (Open MPI's launcher runs a PMIx server): plugins and help files
    for f in "$pmix_dir"/lib/pmix/*.so; do take "$f" "lib/pmix/${f##*/}"; done
    take_tree "$pmix_dir/share/pmix" share/pmix
    close_libraries
    # data and scripts
    cp "$build/data/digits.h5" data/digits.conf data/digits.README.md "$tmp/data/"
    # the GPT's text travels gzipped (0.45 MiB, not the 1.14 of mobydick.h5, which
    # would take the kit over 60 MiB): run.sh makes the .h5 with `meshgrad data text2h5`
    cp data/mobydick.txt.gz data/mobydick.conf "$tmp/data/"
    cp scripts/gpu-kit/run.sh scripts/gpu-kit/env.sh "$tmp/"
    cp scripts/gpu-kit/report.py scripts/gpu-kit/torch_ref.py scripts/gpu-kit/README.md \
        scripts/gpt-pytorch.py "$tmp/scripts/"
    chmod +x "$tmp/run.sh"
    # strip every ELF file (the Debian ones are stripped already; ours are not)
    find "$tmp" -type f | while read -r f; do
        is_elf "$f" && { strip --strip-unneeded "$f" 2>/dev/null || die "strip $f failed"; }
    done
    write_manifest
    verify
    rm -f "$tmp/.origins" "$tmp/.left_out"
    if [ -e "$kit" ] && [ ! -f "$kit/MANIFEST" ]; then
        die "$kit exists and is not a kit this script wrote (no MANIFEST): move it away first"
    fi
    rm -rf "$kit"
    mv "$tmp" "$kit"
}

# the newest GLIBC_x.y symbol version any ELF file of the kit needs
glibc_needed() {
    find "$tmp" -type f | while read -r f; do is_elf "$f" && readelf -V "$f" 2>/dev/null; done |
        sed -n 's/.*Name: GLIBC_\([0-9.]*\).*/\1/p' | sort -t. -k1,1n -k2,2n -u | tail -n 1
}

write_manifest() {
    local cudart cublas nccl
    cudart=$(readelf -d "$tmp/lib/libmeshgrad.so.0" | sed -n 's/.*NEEDED.*\[\(libcudart\.so\.[0-9]*\)\]/\1/p')
    nccl=$(readelf -d "$tmp/lib/libmeshgrad.so.0" | sed -n 's/.*NEEDED.*\[\(libnccl\.so\.[0-9]*\)\]/\1/p')
    cublas=libcublas.so.$(sed -n 's/^#define CUBLAS_VER_MAJOR \([0-9]*\).*/\1/p' "$cuda/include/cublas_api.h" | head -n 1)
    if [ -z "$cudart" ] || [ -z "$nccl" ]; then
        die "libmeshgrad does not link cudart and NCCL: was it built --with-cuda?"
    fi
    {
        echo "MG_KIT_CUDART=$cudart"
        echo "MG_KIT_CUBLAS=$cublas"
        echo "MG_KIT_NCCL=$nccl"
        echo "MG_KIT_GLIBC=$(glibc_needed)"
        echo "MG_KIT_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo unknown)$(git diff --quiet HEAD 2>/dev/null || echo +changes)"
        echo "MG_KIT_BUILT=$(date -u +%Y-%m-%dT%H:%M:%SZ)"
        echo "MG_KIT_ARCH='sm_80 sm_90'"
    } >"$tmp/etc/kit.env"
    {
        echo "meshgrad GPU check kit: every file, its size and where it came from."
        echo "Built $(date -u +%Y-%m-%d) from meshgrad $(sed -n 's/^#define PACKAGE_VERSION "\(.*\)"/\1/p' "$build/config.h") ($(sed -n 's/^MG_KIT_COMMIT=//p' "$tmp/etc/kit.env")) for sm_80 and sm_90."
        echo "Needs on the machine: glibc >= $(sed -n 's/^MG_KIT_GLIBC=//p' "$tmp/etc/kit.env"), $cudart, $cublas (+ libcublasLt), $nccl, an NVIDIA driver; python3 with torch for the PyTorch rows."
        echo "Open MPI plugins left out (they need a network fabric library or OpenSHMEM; one node needs none):"
        sed 's/^/  /' "$tmp/.left_out"
        echo "Files:"
        (cd "$tmp" && find . -type f ! -name MANIFEST ! -name '.origins' ! -name '.left_out' | sort) | while read -r f; do
            local size src pkg
            size=$(stat -c %s "$tmp/$f")
            src=$(awk -v n="${f#./}" '$1 == n { print $2 }' "$tmp/.origins" | head -n 1)
            pkg=
            [ -n "$src" ] && pkg=$(dpkg-query -S "$(readlink -f "$src")" 2>/dev/null | head -n 1 | cut -d: -f1)
            [ -n "$pkg" ] && pkg="$pkg $(dpkg-query -W -f='${Version}' "$pkg" 2>/dev/null)"
            [ "$f" = ./lib/libmeshgrad.so.0 ] &&
                pkg="meshgrad, with OpenBLAS linked in from $(dpkg-query -S "$openblas_a" | cut -d: -f1) $(dpkg-query -W -f='${Version}' libopenblas-pthread-dev)"
            printf '  %-48s %10d  %s\n' "${f#./}" "$size" "${pkg:-meshgrad}"
        done
    } >"$tmp/MANIFEST"
}

# Every ELF file's libraries resolve inside the kit, to glibc or to CUDA; no
# CUDA library is in the kit; the size is under the limit.
verify() {
    local bad=0 f
    while IFS= read -r f; do
        while read -r lib path; do
            platform_lib "$lib" && continue
            case $path in "$tmp"/*) ;; *) say "$f: $lib resolves outside the kit ($path)"; bad=1 ;; esac
        done < <(LD_LIBRARY_PATH="$tmp/lib" ldd "$f" 2>/dev/null | awk '/=>/ { print $1, $3 }')
    done < <(find "$tmp" -type f | while read -r x; do is_elf "$x" && echo "$x"; done)
    [ $bad -eq 0 ] || die "the kit is not self-contained (see above)"
    if find "$tmp" -name 'libcuda*' -o -name 'libcublas*' -o -name 'libnccl*' | grep -q .; then
        die "a CUDA library got into the kit"
    fi
    local bytes
    bytes=$(du -sb "$tmp" | cut -f1)
    kit_mib=$(awk -v b="$bytes" 'BEGIN { printf "%.1f", b / 1048576 }')
    awk -v b="$bytes" -v m=$max_mib 'BEGIN { exit !(b <= m * 1048576) }' ||
        die "the kit is $kit_mib MiB, over the $max_mib MiB limit (see $tmp/MANIFEST)"
}

build_kit() {
    need_packages
    local start
    start=$(date +%s)
    build_meshgrad
    assemble
    local files
    files=$(find "$kit" -type f | wc -l)
    say "kit ready: $kit/ ($kit_mib MiB, $files files, limit $max_mib MiB) in $(($(date +%s) - start)) s"
    say "$(grep -c '^  mca_' "$kit/MANIFEST" 2>/dev/null || echo 0) Open MPI plugin(s) left out; needs glibc >= $(sed -n 's/^MG_KIT_GLIBC=//p' "$kit/etc/kit.env")"
    say "on the GPU machine: $kit/run.sh   (one command; OUT=dir for JSON)"
}

# kit is older than a source it is made of
kit_stale() {
    [ -f "$kit/MANIFEST" ] || return 0
    [ -n "$(find src tests scripts/gpu-kit scripts/gpu-kit.sh scripts/gpt-pytorch.py data configure.ac Makefile.am -newer "$kit/MANIFEST" -type f 2>/dev/null | head -n 1)" ]
}

# ---- 3. the self-test in a bare Debian root ------------------------------------------------
# The root's path on stdout, and nothing else there (the caller takes stdout for
# the path): its progress goes to stderr.
selftest_root() {
    local cache=${MG_SELFTEST_ROOT:-/var/cache/meshgrad-selftest} root
    root=$cache/bookworm-minbase
    if [ ! -x "$root/bin/bash" ]; then
        command -v debootstrap >/dev/null 2>&1 || {
            say "installing debootstrap" >&2
            DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends debootstrap \
                </dev/null >/dev/null 2>&1 || die "apt-get install debootstrap failed"
        }
        say "debootstrap --variant=minbase bookworm into $root (downloads ~40 MB; a few minutes)" >&2
        mkdir -p "$cache"
        rm -rf "$root.tmp"
        debootstrap --variant=minbase bookworm "$root.tmp" "${DEBIAN_MIRROR:-http://deb.debian.org/debian}" \
            >"$cache/debootstrap.log" 2>&1 || die "debootstrap failed (see $cache/debootstrap.log)"
        mv "$root.tmp" "$root"
    fi
    echo "$root"
}

# what runs inside the root (bash, as root, with the kit at /opt/gpu-kit read-only)
selftest_inside() {
    cat <<'EOF'
set -u
say() { echo "selftest: $*"; }
status=0
present=
for f in /usr/lib/x86_64-linux-gnu/libmpi.so.40 /usr/lib/x86_64-linux-gnu/libhdf5_openmpi.so.103 \
    /usr/lib/x86_64-linux-gnu/libopenblas.so.0 /usr/lib/x86_64-linux-gnu/libhwloc.so.15 \
    /usr/lib/x86_64-linux-gnu/libevent_core-2.1.so.7 /usr/lib/x86_64-linux-gnu/libsubunit.so.0 \
    /usr/lib/x86_64-linux-gnu/pmix2 /usr/bin/mpirun /usr/bin/python3 /usr/bin/gcc; do
    [ -e "$f" ] && present="$present $f"
done
if [ -n "$present" ]; then say "FAILED: the root is not bare:$present"; exit 1; fi
say "root: Debian $(cat /etc/debian_version), $(dpkg-query -W -f='${binary:Package}\n' | wc -l) packages; no Open MPI, HDF5, OpenBLAS, Check, hwloc, libevent, PMIx, python3 or compiler"
/opt/gpu-kit/run.sh >/tmp/run.out 2>&1
rc=$?
sed 's/^/  | /' /tmp/run.out
if [ $rc -eq 77 ] && grep -q "no GPU visible" /tmp/run.out; then
    say "ok: run.sh exits 77: $(grep 'no GPU visible' /tmp/run.out | head -n 1)"
else
    say "FAILED: run.sh exited $rc, want 77 with 'no GPU visible'"; status=1
fi
. /opt/gpu-kit/env.sh >/dev/null
notfound=$(for f in /opt/gpu-kit/bin/* /opt/gpu-kit/lib/*.so* /opt/gpu-kit/lib/openmpi/*.so /opt/gpu-kit/lib/pmix/*.so; do ldd "$f" 2>/dev/null | grep 'not found' | sed "s|^|$f: |"; done)
if [ -z "$notfound" ]; then say "ok: ldd finds every library of every kit file"; else say "FAILED: ldd:"; echo "$notfound"; status=1; fi
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 OMPI_MCA_rmaps_base_oversubscribe=1
export OPENBLAS_NUM_THREADS=1 CK_FORK=no
start=$(date +%s)
timeout -k 5 300 mpirun -np 2 meshgrad train --config /opt/gpu-kit/data/digits.conf --data /opt/gpu-kit/data/digits.h5 \
    --metrics /tmp/m.jsonl --log-every 500 >/tmp/train.out 2>&1
rc=$?
sed 's/^/  | /' /tmp/train.out
acc=$(sed -n 's/.*"eval_accuracy":\([0-9.eE+-]*\).*/\1/p' /tmp/m.jsonl 2>/dev/null | tail -n 1)
if [ $rc -eq 0 ] && awk -v a="${acc:-0}" 'BEGIN { exit !(a >= 0.97) }'; then
    say "ok: the kit's mpirun trains the digits on 2 ranks: test accuracy $acc (>= 0.97) in $(($(date +%s) - start)) s"
else
    say "FAILED: digits on 2 ranks: exit $rc, accuracy ${acc:-none} (want >= 0.97)"; status=1
fi
timeout -k 5 60 mpirun -np 1 test_cuda.mpi >/tmp/tc.out 2>&1
rc=$?
if [ $rc -eq 77 ] && grep -q "no CUDA device: skipping" /tmp/tc.out; then
    say "ok: test_cuda.mpi starts (Check, subunit, libmeshgrad load) and skips: no CUDA device"
else
    sed 's/^/  | /' /tmp/tc.out; say "FAILED: test_cuda.mpi exited $rc"; status=1
fi
exit $status
EOF
}

run_selftest() {
    [ "$(id -u)" = 0 ] || die "--selftest needs root (chroot and mounts)"
    local root cudadir
    root=$(selftest_root) || exit 1
    cudadir=$(readlink -f "$cuda")
    [ -d "$cudadir/lib64" ] || die "no CUDA toolkit in $cuda"
    say "self-test in $root: the kit at /opt/gpu-kit, the CUDA toolkit at /usr/local/cuda (as on the GPU machine), nothing else"
    mkdir -p "$root/opt/gpu-kit" "$root/usr/local/cuda" "$root/dev/shm"
    # a private mount namespace: the mounts go away with it, whatever happens
    # shellcheck disable=SC2016 # the inner script expands its own arguments
    unshare --mount --propagation private bash -c '
        set -e
        root=$1 kit=$2 cudadir=$3
        mount --bind "$kit" "$root/opt/gpu-kit" && mount -o remount,bind,ro "$root/opt/gpu-kit"
        mount --bind "$cudadir" "$root/usr/local/cuda" && mount -o remount,bind,ro "$root/usr/local/cuda"
        mount -t proc proc "$root/proc"
        mount -t sysfs sysfs "$root/sys"
        mount -t tmpfs tmpfs "$root/tmp"
        mount -t tmpfs tmpfs "$root/dev/shm"
        set +e
        chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
            /bin/bash -c "$4"
    ' selftest "$root" "$top/$kit" "$cudadir" "$(selftest_inside)"
    local rc=$?
    rehearse || rc=1
    if [ $rc -eq 0 ]; then say "self-test passed"; else say "self-test FAILED"; fi
    return $rc
}

# On this machine (it has python3): run.sh --rehearse, the CPU standing in for
# the GPU, must reach the table with every row group, and its CPU-only rows
# (training curves, benchmarks parsed, checkpoint round trip) must pass.
rehearse() {
    command -v python3 >/dev/null 2>&1 || { say "no python3 here: rehearsal not run"; return 0; }
    local out
    out=$(mktemp -d "${TMPDIR:-/tmp}/gpu-kit-rehearsal.XXXXXX")
    OUT=$out MG_KIT_THREADS=${MAKE_JOBS:-2} "$kit/run.sh" --rehearse >"$out/run.out" 2>&1
    python3 - "$out/gpu-kit.json" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
rows = {r["name"]: r["status"] for r in d["rows"]}
groups = sorted({r["group"][0] for r in d["rows"]})
must = ["digits: cuda fp32 vs cpu fp32", "digits: cuda bf16 vs cpu bf16",
        "gpt: cuda fp32 vs cpu fp32", "gpt: cuda --tf32 vs cpu fp32",
        "ckpt cuda -> cpu: re-saved file bitwise", "ckpt cuda -> cpu: params as loaded on cuda"]
measured = ["mg_linear vs raw cuBLAS, " + m for m in ("fp32", "tf32", "bf16")]  # timing: any result
bad = [m for m in must if rows.get(m) != "PASS"] + [m for m in measured if rows.get(m) not in ("PASS", "FAIL")]
ok = d["status"] == "rehearsal" and groups == list("123456") and not bad
print("selftest: %s: run.sh --rehearse here (the CPU standing in for the GPU): %d rows in groups %s%s"
      % ("ok" if ok else "FAILED", len(rows), "".join(groups), "; not passing: " + ", ".join(bad) if bad else ""))
sys.exit(0 if ok else 1)
EOF
    local rc=$?
    [ $rc -eq 0 ] || sed 's/^/  | /' "$out/run.out"
    rm -rf "$out"
    return $rc
}

if [ $selftest -eq 1 ]; then
    if kit_stale; then build_kit || exit 1; else say "kit $kit/ is up to date"; fi
    run_selftest
    exit $?
fi
build_kit
