import { describe, expect, it } from 'vitest';
import { descendants, documentsIn, readElement, XmlError } from './xml.js';

describe('the XML report reader', () => {
  it('reads attributes with entities, skips comments, CDATA, declarations and text, in document order', () => {
    const src =
      '<?xml version="1.0"?><!DOCTYPE r><r a="x &amp; &lt;y&gt; &#65;&#x42;"><!-- <c/> --><c n=\'1\'>t<![CDATA[<c n="no"/>]]></c><d><c n="2"/></d></r>';
    const { element, end } = readElement(src, src.indexOf('<r'));
    expect(end).toBe(src.length);
    expect(element.attrs.a).toBe('x & <y> AB');
    expect(descendants(element, 'c').map((c) => c.attrs.n)).toEqual(['1', '2']);
  });

  it('refuses a mismatched or unclosed element and an unknown entity', () => {
    expect(() => readElement('<a><b></a>', 0)).toThrow(XmlError);
    expect(() => readElement('<a><b>', 0)).toThrow(XmlError);
    expect(() => readElement('<a x="&nope;"/>', 0)).toThrow(XmlError);
  });

  it('finds every document of the given roots in a log, passing over other text and malformed ones', () => {
    const log = 'noise <testsuite-ish>\n<testsuite n="1"><testcase/></testsuite>\n<testsuites n="broken"><x></testsuites>\n<testsuites n="2"/>';
    expect(documentsIn(log, ['testsuites', 'testsuite']).map((d) => d.attrs.n)).toEqual(['1', '2']);
  });

  it('walks a deeply nested document without recursion', () => {
    const depth = 100_000;
    const src = `${'<a>'.repeat(depth)}<b/>${'</a>'.repeat(depth)}`;
    expect(descendants(readElement(src, 0).element, 'b')).toHaveLength(1);
  });
});
