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
. "$here/../lib/new-repo.sh"
new_repo "${1:-$here/repos/test/mathx}" "Test Author" test@example.invalid 03

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
