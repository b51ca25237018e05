// A small Markdown subset rendered as DOM nodes, for model output in the chat page.
// Safety rule: model text only ever becomes Text nodes (createTextNode / textContent); no string
// is parsed as HTML, so `<script>` or `<img onerror>` in an answer shows as those characters.
// Blocks: paragraphs (single newlines kept as line breaks), ``` fenced code (an unclosed fence
// while streaming is code up to the end), # headings, - / * / + and 1. lists, > quotes.
// Inline: `code`, **bold**, *italic* / _italic_. Links stay plain text (never clickable).
"use strict";

(function () {
  const FENCE = /^\s{0,3}(`{3,}|~{3,})\s*([\w+#.-]*)\s*$/;
  const HEADING = /^\s{0,3}(#{1,6})\s+(.*?)\s*#*\s*$/;
  const BULLET = /^\s{0,3}[-*+]\s+(.*)$/;
  const ORDERED = /^\s{0,3}(\d{1,9})[.)]\s+(.*)$/;
  const QUOTE = /^\s{0,3}>\s?(.*)$/;
  // One inline token: `code` | **bold** | *italic* | _italic_ (underscores not inside words).
  const INLINE =
    /(`+)([^`]|[^`][\s\S]*?[^`])\1(?!`)|\*\*(?=\S)([\s\S]*?\S)\*\*|\*(?=[^\s*])([^*]*?[^\s*])\*|(?<![\p{L}\p{N}_])_(?=[^\s_])([^_]*?[^\s_])_(?![\p{L}\p{N}_])/gu;

  function el(tag, className) {
    const e = document.createElement(tag);
    if (className) e.className = className;
    return e;
  }

  // Appends `text` to `parent` with inline formatting.
  function renderInline(text, parent) {
    let last = 0;
    for (const m of text.matchAll(INLINE)) {  // matchAll iterates a copy: recursion is safe
      if (m.index > last) parent.appendChild(document.createTextNode(text.slice(last, m.index)));
      let node;
      if (m[1] !== undefined) {
        node = el("code");
        node.textContent = m[2];
      } else if (m[3] !== undefined) {
        node = el("strong");
        renderInline(m[3], node);
      } else {
        node = el("em");
        renderInline(m[4] !== undefined ? m[4] : m[5], node);
      }
      parent.appendChild(node);
      last = m.index + m[0].length;
    }
    if (last < text.length) parent.appendChild(document.createTextNode(text.slice(last)));
  }

  // Inline text whose lines are separated by <br>.
  function renderLines(lines, parent) {
    lines.forEach((line, i) => {
      if (i > 0) parent.appendChild(el("br"));
      renderInline(line, parent);
    });
  }

  // Markdown text -> DocumentFragment.
  function render(text) {
    const out = document.createDocumentFragment();
    const lines = String(text).replace(/\r\n?/g, "\n").split("\n");
    let para = [];
    const flush = () => {
      if (para.length) {
        const p = el("p");
        renderLines(para, p);
        out.appendChild(p);
        para = [];
      }
    };
    for (let i = 0; i < lines.length; ) {
      const line = lines[i];
      let m;
      if ((m = FENCE.exec(line))) {
        flush();
        const fence = m[1];
        const code = [];
        for (i++; i < lines.length; i++) {
          const close = lines[i].trim();
          if (close.length >= fence.length && close === fence[0].repeat(close.length)) {
            i++;
            break;
          }
          code.push(lines[i]);
        }
        const pre = el("pre");
        const c = el("code");
        if (m[2]) {
          c.dataset.lang = m[2];
          pre.dataset.lang = m[2];
        }
        c.textContent = code.join("\n");
        pre.appendChild(c);
        out.appendChild(pre);
        continue;
      }
      if (line.trim() === "") {
        flush();
        i++;
        continue;
      }
      if ((m = HEADING.exec(line))) {
        flush();
        const h = el("h" + Math.min(6, m[1].length + 2));  // # -> h3: answers sit below the page title
        renderInline(m[2], h);
        out.appendChild(h);
        i++;
        continue;
      }
      if (BULLET.test(line) || ORDERED.test(line)) {
        flush();
        const ordered = !BULLET.test(line);
        const list = el(ordered ? "ol" : "ul");
        const first = ORDERED.exec(line);
        if (ordered && first && first[1] !== "1") list.start = Number(first[1]);
        const re = ordered ? ORDERED : BULLET;
        while (i < lines.length && (m = re.exec(lines[i]))) {
          const item = el("li");
          renderInline(ordered ? m[2] : m[1], item);
          list.appendChild(item);
          i++;
        }
        out.appendChild(list);
        continue;
      }
      if (QUOTE.test(line)) {
        flush();
        const q = el("blockquote");
        const quoted = [];
        while (i < lines.length && (m = QUOTE.exec(lines[i]))) {
          quoted.push(m[1]);
          i++;
        }
        q.appendChild(render(quoted.join("\n")));
        out.appendChild(q);
        continue;
      }
      para.push(line);
      i++;
    }
    flush();
    return out;
  }

  window.MimoMarkdown = Object.freeze({ render });
})();
