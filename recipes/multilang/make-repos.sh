#!/usr/bin/env bash
# Generates the multilingual example projects, one per language, each a small real project with a
# bug whose fix its tests pin, under OUT/<owner>/<name>. Deterministic like recipes/demo/make-repo.sh:
# the commit ids in dataset.jsonl are the same on every machine.
#
#   recipes/multilang/make-repos.sh [OUT]     default OUT: recipes/multilang/repos
#
#   mlang/ccalc     C, make, a Tcl test runner printing redis's `[ok]: name` lines
#   mlang/jsutil    JavaScript, one library tested by jest, vitest and mocha (npm ci)
#   swesmith/mlang__gostrs.<commit>  Go (standard library only), a SWE-smith mirror: the bug is a
#                   commit on a branch of its own, the tests are already there
#   mlang/rsnum     Rust (std only), cargo test
#   mlang/jcalc     Java, Maven with JUnit 4 from Debian's /usr/share/maven-repo, offline
#   mlang/phputil   PHP, PHPUnit (--testdox)
#   mlang/rbutil    Ruby, RSpec (--format json, transformed as the harness does)
#
# In each: "Fix #N: ..." fixes instance N (its parent is the base commit; tests/ or the runner's
# test directory is the test patch, the rest the gold patch), and "Break #N: ..." on branch
# break-N, on top of the fix, breaks a test that passes before and after it: the patch a scorer
# must not call resolved.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
out="$(mkdir -p "${1:-$here/repos}" && cd "${1:-$here/repos}" && pwd)"
. "$here/../lib/new-repo.sh"

# break N MESSAGE: commits the working tree's change on branch break-N, then returns to main
brk() {
  git checkout -q -b "break-$1"
  commit "Break #$1: $2"
  git checkout -q main
}

# ---------------------------------------------------------------------------------------------
(
new_repo "$out/mlang/ccalc" "C Author" c@example.invalid 03
mkdir -p tests/unit
cat > Makefile <<'EOF'
CFLAGS ?= -O1 -Wall -Werror
calc: main.o calc.o
	$(CC) $(CFLAGS) -o $@ main.o calc.o
%.o: %.c calc.h
	$(CC) $(CFLAGS) -c $<
clean:
	rm -f calc *.o
.PHONY: clean
EOF
cat > .gitignore <<'EOF'
calc
*.o
EOF
cat > calc.h <<'EOF'
int clamp(int v, int lo, int hi);
int gcd(int a, int b);
int sum_digits(int n);
EOF
cat > calc.c <<'EOF'
#include "calc.h"

int clamp(int v, int lo, int hi) {
  if (v < lo) return lo;
  if (v > hi) return hi;
  return v;
}

int gcd(int a, int b) {
  while (b != 0) {
    int t = a % b;
    a = b;
    b = t;
  }
  return a < 0 ? -a : a;
}

int sum_digits(int n) {
  int s = 0;
  while (n > 0) {
    s += n % 10;
    n /= 10;
  }
  return s;
}
EOF
cat > main.c <<'EOF'
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "calc.h"

int main(int argc, char **argv) {
  if (argc >= 5 && strcmp(argv[1], "clamp") == 0) printf("%d\n", clamp(atoi(argv[2]), atoi(argv[3]), atoi(argv[4])));
  else if (argc >= 4 && strcmp(argv[1], "gcd") == 0) printf("%d\n", gcd(atoi(argv[2]), atoi(argv[3])));
  else if (argc >= 3 && strcmp(argv[1], "sum_digits") == 0) printf("%d\n", sum_digits(atoi(argv[2])));
  else {
    fprintf(stderr, "usage: calc clamp V LO HI | gcd A B | sum_digits N\n");
    return 2;
  }
  return 0;
}
EOF
cat > tests/run.tcl <<'EOF'
# The test suite, as redis runs its own: every tests/unit/*.tcl file's `test` blocks, one line each,
# `[ok]: name (N ms)` or `[err]: name in FILE` and the reason. Exit status 1 when any failed.
set ::failed 0
proc calc {args} { exec ./calc {*}$args }
proc assert_equal {expected actual} {
  if {$expected ne $actual} { error "Expected '$expected', got '$actual'" }
}
proc test {name body} {
  set start [clock milliseconds]
  if {[catch {uplevel 1 $body} err]} {
    puts "\[err\]: $name in $::current_file"
    puts "  $err"
    incr ::failed
  } else {
    puts "\[ok\]: $name ([expr {[clock milliseconds] - $start}] ms)"
  }
}
foreach ::current_file [lsort [glob tests/unit/*.tcl]] { source $::current_file }
exit [expr {$::failed > 0}]
EOF
cat > tests/unit/calc.tcl <<'EOF'
test "clamp keeps a value in range" { assert_equal 5 [calc clamp 5 0 10] }
test "clamp raises a value below the range" { assert_equal 0 [calc clamp -3 0 10] }
test "clamp lowers a value above the range" { assert_equal 10 [calc clamp 42 0 10] }
test "gcd of 12 and 18" { assert_equal 6 [calc gcd 12 18] }
test "sum_digits of 1234" { assert_equal 10 [calc sum_digits 1234] }
EOF
commit "Initial version"

sed -i 's/^  while (n > 0) {$/  if (n < 0) n = -n;\n  while (n > 0) {/' calc.c
echo 'test "sum_digits of a negative number" { assert_equal 6 [calc sum_digits -123] }' >> tests/unit/calc.tcl
commit "Fix #1: sum_digits of a negative number"

sed -i 's/^  if (v < lo) return lo;$/  if (v < lo) return v;/' calc.c
brk 1 "clamp no longer raises values below the range"
)

# ---------------------------------------------------------------------------------------------
(
new_repo "$out/mlang/jsutil" "JS Author" js@example.invalid 04
mkdir -p src jest vitest mocha
cp "$here/js/package.json" "$here/js/package-lock.json" .
echo node_modules/ > .gitignore
cat > vitest.config.mjs <<'EOF'
export default { test: { include: ['vitest/**/*.test.mjs'] } };
EOF
cat > .mocharc.json <<'EOF'
{ "spec": ["mocha/**/*.spec.js"] }
EOF
cat > src/strings.js <<'EOF'
'use strict';

function capitalize(s) {
  return s[0].toUpperCase() + s.slice(1);
}

function truncate(s, n) {
  if (s.length <= n) return s;
  return `${s.slice(0, n)}...`;
}

function words(s) {
  return s.trim().split(' ');
}

function padLeft(s, n, c = ' ') {
  return s.length >= n ? s : c.repeat(n - s.length) + s;
}

module.exports = { capitalize, truncate, words, padLeft };
EOF
cat > jest/strings.test.js <<'EOF'
const { padLeft, truncate } = require('../src/strings');

describe('padLeft', () => {
  test('pads a short string', () => expect(padLeft('7', 3, '0')).toBe('007'));
  test('leaves a long string alone', () => expect(padLeft('1234', 3)).toBe('1234'));
});

describe('truncate', () => {
  test('keeps a short string', () => expect(truncate('abc', 5)).toBe('abc'));
});
EOF
cat > vitest/strings.test.mjs <<'EOF'
import { describe, expect, it } from 'vitest';
import strings from '../src/strings.js';

describe('capitalize', () => {
  it('capitalizes a word', () => expect(strings.capitalize('hello')).toBe('Hello'));
});

describe('padLeft', () => {
  it('pads with spaces by default', () => expect(strings.padLeft('x', 3)).toBe('  x'));
});
EOF
cat > mocha/strings.spec.js <<'EOF'
const assert = require('node:assert');
const { words, capitalize } = require('../src/strings');

describe('words', () => {
  it('splits a sentence', () => assert.deepStrictEqual(words('a b c'), ['a', 'b', 'c']));
});

describe('capitalize', () => {
  it('keeps the rest of the word', () => assert.strictEqual(capitalize('wORLD'), 'WORLD'));
});
EOF
commit "Initial version"

# 1 (jest): a truncated string is n characters long with its ellipsis
sed -i 's/  return `${s.slice(0, n)}...`;/  return `${s.slice(0, Math.max(0, n - 3))}...`;/' src/strings.js
cat >> jest/strings.test.js <<'EOF'

describe('truncate with an ellipsis', () => {
  test('is at most n characters long', () => expect(truncate('abcdefghij', 6)).toBe('abc...'));
});
EOF
commit "Fix #1: truncate counts the ellipsis in the length"
sed -i "s/  return s.length >= n ? s : c.repeat(n - s.length) + s;/  return s.length >= n ? s : s + c.repeat(n - s.length);/" src/strings.js
brk 1 "padLeft pads on the right"

# 2 (vitest): capitalize('') is ''
sed -i "s/  return s\[0\].toUpperCase() + s.slice(1);/  return s === '' ? s : s[0].toUpperCase() + s.slice(1);/" src/strings.js
cat >> vitest/strings.test.mjs <<'EOF'

describe('capitalize an empty string', () => {
  it('gives an empty string', () => expect(strings.capitalize('')).toBe(''));
});
EOF
commit "Fix #2: capitalize of an empty string"
sed -i "s/^function padLeft(s, n, c = ' ') {$/function padLeft(s, n, c = '_') {/" src/strings.js
brk 2 "padLeft pads with underscores by default"

# 3 (mocha): runs of spaces separate words once
sed -i "s|  return s.trim().split(' ');|  return s.trim().split(/ +/);|" src/strings.js
cat >> mocha/strings.spec.js <<'EOF'

describe('words between runs of spaces', () => {
  it('has no empty words', () => assert.deepStrictEqual(words('a   b'), ['a', 'b']));
});
EOF
commit "Fix #3: words split on runs of spaces"
sed -i "s/  return s === '' ? s : s\[0\].toUpperCase() + s.slice(1);/  return s === '' ? s : s[0].toUpperCase() + s.slice(1).toLowerCase();/" src/strings.js
brk 3 "capitalize lowercases the rest of the word"
)

# ---------------------------------------------------------------------------------------------
# A SWE-smith mirror: named for the upstream commit it mirrors, its task is a branch whose one
# commit puts a bug in; the tests that catch it are in the tree already.
(
new_repo "$out/.gostrs-tmp" "Go Author" go@example.invalid 05
cp "$here/go/go.mod" go.mod
cat > strs.go <<'EOF'
// Package gostrs holds small string helpers.
package gostrs

import "strings"

// Reverse returns s with its runes in reverse order.
func Reverse(s string) string {
	r := []rune(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}

// IsPalindrome reports whether s reads the same backwards, ignoring case.
func IsPalindrome(s string) bool {
	l := strings.ToLower(s)
	return l == Reverse(l)
}

// CountVowels counts a, e, i, o and u in s, either case.
func CountVowels(s string) int {
	n := 0
	for _, c := range strings.ToLower(s) {
		if strings.ContainsRune("aeiou", c) {
			n++
		}
	}
	return n
}
EOF
cat > strs_test.go <<'EOF'
package gostrs

import "testing"

func TestReverse(t *testing.T) {
	if got := Reverse("héllo"); got != "olléh" {
		t.Fatalf("Reverse = %q", got)
	}
}

func TestIsPalindrome(t *testing.T) {
	for _, s := range []string{"racecar", "Level"} {
		t.Run(s, func(t *testing.T) {
			if !IsPalindrome(s) {
				t.Fatalf("%q is a palindrome", s)
			}
		})
	}
}

func TestCountVowels(t *testing.T) {
	if got := CountVowels("Education"); got != 5 {
		t.Fatalf("CountVowels = %d, want 5", got)
	}
}
EOF
commit "Initial version"
upstream="$(git rev-parse --short=8 HEAD)"
git checkout -q -b bug-1
sed -i 's/	for _, c := range strings.ToLower(s) {/	for _, c := range s {/' strs.go
commit "Bug Patch"
# the break of the SWE-smith task: the bug taken out again (the gold patch) and another put in
git checkout -q -b break-1
sed -i 's/	for _, c := range s {/	for _, c := range strings.ToLower(s) {/' strs.go
sed -i 's/	l := strings.ToLower(s)/	l := s/' strs.go
commit "Break #1: palindromes are case-sensitive"
git checkout -q main
mkdir -p "$out/swesmith"
mv "$out/.gostrs-tmp" "$out/swesmith/mlang__gostrs.$upstream"
)

# ---------------------------------------------------------------------------------------------
(
new_repo "$out/mlang/rsnum" "Rust Author" rust@example.invalid 06
mkdir -p src tests
cp "$here/rust/Cargo.toml" "$here/rust/Cargo.lock" .
echo /target > .gitignore
cat > src/lib.rs <<'EOF'
//! Small number helpers.

/// The n-th Fibonacci number (fib(0) = 0).
pub fn fib(n: u32) -> u64 {
    let (mut a, mut b) = (0u64, 1u64);
    for _ in 0..n {
        let t = a + b;
        a = b;
        b = t;
    }
    a
}

/// Whether n is a prime number.
pub fn is_prime(n: u64) -> bool {
    let mut d = 2;
    while d * d <= n {
        if n % d == 0 {
            return false;
        }
        d += 1;
    }
    true
}

/// The decimal digits of n, most significant first.
pub fn digits(n: u64) -> Vec<u8> {
    n.to_string().bytes().map(|b| b - b'0').collect()
}
EOF
cat > tests/num.rs <<'EOF'
use rsnum::{digits, fib, is_prime};

#[test]
fn fib_small() {
    assert_eq!(fib(10), 55);
}

#[test]
fn fib_zero() {
    assert_eq!(fib(0), 0);
}

#[test]
fn primes_below_ten() {
    let p: Vec<u64> = (2..10).filter(|&n| is_prime(n)).collect();
    assert_eq!(p, vec![2, 3, 5, 7]);
}

#[test]
fn digits_of_a_number() {
    assert_eq!(digits(907), vec![9, 0, 7]);
}
EOF
commit "Initial version"

sed -i 's/^    let mut d = 2;$/    if n < 2 {\n        return false;\n    }\n    let mut d = 2;/' src/lib.rs
cat >> tests/num.rs <<'EOF'

#[test]
fn zero_and_one_are_not_prime() {
    assert!(!is_prime(0) && !is_prime(1));
}
EOF
commit "Fix #1: zero and one are not prime"
sed -i 's/^    let (mut a, mut b) = (0u64, 1u64);$/    let (mut a, mut b) = (1u64, 1u64);/' src/lib.rs
brk 1 "fib starts at one"
)

cd "$out"
for r in mlang/ccalc mlang/jsutil swesmith/mlang__gostrs.* mlang/rsnum; do
  echo "== $r"
  git -C "$r" log --all --format='%H %s'
done
