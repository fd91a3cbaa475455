#!/usr/bin/env bash
# Generates the demo project "demo/pycalc": a small Python library whose history holds four bugs
# and their fixes. Deterministic (fixed author, dates, contents, isolated git config), so the
# commit ids recorded in dataset.jsonl are the same on every machine and every run.
#
#   recipes/demo/make-repo.sh [OUT]     default OUT: recipes/demo/repos/demo/pycalc
#
# Commits whose subject starts "Fix #N:" fix instance demo__pycalc-N; the instance's base commit
# is that commit's parent. The fix touches pycalc/ (the gold patch) and tests/ (the test patch).
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
. "$here/../lib/new-repo.sh"
new_repo "${1:-$here/repos/demo/pycalc}" "Demo Author" demo@example.invalid 01

mkdir -p pycalc tests
cat > README.md <<'EOF'
# pycalc

Tiny helpers for numbers and text. Run the tests with `python3 -m pytest`.
EOF
cat > pytest.ini <<'EOF'
[pytest]
testpaths = tests
EOF
cat > pycalc/__init__.py <<'EOF'
__version__ = "0.1"
EOF
cat > pycalc/stats.py <<'EOF'
"""Small statistics helpers."""


def mean(values):
    """Arithmetic mean of a sequence of numbers."""
    values = list(values)
    return sum(values) / len(values)


def median(values):
    """Middle value (the mean of the two middle values for an even count)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("median of an empty sequence")
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2
EOF
cat > pycalc/text.py <<'EOF'
"""String helpers."""
import re


def slugify(text):
    """Lower-case words joined by single hyphens: "Hello, World!" -> "hello-world"."""
    text = re.sub(r"[^a-z0-9\s-]", "", text.lower())
    return text.strip().replace(" ", "-")


def is_palindrome(text):
    """Whether the text reads the same backwards."""
    return text == text[::-1]
EOF
cat > tests/test_stats.py <<'EOF'
import pytest

from pycalc.stats import mean, median


def test_mean():
    assert mean([1, 2, 3, 4]) == 2.5


def test_median_odd():
    assert median([3, 1, 2]) == 2


def test_median_even():
    assert median([4, 1, 3, 2]) == 2.5


def test_median_empty():
    with pytest.raises(ValueError):
        median([])
EOF
cat > tests/test_text.py <<'EOF'
from pycalc.text import is_palindrome, slugify


def test_slugify_simple():
    assert slugify("Hello World") == "hello-world"


def test_slugify_punctuation():
    assert slugify("Hello, World!") == "hello-world"


def test_is_palindrome_simple():
    assert is_palindrome("level")
    assert not is_palindrome("abc")
EOF
commit "Initial version: statistics and text helpers"

# Instance 1: mean([]) raises ZeroDivisionError instead of a ValueError that says why.
python_fix_mean() {
  cat > pycalc/stats.py <<'EOF'
"""Small statistics helpers."""


def mean(values):
    """Arithmetic mean of a sequence of numbers."""
    values = list(values)
    if not values:
        raise ValueError("mean of an empty sequence")
    return sum(values) / len(values)


def median(values):
    """Middle value (the mean of the two middle values for an even count)."""
    ordered = sorted(values)
    if not ordered:
        raise ValueError("median of an empty sequence")
    mid = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[mid]
    return (ordered[mid - 1] + ordered[mid]) / 2
EOF
  cat >> tests/test_stats.py <<'EOF'


def test_mean_empty():
    with pytest.raises(ValueError, match="empty"):
        mean([])
EOF
}
python_fix_mean
commit "Fix #1: mean of an empty sequence raises ValueError"

# Instance 2: slugify keeps runs of whitespace as runs of hyphens.
sed -i 's/    return text.strip().replace(" ", "-")/    return re.sub(r"[\\s-]+", "-", text.strip())/' pycalc/text.py
cat >> tests/test_text.py <<'EOF'


def test_slugify_collapses_whitespace():
    assert slugify("  Hello   big\tWorld ") == "hello-big-world"


def test_slugify_collapses_hyphens():
    assert slugify("a - b") == "a-b"
EOF
commit "Fix #2: slugify collapses runs of whitespace and hyphens"

# Version 0.2 adds Roman numerals, with instance 3's bug: no subtractive notation (4 -> IIII).
cat > pycalc/__init__.py <<'EOF'
__version__ = "0.2"
EOF
cat > pycalc/roman.py <<'EOF'
"""Roman numerals."""

_NUMERALS = [(1000, "M"), (500, "D"), (100, "C"), (50, "L"), (10, "X"), (5, "V"), (1, "I")]


def to_roman(number):
    """Roman numeral for an integer from 1 to 3999."""
    if not 0 < number < 4000:
        raise ValueError("roman numerals cover 1..3999")
    out = []
    for value, letters in _NUMERALS:
        count, number = divmod(number, value)
        out.append(letters * count)
    return "".join(out)
EOF
cat > tests/test_roman.py <<'EOF'
import pytest

from pycalc.roman import to_roman


def test_to_roman_additive():
    assert [to_roman(n) for n in (1, 3, 6, 2023)] == ["I", "III", "VI", "MMXXIII"]


def test_to_roman_range():
    for n in (0, 4000):
        with pytest.raises(ValueError):
            to_roman(n)
EOF
commit "Release 0.2: Roman numerals"

sed -i 's/^_NUMERALS = .*/_NUMERALS = [\n    (1000, "M"), (900, "CM"), (500, "D"), (400, "CD"), (100, "C"), (90, "XC"),\n    (50, "L"), (40, "XL"), (10, "X"), (9, "IX"), (5, "V"), (4, "IV"), (1, "I"),\n]/' pycalc/roman.py
cat >> tests/test_roman.py <<'EOF'


def test_to_roman_subtractive():
    cases = {4: "IV", 9: "IX", 14: "XIV", 40: "XL", 90: "XC", 400: "CD", 1994: "MCMXCIV"}
    assert {n: to_roman(n) for n in cases} == cases
EOF
commit "Fix #3: to_roman uses subtractive notation"

# Instance 4: is_palindrome is case- and punctuation-sensitive.
sed -i 's/^    return text == text\[::-1\]$/    letters = [c for c in text.lower() if c.isalnum()]\n    return letters == letters[::-1]/' pycalc/text.py
cat >> tests/test_text.py <<'EOF'


def test_is_palindrome_ignores_case_and_punctuation():
    assert is_palindrome("A man, a plan, a canal: Panama")
    assert is_palindrome("Never odd or even")
    assert not is_palindrome("Not a palindrome")
EOF
commit "Fix #4: is_palindrome ignores case and punctuation"

cat > CHANGES.md <<'EOF'
# Changes

- 0.2: Roman numerals; palindromes ignore case and punctuation.
- 0.1: statistics and text helpers.
EOF
commit "Add a changelog"

git log --format='%H %s'
