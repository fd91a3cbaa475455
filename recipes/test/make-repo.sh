#!/usr/bin/env bash
# Generates the hermetic test project "test/shlib": shell functions and shell tests, runnable with
# nothing but busybox sh. Deterministic like recipes/demo/make-repo.sh. `sh run_tests.sh [files]`
# prints pytest -rA style lines (`PASSED tests/test_lib.sh::test_add`), so the pytest log parser reads it.
#
#   recipes/test/make-repo.sh [OUT]     default OUT: recipes/test/repos/test/shlib
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/../lib/new-repo.sh"
new_repo "${1:-$here/repos/test/shlib}" "Test Author" test@example.invalid 02

mkdir -p tests
echo 1.0 > VERSION
cat > run_tests.sh <<'EOF'
#!/bin/sh
# Runs every test_* function of the given test files (default: tests/*.sh).
cd "$(dirname "$0")" || exit 2
files="$*"
[ -n "$files" ] || files=$(ls tests/*.sh)
status=0
for f in $files; do
  for t in $(sed -n 's/^\(test_[a-z0-9_]*\)() *{.*/\1/p' "$f"); do
    if ( . ./lib.sh; . "./$f"; "$t" ) >/dev/null 2>&1; then echo "PASSED $f::$t"; else echo "FAILED $f::$t"; status=1; fi
  done
done
exit $status
EOF
cat > lib.sh <<'EOF'
add() { echo $(($1 + $2)); }
max() { if [ "$1" -gt "$2" ]; then echo "$1"; else echo "$1"; fi; }
abs() { echo "$1"; }
EOF
cat > tests/test_lib.sh <<'EOF'
test_add() { [ "$(add 2 3)" = 5 ]; }
test_max_first() { [ "$(max 5 3)" = 5 ]; }
test_abs_positive() { [ "$(abs 4)" = 4 ]; }
EOF
commit "Initial version"

sed -i 's/else echo "\$1"; fi; }/else echo "$2"; fi; }/' lib.sh
echo 'test_max_second() { [ "$(max 3 5)" = 5 ]; }' >> tests/test_lib.sh
commit "Fix #1: max returns the larger argument"

sed -i 's/^abs() .*/abs() { if [ "$1" -lt 0 ]; then echo $((-$1)); else echo "$1"; fi; }/' lib.sh
echo 'test_abs_negative() { [ "$(abs -4)" = 4 ]; }' >> tests/test_lib.sh
commit "Fix #2: abs of a negative number"

echo "shlib: tiny shell helpers" > README
commit "Add a readme"

git log --format='%H %s'
