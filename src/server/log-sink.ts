/**
 * The request log's default sink. stderr to a file or pipe is written synchronously, a syscall per
 * line; lines logged within one turn of the event loop go out in one write instead, so a busy
 * server (many requests answered per turn) spends one write per turn on its log.
 */
export interface LineSink {
  write(line: string): void;
  /** Writes what is gathered now (at shutdown). */
  flush(): void;
}

export function batchedLines(out: (text: string) => void): LineSink {
  let lines: string[] = [];
  let scheduled = false;
  const flush = (): void => {
    scheduled = false;
    if (lines.length === 0) return;
    const text = `${lines.join('\n')}\n`;
    lines = [];
    out(text);
  };
  return {
    write: (line) => {
      lines.push(line);
      if (!scheduled) {
        scheduled = true;
        setImmediate(flush);
      }
    },
    flush,
  };
}
