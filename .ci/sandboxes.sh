#!/usr/bin/env bash
# CI for the sandbox of model-written code (plugins/tools/tests) as the two kinds of caller it
# treats apart: root, whose code must drop to `nobody`, and an ordinary user, whose code keeps its
# id in user namespaces of its own. Both run from a copy of the project under /tmp (where a
# newcomer clones), each with its interpreter in a private (0700) home: root the development
# environment's (pyenv in /root), the user a copy of the same Python in its own home. Every
# sandbox must work there: ASTUNER_TEST_SANDBOXES_REQUIRED=1 turns "cannot run code here" skips
# into failures. As another user than root there is no second user to make: its suite ran the tests.
# Usage: bash .ci/sandboxes.sh --build|--test   (.ci/run builds while the main suite runs)
set -euo pipefail
cd "$(dirname "$0")/.."

user=astuner-ci-sandbox
scratch=/tmp/astuner-ci-sandboxes
copy=$scratch/main

if [ "$(id -u)" -ne 0 ]; then
    echo "not root: the main suite ran plugins/tools/tests as $(id -un); no throwaway user to make"
    exit 0
fi

build() {
    local start base home python
    start=$(date +%s)
    if ! id "$user" >/dev/null 2>&1; then
        useradd --create-home --user-group --shell /usr/sbin/nologin "$user"
    fi
    home=$(getent passwd "$user" | cut -d: -f6)
    chmod 0700 "$home"

    # The project, tracked and untracked-but-not-ignored files as they are in this work tree, in a
    # git work tree of its own: what the tools tests and their conftest read.
    rm -rf "$scratch"
    mkdir -p "$copy"
    git ls-files -z -co --exclude-standard -- conftest.py pyproject.toml constraints.txt kernel plugins/tools \
        | tar --null -T - -cf - | tar -C "$copy" -xf -
    git -C "$copy" init -q

    # The development environment's Python, copied without its site-packages and test suite. A
    # pyenv build finds libpython through an absolute RUNPATH into /root: pointed at its own lib.
    base=$(.venv/bin/python -c 'import sys; print(sys.base_prefix)')
    python=$home/python
    rm -rf "$python" "$home/venv"
    mkdir -p "$python"
    tar -C "$base" --exclude="./lib/python3*/site-packages" --exclude="./lib/python3*/test" \
        --exclude="./lib/python3*/config-*/*.a" -cf - . \
        | tar -C "$python" -xf -
    local binary
    binary=$(readlink -f "$python/bin/python3")
    if [ -n "$(patchelf --print-rpath "$binary")" ]; then
        patchelf --set-rpath '$ORIGIN/../lib' "$binary"
    fi
    "$python/bin/python3" -m venv "$home/venv"
    # As root, so that pip's cache (root's) serves the wheels; then everything goes to the user.
    "$home/venv/bin/pip" install -q --no-compile -c constraints.txt \
        -e "$copy/kernel" -e "$copy/plugins/tools" pytest pytest-timeout
    chown -R "$user:$user" "$home" "$scratch"
    echo "the sandbox tests' user, Python and project copy built in $(( $(date +%s) - start )) s"
}

run_tests() {
    local start home status=0
    start=$(date +%s)
    home=$(getent passwd "$user" | cut -d: -f6)
    echo "+ plugins/tools/tests as root, from $copy"
    local python=$PWD/.venv/bin/python
    (cd "$copy" && ASTUNER_TEST_SANDBOXES_REQUIRED=1 "$python" -m pytest -q -p no:cacheprovider plugins/tools/tests) \
        || status=$?
    echo "+ plugins/tools/tests as $user (Python in $home, mode $(stat -c %a "$home")), from $copy"
    setpriv --reuid="$user" --regid="$user" --init-groups \
        env -i HOME="$home" PATH=/usr/bin:/bin LANG=C.UTF-8 ASTUNER_TEST_SANDBOXES_REQUIRED=1 \
        bash -c "cd '$copy' && '$home/venv/bin/python' -m pytest -q -p no:cacheprovider plugins/tools/tests" \
        || status=$?
    # throwaway: the user, its home and the project copy go, whatever the outcome
    userdel --remove "$user" 2>/dev/null || true
    rm -rf "$scratch" "/tmp/pytest-of-$user"
    echo "the sandbox tests as root and as $user took $(( $(date +%s) - start )) s"
    return "$status"
}

case ${1:-} in
    --build) build ;;
    --test) run_tests ;;
    *) echo "usage: bash .ci/sandboxes.sh --build|--test" >&2; exit 2 ;;
esac
