/**
 * Log parsers by name, so a specs file can name one, plus SWE-bench's repository -> parser tables
 * for datasets whose specs do not name one. The names are the harness's (its `parse_log_<name>`
 * functions, which SWE-bench 5 rows also name in full: those spellings are accepted as well), so a
 * spec written for the harness works unchanged; `catch2`, `ctest`, `gotest_json` and `junit_xml`
 * are this project's, for runners no harness repository uses.
 */
import { InvalidInputError } from '../../errors.js';
import type { StatusMap } from '../status.js';
import { parseCatch2, parseCtest, parseDoctest, parseGoogletest, parseJq, parseMicropythonTest, parseRedis } from './c.js';
import { parseDjango } from './django.js';
import { parseGotest, parseGotestJson } from './go.js';
import { parseAnt, parseGradleCustom, parseMaven } from './java.js';
import { parseJest, parseJestJson, parseKarma, parseTap, parseVitest } from './javascript.js';
import { parseJunitXml } from './junit-xml.js';
import { parsePhpunit } from './php.js';
import { parseMatplotlib, parsePytest, parsePytestOptions, parsePytestV2, parseSeaborn } from './pytest.js';
import { parseCucumber, parseMinitest, parseRspecTransformedJson, parseRubyUnit } from './ruby.js';
import { parseCargo } from './rust.js';
import { parseSympy } from './sympy.js';
import { parseUnittest } from './unittest.js';

export type LogParser = (log: string) => StatusMap;

export type ParserLanguage = 'python' | 'c' | 'go' | 'java' | 'javascript' | 'php' | 'ruby' | 'rust' | 'any';

const PARSERS: ReadonlyMap<string, { parse: LogParser; language: ParserLanguage }> = new Map([
  ['pytest', { parse: parsePytest, language: 'python' }],
  ['pytest_v2', { parse: parsePytestV2, language: 'python' }],
  ['pytest_options', { parse: parsePytestOptions, language: 'python' }],
  ['matplotlib', { parse: parseMatplotlib, language: 'python' }],
  ['seaborn', { parse: parseSeaborn, language: 'python' }],
  ['django', { parse: parseDjango, language: 'python' }],
  ['sympy', { parse: parseSympy, language: 'python' }],
  ['unittest', { parse: parseUnittest, language: 'python' }],
  ['redis', { parse: parseRedis, language: 'c' }],
  ['jq', { parse: parseJq, language: 'c' }],
  ['doctest', { parse: parseDoctest, language: 'c' }],
  ['micropython_test', { parse: parseMicropythonTest, language: 'c' }],
  ['googletest', { parse: parseGoogletest, language: 'c' }],
  ['catch2', { parse: parseCatch2, language: 'c' }],
  ['ctest', { parse: parseCtest, language: 'c' }],
  ['gotest', { parse: parseGotest, language: 'go' }],
  ['gotest_json', { parse: parseGotestJson, language: 'go' }],
  ['maven', { parse: parseMaven, language: 'java' }],
  ['ant', { parse: parseAnt, language: 'java' }],
  ['gradle_custom', { parse: parseGradleCustom, language: 'java' }],
  ['jest', { parse: parseJest, language: 'javascript' }],
  ['jest_json', { parse: parseJestJson, language: 'javascript' }],
  ['vitest', { parse: parseVitest, language: 'javascript' }],
  ['karma', { parse: parseKarma, language: 'javascript' }],
  ['tap', { parse: parseTap, language: 'javascript' }],
  ['phpunit', { parse: parsePhpunit, language: 'php' }],
  ['minitest', { parse: parseMinitest, language: 'ruby' }],
  ['cucumber', { parse: parseCucumber, language: 'ruby' }],
  ['ruby_unit', { parse: parseRubyUnit, language: 'ruby' }],
  ['rspec_transformed_json', { parse: parseRspecTransformedJson, language: 'ruby' }],
  ['cargo', { parse: parseCargo, language: 'rust' }],
  ['junit_xml', { parse: parseJunitXml, language: 'any' }],
]);

export const PARSER_NAMES: readonly string[] = [...PARSERS.keys()];

/** The harness's own spelling of a parser's name (SWE-bench 5 rows' `log_parser`). */
const HARNESS_PREFIX = 'parse_log_';

/** The registry name `name` stands for (itself, or the harness's `parse_log_<name>`), or null when it names none. */
export function parserName(name: string): string | null {
  if (PARSERS.has(name)) return name;
  const bare = name.startsWith(HARNESS_PREFIX) ? name.slice(HARNESS_PREFIX.length) : null;
  return bare !== null && PARSERS.has(bare) ? bare : null;
}

function entry(name: string) {
  const canonical = parserName(name);
  const e = canonical === null ? undefined : PARSERS.get(canonical);
  if (e === undefined) {
    throw new InvalidInputError(`unknown log parser ${JSON.stringify(name)}`, `name one of: ${PARSER_NAMES.join(', ')}`);
  }
  return e;
}

export function getParser(name: string): LogParser {
  return entry(name).parse;
}

/** Which ecosystem's runner a parser reads: the harness appends test files to Python test commands only. */
export function parserLanguage(name: string): ParserLanguage {
  return entry(name).language;
}

/** SWE-bench's choice of parser per repository: its Python task instances, then SWE-bench Multilingual's. */
export const REPO_PARSERS: Readonly<Record<string, string>> = {
  'astropy/astropy': 'pytest_v2',
  'django/django': 'django',
  'marshmallow-code/marshmallow': 'pytest',
  'matplotlib/matplotlib': 'matplotlib',
  'mwaskom/seaborn': 'seaborn',
  'pallets/flask': 'pytest',
  'psf/requests': 'pytest_options',
  'pvlib/pvlib-python': 'pytest',
  'pydata/xarray': 'pytest',
  'pydicom/pydicom': 'pytest_options',
  'pylint-dev/astroid': 'pytest',
  'pylint-dev/pylint': 'pytest_options',
  'pytest-dev/pytest': 'pytest',
  'pyvista/pyvista': 'pytest',
  'scikit-learn/scikit-learn': 'pytest_v2',
  'sqlfluff/sqlfluff': 'pytest',
  'sphinx-doc/sphinx': 'pytest_v2',
  'sympy/sympy': 'sympy',
  // C and C++
  'redis/redis': 'redis',
  'valkey-io/valkey': 'redis',
  'jqlang/jq': 'jq',
  'nlohmann/json': 'doctest',
  'micropython/micropython': 'micropython_test',
  'fmtlib/fmt': 'googletest',
  // Go
  'caddyserver/caddy': 'gotest',
  'hashicorp/terraform': 'gotest',
  'prometheus/prometheus': 'gotest',
  'gohugoio/hugo': 'gotest',
  'gin-gonic/gin': 'gotest',
  // Java
  'google/gson': 'maven',
  'apache/druid': 'maven',
  'javaparser/javaparser': 'maven',
  'projectlombok/lombok': 'ant',
  'apache/lucene': 'gradle_custom',
  'reactivex/rxjava': 'gradle_custom',
  // JavaScript and TypeScript
  'babel/babel': 'jest',
  'facebook/docusaurus': 'jest',
  'vuejs/core': 'vitest',
  'preactjs/preact': 'karma',
  'mrdoob/three.js': 'tap',
  'axios/axios': 'tap',
  // PHP
  'phpoffice/phpspreadsheet': 'phpunit',
  'laravel/framework': 'phpunit',
  'php-cs-fixer/php-cs-fixer': 'phpunit',
  'briannesbitt/carbon': 'phpunit',
  // Ruby
  'fluent/fluentd': 'ruby_unit',
  'faker-ruby/faker': 'ruby_unit',
  'fastlane/fastlane': 'rspec_transformed_json',
  'jordansissel/fpm': 'rspec_transformed_json',
  'rubocop/rubocop': 'rspec_transformed_json',
  // Rust
  'burntsushi/ripgrep': 'cargo',
  'sharkdp/bat': 'cargo',
  'astral-sh/ruff': 'cargo',
  'tokio-rs/tokio': 'cargo',
  'tokio-rs/axum': 'cargo',
  'uutils/coreutils': 'cargo',
  'nushell/nushell': 'cargo',
};

/**
 * Repositories whose instances the harness grades with different runners: it picks by the pull
 * request number in the instance id, which SWE-bench Multilingual also uses as the version.
 */
export const REPO_VERSION_PARSERS: Readonly<Record<string, Readonly<Record<string, string>>>> = {
  'immutable-js/immutable-js': { '2006': 'jest', '2005': 'jest_json' },
  'jekyll/jekyll': { '9141': 'minitest', '8047': 'minitest', '8167': 'minitest', '8761': 'cucumber', '8771': 'cucumber' },
};

/**
 * The harness's parser for (repo, version): from REPO_VERSION_PARSERS, else REPO_PARSERS; null when
 * it has none (a repository it does not know, or a version of a per-instance one it never graded).
 */
export function defaultParser(repo: string, version: string): string | null {
  const byVersion = REPO_VERSION_PARSERS[repo];
  if (byVersion !== undefined) return Object.hasOwn(byVersion, version) ? byVersion[version]! : null;
  return Object.hasOwn(REPO_PARSERS, repo) ? REPO_PARSERS[repo]! : null;
}
