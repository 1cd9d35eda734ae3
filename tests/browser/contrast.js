// WCAG 2 contrast of every visible text on the page against what is drawn behind it.
// Returns the texts below AA: 4.5:1, or 3:1 for large text (24 px, or 18.66 px bold).
// Backgrounds are composited up the ancestor chain (translucent badges over cards); an
// element over a background image or inside an SVG chart is skipped (Plotly draws its own).
(() => {
  function parse(text) {
    let m = text.match(/^rgba?\(([^)]+)\)$/);
    if (m) {
      const p = m[1].split(/[ ,/]+/).filter(Boolean).map(Number);
      return [p[0], p[1], p[2], p.length > 3 ? p[3] : 1];
    }
    m = text.match(/^color\(srgb ([^)]+)\)$/);
    if (m) {
      const p = m[1].split(/[ /]+/).filter(Boolean).map(Number);
      return [p[0] * 255, p[1] * 255, p[2] * 255, p.length > 3 ? p[3] : 1];
    }
    return null;
  }
  function over(top, below) {
    const a = top[3] + below[3] * (1 - top[3]);
    if (a === 0) return [0, 0, 0, 0];
    const mix = (i) => (top[i] * top[3] + below[i] * below[3] * (1 - top[3])) / a;
    return [mix(0), mix(1), mix(2), a];
  }
  function background(el) {
    const layers = [];
    for (let node = el; node && node.nodeType === 1; node = node.parentElement) {
      const style = getComputedStyle(node);
      if (style.backgroundImage !== "none" && !node.matches("body, html")) return null;
      const colour = parse(style.backgroundColor);
      if (colour && colour[3] > 0) {
        layers.push(colour);
        if (colour[3] >= 1) break;
      }
    }
    let result = [255, 255, 255, 1];
    for (let i = layers.length - 1; i >= 0; i--) result = over(layers[i], result);
    return result;
  }
  function luminance(c) {
    const f = (v) => { v /= 255; return v <= 0.03928 ? v / 12.92 : Math.pow((v + 0.055) / 1.055, 2.4); };
    return 0.2126 * f(c[0]) + 0.7152 * f(c[1]) + 0.0722 * f(c[2]);
  }
  const failures = [];
  const seen = new Set();
  const walker = document.createTreeWalker(document.body, NodeFilter.SHOW_TEXT);
  while (walker.nextNode()) {
    const text = walker.currentNode;
    const el = text.parentElement;
    if (!el || !text.textContent.trim() || seen.has(el)) continue;
    seen.add(el);
    if (el.closest("svg, .plot, option, [hidden], details:not([open]) > :not(summary)")) continue;
    const rect = el.getBoundingClientRect();
    if (rect.width === 0 || rect.height === 0) continue;
    const style = getComputedStyle(el);
    if (style.visibility === "hidden" || parseFloat(style.opacity) === 0) continue;
    const bg = background(el);
    const fg = parse(style.color);
    if (!bg || !fg) continue;
    const colour = over(fg, bg);
    const [a, b] = [luminance(colour), luminance(bg)];
    const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
    const size = parseFloat(style.fontSize);
    const bold = parseInt(style.fontWeight, 10) >= 700;
    const need = size >= 24 || (bold && size >= 18.66) ? 3 : 4.5;
    if (ratio < need) {
      failures.push(`${ratio.toFixed(2)} < ${need}: <${el.tagName.toLowerCase()} class="${el.className}"> ${text.textContent.trim().slice(0, 40)}`);
    }
  }
  return failures;
})()
