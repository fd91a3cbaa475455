/**
 * A SWE-ReX client's requests over plain HTTP, as its RemoteRuntime sends them: X-API-Key auth,
 * JSON bodies (or a form), GET for is_alive and POST for the rest; answers parsed, and SWE-ReX
 * exceptions (HTTP 511) checked for their shape and class path.
 */
import { expect } from 'vitest';

export interface RexResponse {
  status: number;
  body: Record<string, unknown>;
  text: string;
}

export interface RexException {
  message: string;
  extra_info: Record<string, unknown>;
}

export class SwerexClient {
  constructor(
    private readonly url: () => string,
    private readonly token: () => string,
  ) {}

  async rex(key: string, route: string, body?: unknown, o: { headers?: Record<string, string>; form?: FormData } = {}): Promise<RexResponse> {
    const headers: Record<string, string> = { 'x-api-key': this.token(), ...(o.headers ?? {}) };
    let payload: string | FormData | undefined = o.form;
    if (body !== undefined) {
      payload = JSON.stringify(body);
      headers['content-type'] = 'application/json';
    }
    const r = await fetch(`${this.url()}/swerex/${key}/${route}`, {
      method: route === 'is_alive' ? 'GET' : 'POST',
      headers,
      ...(payload === undefined ? {} : { body: payload }),
    });
    const text = await r.text();
    let parsed: Record<string, unknown> = {};
    try {
      parsed = JSON.parse(text) as Record<string, unknown>;
    } catch {
      // left empty: the caller looks at the status
    }
    return { status: r.status, body: parsed, text };
  }

  async ok(key: string, route: string, body?: unknown, headers?: Record<string, string>): Promise<Record<string, unknown>> {
    const r = await this.rex(key, route, body, headers === undefined ? {} : { headers });
    expect(r.status, r.text).toBe(200);
    return r.body;
  }

  /** A SWE-ReX exception answer: HTTP 511 with the exception's class path. */
  async raises(key: string, route: string, body: unknown, classPath: string): Promise<RexException> {
    const r = await this.rex(key, route, body);
    expect(r.status, r.text).toBe(511);
    const exc = r.body.swerexception as RexException & { class_path: string; traceback: string };
    expect(Object.keys(exc).sort()).toEqual(['class_path', 'extra_info', 'message', 'traceback']);
    expect(exc.class_path).toBe(classPath);
    return exc;
  }
}

/** A BashObservation as SWE-ReX answers it. */
export const observation = (output: string, exit_code: number | null, expect_string = 'SHELLPS1PREFIX') => ({
  output,
  exit_code,
  failure_reason: '',
  expect_string,
  session_type: 'bash',
});
