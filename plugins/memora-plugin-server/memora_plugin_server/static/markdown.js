// A small Markdown renderer for model answers, safe by construction: every piece of the text is
// HTML-escaped before any tag of ours is added, and links are kept only for http(s) URLs.
// Supports fenced code, headings, lists, block quotes, tables (GitHub's pipes), paragraphs,
// **bold**, *italic*, `code` and [links](https://...).  Unfinished Markdown (a stream mid-way) renders as text.

export function escapeHtml(text) {
  return String(text)
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;")
    .replace(/'/g, "&#39;");
}

function inline(text) {
  // code spans first, so nothing inside them is formatted
  const parts = String(text).split(/(`[^`\n]+`)/);
  return parts
    .map((part, i) => {
      if (i % 2 === 1) return "<code>" + escapeHtml(part.slice(1, -1)) + "</code>";
      let s = escapeHtml(part);
      s = s.replace(/\[([^\]\n]+)\]\((https?:\/\/[^\s)]+)\)/g, (_, label, url) =>
        '<a href="' + url + '" rel="noopener noreferrer nofollow" target="_blank">' + label + "</a>");
      s = s.replace(/\*\*([^*\n]+)\*\*/g, "<strong>$1</strong>");
      s = s.replace(/(^|[^*])\*([^*\n]+)\*/g, "$1<em>$2</em>");
      return s;
    })
    .join("");
}

export function renderMarkdown(source) {
  const lines = String(source).replace(/\r\n?/g, "\n").split("\n");
  const out = [];
  let i = 0;
  let para = [];
  const flush = () => {
    if (para.length) out.push("<p>" + para.map(inline).join("<br>") + "</p>");
    para = [];
  };
  while (i < lines.length) {
    const line = lines[i];
    const fence = line.match(/^\s*(```|~~~)\s*([\w+-]*)\s*$/);
    if (fence) {
      flush();
      const body = [];
      i += 1;
      while (i < lines.length && !lines[i].trim().startsWith(fence[1])) body.push(lines[i++]);
      i += 1; // the closing fence (or the end of a stream still arriving)
      const lang = fence[2] ? ' class="language-' + escapeHtml(fence[2]) + '"' : "";
      out.push("<pre><code" + lang + ">" + escapeHtml(body.join("\n")) + "</code></pre>");
      continue;
    }
    const heading = line.match(/^(#{1,6})\s+(.*)$/);
    if (heading) {
      flush();
      const n = heading[1].length;
      out.push("<h" + n + ">" + inline(heading[2]) + "</h" + n + ">");
      i += 1;
      continue;
    }
    const bullet = /^\s*([-*+]|\d+[.)])\s+/;
    if (bullet.test(line)) {
      flush();
      const ordered = /^\s*\d/.test(line);
      const items = [];
      while (i < lines.length && bullet.test(lines[i])) items.push(lines[i++].replace(bullet, ""));
      const tag = ordered ? "ol" : "ul";
      out.push("<" + tag + ">" + items.map((t) => "<li>" + inline(t) + "</li>").join("") + "</" + tag + ">");
      continue;
    }
    // a table: a row of pipes, then a |---|:---:| line; its rows until a line without a pipe
    const cells = (row) => row.trim().replace(/^\|/, "").replace(/\|$/, "").split("|").map((c) => c.trim());
    const rule = /^\s*\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$/;
    if (line.includes("|") && i + 1 < lines.length && rule.test(lines[i + 1]) && lines[i + 1].includes("-")) {
      flush();
      const head = cells(line);
      const aligns = cells(lines[i + 1]).map((c) => (c.startsWith(":") && c.endsWith(":") ? "center" : c.endsWith(":") ? "right" : ""));
      // alignment by class: the page's Content-Security-Policy allows no inline style
      const cell = (tag, text, n) => "<" + tag + (aligns[n] ? ' class="' + aligns[n] + '"' : "") + ">" + inline(text) + "</" + tag + ">";
      i += 2;
      const body = [];
      while (i < lines.length && lines[i].includes("|") && lines[i].trim()) body.push(cells(lines[i++]));
      out.push(
        '<div class="table"><table><thead><tr>' + head.map((c, n) => cell("th", c, n)).join("") + "</tr></thead><tbody>" +
          body.map((r) => "<tr>" + head.map((_, n) => cell("td", r[n] || "", n)).join("") + "</tr>").join("") +
          "</tbody></table></div>",
      );
      continue;
    }
    if (/^\s*>\s?/.test(line)) {
      flush();
      const quoted = [];
      while (i < lines.length && /^\s*>\s?/.test(lines[i])) quoted.push(lines[i++].replace(/^\s*>\s?/, ""));
      out.push("<blockquote>" + renderMarkdown(quoted.join("\n")) + "</blockquote>");
      continue;
    }
    if (!line.trim()) {
      flush();
      i += 1;
      continue;
    }
    para.push(line);
    i += 1;
  }
  flush();
  return out.join("\n");
}
