# Shared by scripts/ci-jax-matrix.sh and scripts/ci-lint.sh (sourced, from the project's root).

# copy_tree DEST: the files git tracks or does not ignore, as they are now, copied into DEST (a
# new folder). A pass that installs and runs in the copy keeps its build (egg-info, the compiled
# extension) and __pycache__ out of this checkout, so that .ci/run can run it beside the tests.
copy_tree() {
    mkdir "$1"
    git ls-files -z --cached --others --exclude-standard \
        | tar --null --ignore-failed-read -T - -cf - 2>/dev/null | tar -xf - -C "$1"
}
