// Typesets formulas with KaTeX, for docs/hooks/math.py: KaTeX's HTML (drawn with KaTeX's CSS and
// fonts, which the hook ships inside the site) and its MathML (for screen readers and copying).
// stdin: a JSON list of {"tex": "...", "display": true|false}; stdout: {"katex": version,
// "results": [...]}, in the same order, each {"html": "..."} or {"error": "..."}.
"use strict";
const katex = require("katex");

let input = "";
process.stdin.setEncoding("utf8");
process.stdin.on("data", (chunk) => { input += chunk; });
process.stdin.on("end", () => {
  const results = JSON.parse(input).map(({ tex, display }) => {
    try {
      // strict: what KaTeX would only warn about (input that is not LaTeX) is an error here.
      const options = { displayMode: display, output: "htmlAndMathml", throwOnError: true, strict: "error" };
      return { html: katex.renderToString(tex, options) };
    } catch (error) {
      return { error: String(error.message || error) };
    }
  });
  process.stdout.write(JSON.stringify({ katex: katex.version, results }));
});
