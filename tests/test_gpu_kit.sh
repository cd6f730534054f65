#!/bin/sh
# test_gpu_kit.sh: what scripts/gpu-kit.sh --selftest can be checked for
# without a GPU, debootstrap or a network. The function that makes the bare
# Debian root (selftest_root, taken from the script as it is) runs against a
# debootstrap on PATH that only makes the root's bin/bash and talks on stdout
# as the real one does: the caller's capture, root=$(selftest_root), must be
# the root's path alone on the first run (the root made) and on the second
# (the root cached), the progress must be on stderr, and a failed debootstrap
# must give no path. With shellcheck here, the whole script has no warning. The
# full self-test (a debootstrap root, a CUDA build of the kit) is run by hand.
# Prints a Check-style summary line.
. "$(dirname "$0")/check.sh"
srcdir=${top_srcdir:-$(dirname "$0")/..}
script=$srcdir/scripts/gpu-kit.sh
tmp=$(mktemp -d "${TMPDIR:-/tmp}/mg-gpu-kit.XXXXXX")
trap 'rm -rf "$tmp"' EXIT

if ! command -v bash >/dev/null 2>&1; then
    echo "skip: no bash here (gpu-kit.sh is a bash script)"
    check_summary
    exit
fi

# the script's say (the first: the self-test's own script has another), die and
# selftest_root, as they are written there
{
    grep -m 1 '^say() ' "$script"
    sed -n -e '/^die() {/,/^}/p' -e '/^selftest_root() {/,/^}/p' "$script"
} >"$tmp/functions.sh"
check "gpu-kit.sh defines say, die and selftest_root" \
    sh -c "test \$(grep -c -e '^say() ' -e '^die() {' -e '^selftest_root() {' '$tmp/functions.sh') -eq 3"

mkdir "$tmp/bin"
cat >"$tmp/bin/debootstrap" <<'EOF'
#!/bin/sh
# debootstrap --variant=minbase SUITE DIR MIRROR: a root with bin/bash, and talk
echo "I: Retrieving InRelease"
[ -n "${FAIL_DEBOOTSTRAP:-}" ] && exit 1
mkdir -p "$3/bin" && printf '#!/bin/sh\n' >"$3/bin/bash" && chmod +x "$3/bin/bash"
echo "I: Base system installed successfully."
EOF
chmod +x "$tmp/bin/debootstrap"

# capture CACHE: root=$(selftest_root) as run_selftest does; the path in $tmp/path,
# stderr in $tmp/err; the exit status
capture() {
    PATH="$tmp/bin:$PATH" MG_SELFTEST_ROOT=$1 bash -c '
        . "$1"
        root=$(selftest_root) || exit 1
        printf "%s" "$root" >"$2"
    ' capture "$tmp/functions.sh" "$tmp/path" 2>"$tmp/err"
}

want=$tmp/cache/bookworm-minbase
capture "$tmp/cache"
rc=$?
check "first run (the root made): exit $rc, the capture is the root's path alone: '$(cat "$tmp/path")'" \
    sh -c "test $rc -eq 0 && test \"\$(cat '$tmp/path')\" = '$want' && test -x '$want/bin/bash'"
check "... the progress is on stderr" grep -q "gpu-kit: debootstrap --variant=minbase bookworm into $want" "$tmp/err"
capture "$tmp/cache"
rc=$?
check "second run (the root cached): exit $rc, the same path alone" \
    sh -c "test $rc -eq 0 && test \"\$(cat '$tmp/path')\" = '$want'"
rm -f "$tmp/path"
FAIL_DEBOOTSTRAP=1 capture "$tmp/cache2"
rc=$?
check "a failed debootstrap: exit $rc, no path, the error on stderr" \
    sh -c "test $rc -ne 0 && test ! -e '$tmp/path' && grep -q 'gpu-kit: error: debootstrap failed' '$tmp/err'"

if command -v shellcheck >/dev/null 2>&1; then
    check_output "shellcheck -S warning scripts/gpu-kit.sh" shellcheck -S warning "$script"
else
    echo "skip: no shellcheck here: gpu-kit.sh is not linted"
fi
check_summary
