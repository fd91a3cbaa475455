/**
 * JUnit XML reports printed into the log (`cat target/surefire-reports/*.xml`, Gradle's
 * build/test-results, `ctest --output-junit`, Catch2 `-r junit`, PHPUnit `--log-junit`, ...): every
 * `<testsuites>` or `<testsuite>` document in it, each `<testcase>` named `classname.name` (or
 * `name` alone without a classname). No SWE-bench repository is graded so; it is the one format
 * every ecosystem's runners can write.
 */
import type { StatusMap, TestStatus } from '../status.js';
import { descendants, documentsIn, type XmlElement } from './xml.js';

/** `status` values of a case that did not run with no child saying so (CTest's disabled tests). */
const NOT_RUN = new Set(['disabled', 'notrun', 'skipped']);

/**
 * A skip wins over a failure (Catch2 marks a `[!mayfail]` failure skipped); a rerun's flakyFailure
 * is no failure; a case with no outcome child passed, unless its status says it never ran.
 */
function statusOf(testcase: XmlElement): TestStatus {
  const kinds = new Set(testcase.children.map((c) => c.name));
  if (kinds.has('skipped')) return 'SKIPPED';
  if (kinds.has('error')) return 'ERROR';
  if (kinds.has('failure')) return 'FAILED';
  return NOT_RUN.has(testcase.attrs.status ?? '') ? 'SKIPPED' : 'PASSED';
}

export function parseJunitXml(log: string): StatusMap {
  const map: StatusMap = new Map();
  for (const root of documentsIn(log, ['testsuites', 'testsuite'])) {
    for (const tc of descendants(root, 'testcase')) {
      const name = tc.attrs.name;
      if (name === undefined) continue;
      const cls = tc.attrs.classname ?? tc.attrs.class;
      map.set(cls ? `${cls}.${name}` : name, statusOf(tc));
    }
  }
  return map;
}
