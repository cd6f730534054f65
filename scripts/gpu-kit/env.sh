# env.sh: sourced (bash) from the GPU check kit, or by hand to use the kit's
# programs:   . gpu-kit/env.sh && mpirun -np 1 meshgrad train ...
# Puts the kit's bin/ on PATH and lib/ first on LD_LIBRARY_PATH, relocates Open
# MPI (OPAL_PREFIX and its directories) and PMIx to the kit, and finds the
# machine's CUDA libraries the kit's programs load: cudart and NCCL (linked)
# and cuBLAS (dlopened), in the CUDA toolkit's folders, then in the NVIDIA
# packages PyTorch installs in python3's site-packages (nvidia/*/lib: NCCL is
# usually only there), then the system's. Their folders join LD_LIBRARY_PATH.
# Sets MG_KIT (the kit), MG_KIT_FOUND (one line per library: name, path, where
# found) and MG_KIT_MISSING (the names not found; empty when all are), and
# MG_KIT_GLIBC_PROBLEM when this machine's glibc is older than the kit needs.
# Prints nothing: run.sh reports what it found.

MG_KIT=${MG_KIT:-$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)}
# shellcheck disable=SC1091
. "$MG_KIT/etc/kit.env" # MG_KIT_CUDART, MG_KIT_CUBLAS, MG_KIT_NCCL, MG_KIT_GLIBC, ...

export PATH="$MG_KIT/bin:$PATH"
export OPAL_PREFIX="$MG_KIT" OPAL_EXEC_PREFIX="$MG_KIT" OPAL_BINDIR="$MG_KIT/bin"
export OPAL_LIBDIR="$MG_KIT/lib" OPAL_PKGLIBDIR="$MG_KIT/lib/openmpi"
export OPAL_DATAROOTDIR="$MG_KIT/share" OPAL_DATADIR="$MG_KIT/share"
export OPAL_PKGDATADIR="$MG_KIT/share/openmpi" OPAL_SYSCONFDIR="$MG_KIT/etc"
export PMIX_PREFIX="$MG_KIT" PMIX_EXEC_PREFIX="$MG_KIT" PMIX_LIBDIR="$MG_KIT/lib"
export PMIX_PKGLIBDIR="$MG_KIT/lib/pmix" PMIX_DATAROOTDIR="$MG_KIT/share" PMIX_DATADIR="$MG_KIT/share"
export PMIX_PKGDATADIR="$MG_KIT/share/pmix" PMIX_SYSCONFDIR="$MG_KIT/etc"
# the plugin folder, in case an installed Open MPI's configuration says otherwise
export OMPI_MCA_mca_base_component_path="$MG_KIT/lib/openmpi"
# mpirun's default launcher (rsh) refuses to start, even for local ranks, when
# there is no ssh or rsh (as on a bare GPU machine): then launch on this node only
if ! command -v ssh >/dev/null 2>&1 && ! command -v rsh >/dev/null 2>&1; then
    export OMPI_MCA_plm=${OMPI_MCA_plm:-isolated}
fi

# folders that may hold the CUDA libraries, most likely first
mg_kit_cuda_dirs() {
    local d
    for d in ${CUDA_HOME:+"$CUDA_HOME"} ${CUDA_PATH:+"$CUDA_PATH"} /usr/local/cuda \
        $(ls -d /usr/local/cuda-* 2>/dev/null | sort -rV); do
        echo "$d/lib64 toolkit"
        echo "$d/targets/x86_64-linux/lib toolkit"
        echo "$d/lib toolkit"
    done
    if command -v python3 >/dev/null 2>&1; then
        python3 - 2>/dev/null <<'EOF'
import glob, os, site, sys
roots = list(site.getsitepackages()) + [site.getusersitepackages()] + sys.path
seen = set()
for r in roots:
    for d in sorted(glob.glob(os.path.join(r, "nvidia", "*", "lib"))) + [os.path.join(r, "torch", "lib")]:
        d = os.path.realpath(d)
        if os.path.isdir(d) and d not in seen:
            seen.add(d)
            print(d, "python-package:" + os.path.relpath(d, r).replace(os.sep, "/"))
EOF
    fi
    for d in /usr/lib/x86_64-linux-gnu /usr/lib64 /usr/lib /lib/x86_64-linux-gnu; do echo "$d system"; done
}

MG_KIT_FOUND= MG_KIT_MISSING=
mg_kit_dirs=
for mg_kit_lib in "$MG_KIT_CUDART" "$MG_KIT_CUBLAS" "$MG_KIT_NCCL"; do
    mg_kit_where=
    while read -r mg_kit_dir mg_kit_kind; do
        if [ -e "$mg_kit_dir/$mg_kit_lib" ]; then
            mg_kit_where="$mg_kit_dir $mg_kit_kind"
            break
        fi
    done < <(mg_kit_cuda_dirs)
    if [ -z "$mg_kit_where" ]; then
        MG_KIT_MISSING="${MG_KIT_MISSING:+$MG_KIT_MISSING }$mg_kit_lib"
        continue
    fi
    MG_KIT_FOUND="$MG_KIT_FOUND$mg_kit_lib ${mg_kit_where%% *}/$mg_kit_lib ${mg_kit_where#* }
"
    case ":$mg_kit_dirs:" in *":${mg_kit_where%% *}:"*) ;; *) mg_kit_dirs="$mg_kit_dirs:${mg_kit_where%% *}" ;; esac
done
export LD_LIBRARY_PATH="$MG_KIT/lib$mg_kit_dirs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

# this machine's glibc against the newest one the kit's files were linked for
MG_KIT_GLIBC_PROBLEM=
mg_kit_glibc=$(getconf GNU_LIBC_VERSION 2>/dev/null | awk '{ print $2 }')
if [ -n "$mg_kit_glibc" ] && [ -n "${MG_KIT_GLIBC:-}" ] &&
    [ "$(printf '%s\n%s\n' "$mg_kit_glibc" "$MG_KIT_GLIBC" | sort -V | head -n 1)" != "$MG_KIT_GLIBC" ]; then
    MG_KIT_GLIBC_PROBLEM="this machine has glibc $mg_kit_glibc but the kit needs $MG_KIT_GLIBC or newer (build it on an older Debian)"
fi
unset mg_kit_lib mg_kit_where mg_kit_dir mg_kit_kind mg_kit_dirs mg_kit_glibc
export MG_KIT MG_KIT_FOUND MG_KIT_MISSING MG_KIT_GLIBC_PROBLEM
