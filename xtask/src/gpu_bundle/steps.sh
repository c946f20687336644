# Sourced by interop.sh and mpirun.sh, whose every step ends in one line:
# `pass WHAT` prints "PASS: WHAT" and counts it in passed, `fail WHAT`
# prints "FAIL: WHAT" and counts it in failed.
passed=0
failed=0

pass() {
    echo "PASS: $1"
    passed=$((passed + 1))
}

fail() {
    echo "FAIL: $1"
    failed=$((failed + 1))
}
