/**
 * A bounded capture of a process's output. A flooding test suite must neither exhaust memory nor
 * lose the lines that grading reads: pytest's `-rA` summary and the end marker come last, the
 * apply result and start marker come first. So the head and the tail are kept and the middle is
 * replaced by one line saying how much was dropped.
 */
export interface CappedOutput {
  text: string;
  truncated: boolean;
  totalBytes: number;
}

export interface OutputCap {
  push(chunk: Buffer): void;
  finish(): CappedOutput;
}

export function createOutputCap(maxBytes: number): OutputCap {
  const headMax = Math.floor(maxBytes / 4);
  const tailMax = maxBytes - headMax;
  const head: Buffer[] = [];
  let headBytes = 0;
  let tail: Buffer[] = [];
  let tailBytes = 0;
  let total = 0;
  return {
    push(chunk) {
      total += chunk.length;
      if (headBytes < headMax) {
        const take = Math.min(headMax - headBytes, chunk.length);
        head.push(chunk.subarray(0, take));
        headBytes += take;
        chunk = chunk.subarray(take);
        if (chunk.length === 0) return;
      }
      tail.push(chunk);
      tailBytes += chunk.length;
      if (tailBytes > tailMax * 2) {
        // Compact now and then rather than per chunk: amortised O(1) per byte.
        const joined = Buffer.concat(tail);
        tail = [joined.subarray(joined.length - tailMax)];
        tailBytes = tailMax;
      }
    },
    finish() {
      let tailBuf = Buffer.concat(tail);
      if (tailBuf.length > tailMax) tailBuf = tailBuf.subarray(tailBuf.length - tailMax);
      const dropped = total - headBytes - tailBuf.length;
      if (dropped === 0) return { text: Buffer.concat([...head, tailBuf]).toString('utf8'), truncated: false, totalBytes: total };
      return { text: joinElided(Buffer.concat(head), tailBuf, dropped), truncated: true, totalBytes: total };
    },
  };
}

/**
 * Head and tail of an output with `dropped` bytes between them, cut back to whole lines so no
 * half line is parsed as a test result, joined by one line saying how much is missing.
 */
export function joinElided(head: Buffer, tail: Buffer, dropped: number): string {
  const kept = head.subarray(0, head.lastIndexOf(0x0a) + 1);
  const keptTail = tail.subarray(tail.indexOf(0x0a) + 1);
  const elided = dropped + (head.length - kept.length) + (tail.length - keptTail.length);
  return `${kept.toString('utf8')}[minisandbox: ${elided} bytes of output elided]\n${keptTail.toString('utf8')}`;
}
