/** The build sandbox's git settings keep what the parent environment sets through GIT_CONFIG_COUNT. */
import { describe, expect, it } from 'vitest';
import { buildGitConfigEnv } from './build-git-config.js';

describe('buildGitConfigEnv', () => {
  it('numbers from 0 without a parent count, and after the parent’s own entries with one', () => {
    expect(buildGitConfigEnv({})).toEqual({
      GIT_CONFIG_COUNT: '2',
      GIT_CONFIG_KEY_0: 'url.file:///.insteadOf',
      GIT_CONFIG_VALUE_0: '/',
      GIT_CONFIG_KEY_1: 'protocol.file.allow',
      GIT_CONFIG_VALUE_1: 'always',
    });
    expect(buildGitConfigEnv({ GIT_CONFIG_COUNT: '1', GIT_CONFIG_KEY_0: 'core.autocrlf', GIT_CONFIG_VALUE_0: 'false' })).toEqual({
      GIT_CONFIG_COUNT: '3',
      GIT_CONFIG_KEY_1: 'url.file:///.insteadOf',
      GIT_CONFIG_VALUE_1: '/',
      GIT_CONFIG_KEY_2: 'protocol.file.allow',
      GIT_CONFIG_VALUE_2: 'always',
    });
  });

  it('starts at 0 over a parent count git would reject', () => {
    expect(buildGitConfigEnv({ GIT_CONFIG_COUNT: 'lots' }).GIT_CONFIG_KEY_0).toBe('url.file:///.insteadOf');
  });
});
