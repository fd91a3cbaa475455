#!/usr/bin/env bash
# Generates the test project "test/mathx": a Python package tested with plain unittest
# (`python3 -m unittest -v`). Its dataset (dataset.jsonl) names tests as Python <= 3.10 printed
# them, `test_x (tests.test_mathx.MathTests)`, as SWE-bench rows do; a Python >= 3.11 log spells
# them `test_x (tests.test_mathx.MathTests.test_x)`, so grading it exercises the other spelling.
# Deterministic like recipes/test/make-repo.sh.
#
#   recipes/pyunit/make-repo.sh [OUT]     default OUT: recipes/pyunit/repos/test/mathx
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="${1:-$here/repos/test/mathx}"
if [ -e "$out" ]; then echo "make-repo.sh: $out exists; remove it first" >&2; exit 1; fi
mkdir -p "$out"
cd "$out"

export GIT_CONFIG_GLOBAL=/dev/null GIT_CONFIG_NOSYSTEM=1 LC_ALL=C TZ=UTC
export GIT_AUTHOR_NAME="Test Author" GIT_AUTHOR_EMAIL="test@example.invalid"
export GIT_COMMITTER_NAME="Test Author" GIT_COMMITTER_EMAIL="test@example.invalid"
umask 022
git init -q -b main .

day=0
commit() {
  day=$((day + 1))
  export GIT_AUTHOR_DATE="2024-03-$(printf %02d "$day")T10:00:00+0000"
  export GIT_COMMITTER_DATE="$GIT_AUTHOR_DATE"
  git add -A
  git commit -q -m "$1"
}

mkdir -p tests
echo 1.0 > VERSION
cat > mathx.py <<'PY'
def double(x):
    return x + x


def triple(x):
    return x * 2
PY
: > tests/__init__.py
cat > tests/test_mathx.py <<'PY'
import unittest

import mathx


class MathTests(unittest.TestCase):
    def test_double(self):
        self.assertEqual(mathx.double(4), 8)
PY
commit "Initial version"

sed -i 's/return x \* 2/return x * 3/' mathx.py
cat >> tests/test_mathx.py <<'PY'

    def test_triple(self):
        self.assertEqual(mathx.triple(4), 12)
PY
commit "Fix #1: triple multiplies by three"

git log --format='%H %s'
