/**
 * Django's test runner (`./tests/runtests.py --verbosity 2`), read as the SWE-bench harness reads
 * it: a test's name is whatever precedes ` ... ` on its result line (for a test with a docstring
 * that is the docstring's first line, which is what the datasets list), a result may come on a
 * later line after the test's own output (`ok` alone), and a few multi-line interruptions by
 * system-check or server-error noise are recognised across lines.
 */
import type { StatusMap } from '../status.js';

const PASS_SUFFIXES = [' ... ok', ' ... OK', ' ...  OK'];

/** "<test> ... <noise spanning lines>\nok" forms seen in Django logs. */
const INTERRUPTED = [
  /^(.*?)\s\.\.\.\sTesting against Django installed in ([\s\S]*?) silenced\)\.\nok$/gm,
  /^(.*?)\s\.\.\.\sInternal Server Error: \/(.*)\/\nok$/gm,
  /^(.*?)\s\.\.\.\sSystem check identified no issues \(0 silenced\)\nok$/gm,
];

export function parseDjango(log: string): StatusMap {
  const map: StatusMap = new Map();
  let prevTest: string | null = null;
  for (const raw of log.split('\n')) {
    let line = raw.trim();
    if (line.includes('--version is equivalent to version')) map.set('--version is equivalent to version', 'PASSED');
    if (line.includes(' ... ')) prevTest = line.split(' ... ')[0]!;
    for (const suffix of PASS_SUFFIXES) {
      if (!line.endsWith(suffix)) continue;
      // django__django-7188: a migration's progress line runs into the test's result line.
      if (line.startsWith('Applying sites.0002_alter_domain_unique...test_no_migrations')) {
        line = line.slice(line.indexOf('...') + 3).trim();
      }
      map.set(line.slice(0, line.lastIndexOf(suffix)), 'PASSED');
      break;
    }
    if (line.includes(' ... skipped')) map.set(line.split(' ... skipped')[0]!, 'SKIPPED');
    if (line.endsWith(' ... FAIL')) map.set(line.split(' ... FAIL')[0]!, 'FAILED');
    if (line.startsWith('FAIL:')) map.set(line.split(/\s+/)[1] ?? '', 'FAILED');
    if (line.endsWith(' ... ERROR')) map.set(line.split(' ... ERROR')[0]!, 'ERROR');
    if (line.startsWith('ERROR:')) map.set(line.split(/\s+/)[1] ?? '', 'ERROR');
    // The result came after the test's own output, on a line of its own.
    if (line.startsWith('ok') && prevTest !== null) map.set(prevTest, 'PASSED');
  }
  for (const re of INTERRUPTED) {
    for (const m of log.matchAll(re)) map.set(m[1]!, 'PASSED');
  }
  return map;
}
