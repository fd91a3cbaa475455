/**
 * Log parsers by name, so a specs file can name one, plus SWE-bench's repository -> parser table
 * for datasets whose specs do not name one.
 */
import { InvalidInputError } from '../../errors.js';
import type { StatusMap } from '../status.js';
import { parseDjango } from './django.js';
import { parseMatplotlib, parsePytest, parsePytestOptions, parsePytestV2, parseSeaborn } from './pytest.js';
import { parseSympy } from './sympy.js';
import { parseUnittest } from './unittest.js';

export type LogParser = (log: string) => StatusMap;

const PARSERS: ReadonlyMap<string, LogParser> = new Map<string, LogParser>([
  ['pytest', parsePytest],
  ['pytest_v2', parsePytestV2],
  ['pytest_options', parsePytestOptions],
  ['matplotlib', parseMatplotlib],
  ['seaborn', parseSeaborn],
  ['django', parseDjango],
  ['sympy', parseSympy],
  ['unittest', parseUnittest],
]);

export const PARSER_NAMES: readonly string[] = [...PARSERS.keys()];

export function getParser(name: string): LogParser {
  const p = PARSERS.get(name);
  if (p === undefined) {
    throw new InvalidInputError(`unknown log parser ${JSON.stringify(name)}`, `name one of: ${PARSER_NAMES.join(', ')}`);
  }
  return p;
}

/** SWE-bench's choice of parser per repository (Python task instances). */
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
};
